// Split GGUF sets (llama.cpp's gguf-split convention): a model stored as PREFIX-00001-of-0000N.gguf
// ... PREFIX-0000N-of-0000N.gguf, each part a GGUF file with `split.no` (0-based), `split.count`
// and `split.tensors.count`; the first part holds the model's metadata, every part some tensors.
// open_weights() (weights.h) opens a set given its first part, checking every part.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bitsplit/weights.h"

namespace bitsplit {

inline constexpr const char* kSplitNoKey = "split.no";
inline constexpr const char* kSplitCountKey = "split.count";
inline constexpr const char* kSplitTensorsCountKey = "split.tensors.count";
// Written by bitsplit into every part of a set it writes (a random id): a part from another set
// is then recognised even when its name, count and tensor names fit. Sets written by
// llama.cpp's gguf-split carry no id and are checked by part number, count and tensors only.
inline constexpr const char* kSplitSetIdKey = "bitsplit.split.set_id";

// Whether a metadata key describes a file's place in a split set (split.*, the set id): keys a
// writer copying a model's metadata into a new file must leave out.
bool is_split_set_key(std::string_view key);

// The file name of part `index` (0-based) of `count` with the given path prefix.
std::string split_part_path(const std::string& prefix, int index, int count);

// For a path that follows the naming convention: its prefix, part index (0-based) and count.
struct SplitName {
  std::string prefix;
  int index = 0;
  int count = 0;
};
std::optional<SplitName> parse_split_name(const std::string& path);

// The whole set behind `first` (already opened, with split.count > 1): opens the other parts,
// checks that each is the part its name says, of the same set (count and tensor total), with
// no tensor twice; errors name the missing or mismatched part.
Result<std::unique_ptr<WeightSource>> open_split_set(gguf::File first);

// How a split set is cut: a part ends before the tensor that would take it past either limit
// (0: no limit); every part holds at least one tensor, so a tensor larger than max_bytes gets a
// part of its own.
struct SplitLimits {
  uint64_t max_bytes = 0;    // tensor data per part
  uint64_t max_tensors = 0;  // tensors per part
};

// Writes the metadata and tensors `writer` declares as a split set PREFIX-00001-of-0000N.gguf
// ..., N following from `limits`; `produce` gives the bytes of tensor i of the writer. Parts are written under temporary names and renamed only when all
// are complete, so a failure or an interrupt leaves none of them. Returns the part paths.
Result<std::vector<std::string>> write_split_set(const gguf::Writer& writer, const std::string& prefix,
                                                 SplitLimits limits, const gguf::Writer::TensorProducer& produce);

// Writes `writer`'s model to `path`: one file without limits, else a split set named from `path`
// without its .gguf (write_split_set). Returns the paths written.
Result<std::vector<std::string>> write_model_file(const gguf::Writer& writer, const std::string& path,
                                                  SplitLimits limits, const gguf::Writer::TensorProducer& produce);

}  // namespace bitsplit
