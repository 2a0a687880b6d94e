// What a GGUF file holds: a model (original or converted to bit-split planes), or one of the
// side files that ride on a model (a BitDelta delta, an importance matrix, a LoRA adapter).
// Entry points check the kind first, so a side file given where a model belongs gets an error
// saying what it is and where it goes instead of a complaint about a missing metadata key.
#pragma once

#include <string>

#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

enum class FileKind {
  kModel,          // an original model (f32, f16 or llama.cpp-quantised tensors)
  kBitSplitModel,  // a model converted by `bitsplit convert`
  kDelta,          // a BitDelta variant (`bitsplit delta`)
  kImatrix,        // an importance matrix (`bitsplit imatrix`)
  kAdapter,        // a llama.cpp adapter (general.type = adapter), e.g. LoRA
};

// From general.type and the bit-split metadata; an error for malformed bit-split metadata.
Result<FileKind> file_kind(const gguf::Metadata& metadata);

// "a BitDelta delta file", "an importance matrix", ...
const char* file_kind_description(FileKind kind);

// Which models an entry point takes.
enum class ModelUse {
  kAny,       // run, info, eval: an original or a bit-split model
  kOriginal,  // convert, quantize, delta, and bases for variants: the original model only
};

// ok when `source` holds a model usable for `use`; else an error naming the file, what it is
// and what to do with it.
Status require_model(const WeightSource& source, ModelUse use);

}  // namespace bitsplit
