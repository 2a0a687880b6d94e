// File kinds (file_kind.h).
#include "bitsplit/file_kind.h"

#include "bitsplit/delta_format.h"
#include "bitsplit/split_format.h"

namespace bitsplit {

Result<FileKind> file_kind(const gguf::Metadata& metadata) {
  BITSPLIT_ASSIGN_OR_RETURN(std::string type, metadata.get_string_or("general.type", ""));
  if (type == kDeltaFileType) return FileKind::kDelta;
  if (type == "bitsplit.imatrix") return FileKind::kImatrix;
  if (type == "adapter") return FileKind::kAdapter;
  BITSPLIT_ASSIGN_OR_RETURN(auto split, read_split_format(metadata));
  return split.has_value() ? FileKind::kBitSplitModel : FileKind::kModel;
}

const char* file_kind_description(FileKind kind) {
  switch (kind) {
    case FileKind::kModel: return "a model";
    case FileKind::kBitSplitModel: return "a converted bit-split model";
    case FileKind::kDelta: return "a BitDelta delta file";
    case FileKind::kImatrix: return "an importance matrix";
    case FileKind::kAdapter: return "an adapter file (LoRA)";
  }
  return "an unknown kind of file";
}

Status require_model(const WeightSource& source, ModelUse use) {
  auto kind = file_kind(source.metadata());
  if (!kind) return kind.status().with_context(source.path());
  const std::string head = source.path() + ": is " + file_kind_description(*kind) + ", not a model";
  switch (*kind) {
    case FileKind::kModel: return Status::ok();
    case FileKind::kBitSplitModel:
      if (use == ModelUse::kAny) return Status::ok();
      return Status::error(source.path() +
                           ": is a converted bit-split model; this needs the original model it was converted from");
    case FileKind::kDelta:
      return Status::error(head + "; load its base model and register this file as a variant of it");
    case FileKind::kImatrix:
      return Status::error(head + "; it is an input to conversion");
    case FileKind::kAdapter:
      return Status::error(head + "; load its base model and register the adapter as a variant (--lora NAME=FILE)");
  }
  return Status::ok();
}

}  // namespace bitsplit
