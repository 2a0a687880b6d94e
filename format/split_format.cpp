// Naming and metadata of bit-split planes in converted files.
#include <cstring>

#include "bitsplit/split_format.h"

namespace bitsplit {

Result<std::optional<SplitFormat>> read_split_format(const gguf::Metadata& m) {
  if (!m.contains("bitsplit.format_version")) return std::optional<SplitFormat>();
  BITSPLIT_ASSIGN_OR_RETURN(int64_t version, m.get_int("bitsplit.format_version"));
  if (version != kSplitFormatVersion) {
    return Status::error("bitsplit.format_version " + std::to_string(version) + " is not supported (this build reads " +
                         std::to_string(kSplitFormatVersion) + "); convert the model again");
  }
  SplitFormat f;
  BITSPLIT_ASSIGN_OR_RETURN(int64_t group, m.get_int("bitsplit.group_size"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t draft, m.get_int("bitsplit.draft_bits"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t residual, m.get_int("bitsplit.residual_bits"));
  if (group != 32 && group != 64 && group != 128) return Status::error("bitsplit.group_size must be 32, 64 or 128");
  if (draft != 2 && draft != 3 && draft != 4) return Status::error("bitsplit.draft_bits must be 2, 3 or 4");
  if (residual != 6 && residual != 8) return Status::error("bitsplit.residual_bits must be 6 or 8");
  f.group = int(group);
  f.draft_bits = int(draft);
  f.residual_bits = int(residual);
  return std::optional<SplitFormat>(f);
}

SplitTensorNames split_tensor_names(const std::string& base) {
  return {base + ".draft_codes", base + ".draft_scales", base + ".draft_offsets", base + ".resid_codes",
          base + ".resid_scales"};
}

std::array<SplitPlaneTensor, kSplitPlanes> split_plane_tensors(const std::string& base, int64_t in,
                                                                const SplitFormat& f) {
  const SplitTensorNames n = split_tensor_names(base);
  const int64_t groups = quant::groups_per_row(in, f.group);
  using gguf::TensorType;
  return {{{n.draft_codes, TensorType::I8, quant::code_row_bytes(in, f.group, f.draft_bits)},
           {n.draft_scales, TensorType::F16, groups},
           {n.draft_offsets, TensorType::F16, groups},
           {n.resid_codes, TensorType::I8, quant::code_row_bytes(in, f.group, f.residual_bits)},
           {n.resid_scales, TensorType::F16, groups}}};
}

bool is_split_projection(const std::string& name) {
  // "output.weight" or "blk.<digits>.<projection>.weight".
  if (name == "output.weight") return true;
  const std::string_view prefix = "blk.", suffix = ".weight";
  std::string_view n = name;
  if (!n.starts_with(prefix) || !n.ends_with(suffix)) return false;
  n = n.substr(prefix.size(), n.size() - prefix.size() - suffix.size());
  size_t digits = 0;
  while (digits < n.size() && n[digits] >= '0' && n[digits] <= '9') ++digits;
  if (digits == 0 || digits >= n.size() || n[digits] != '.') return false;
  const std::string_view kind = n.substr(digits + 1);
  for (const char* p : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
    if (kind == p) return true;
  return false;
}

}  // namespace bitsplit
