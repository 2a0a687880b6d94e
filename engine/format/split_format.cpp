// Naming and metadata of bit-split planes in converted files.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bitsplit/split_format.h"

namespace bitsplit {

Result<std::optional<SplitFormat>> read_split_format(const gguf::Metadata& m) {
  if (!m.contains("bitsplit.format_version")) return std::optional<SplitFormat>();
  BITSPLIT_ASSIGN_OR_RETURN(int64_t version, m.get_int("bitsplit.format_version"));
  if (version < 1 || version > kSplitFormatVersion) {
    return Status::error("bitsplit.format_version " + std::to_string(version) +
                         " is not supported (this build reads versions 1 to " + std::to_string(kSplitFormatVersion) +
                         "); convert the model again with this build");
  }
  SplitFormat f;
  f.version = uint32_t(version);
  BITSPLIT_ASSIGN_OR_RETURN(int64_t group, m.get_int("bitsplit.group_size"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t draft, m.get_int("bitsplit.draft_bits"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t residual, m.get_int("bitsplit.residual_bits"));
  if (group != 32 && group != 64 && group != 128) return Status::error("bitsplit.group_size must be 32, 64 or 128");
  if (draft != 2 && draft != 3 && draft != 4) return Status::error("bitsplit.draft_bits must be 2, 3 or 4");
  if (residual != 6 && residual != 8) return Status::error("bitsplit.residual_bits must be 6 or 8");
  f.group = int(group);
  f.draft_bits = int(draft);
  f.residual_bits = int(residual);
  if (m.contains("bitsplit.draft_bits.tensors") || m.contains("bitsplit.draft_bits.values")) {
    BITSPLIT_ASSIGN_OR_RETURN(auto names, m.get_string_array("bitsplit.draft_bits.tensors"));
    BITSPLIT_ASSIGN_OR_RETURN(auto values, m.get_int_array("bitsplit.draft_bits.values"));
    if (names.size() != values.size()) {
      return Status::error("bitsplit.draft_bits.tensors has " + std::to_string(names.size()) +
                           " names but bitsplit.draft_bits.values has " + std::to_string(values.size()) + " values");
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (values[i] != 2 && values[i] != 3 && values[i] != 4) {
        return Status::error("bitsplit.draft_bits.values: '" + names[i] + "' has " + std::to_string(values[i]) +
                             " draft bits (2, 3 or 4 expected)");
      }
      if (!f.draft_bits_by_tensor.emplace(names[i], int(values[i])).second) {
        return Status::error("bitsplit.draft_bits.tensors names '" + names[i] + "' twice");
      }
    }
  }
  return std::optional<SplitFormat>(f);
}

void write_split_format(const SplitFormat& f, gguf::Metadata& m) {
  using gguf::Value;
  m.set("bitsplit.format_version", Value::u32(f.version));
  m.set("bitsplit.group_size", Value::u32(uint32_t(f.group)));
  m.set("bitsplit.draft_bits", Value::u32(uint32_t(f.draft_bits)));
  m.set("bitsplit.residual_bits", Value::u32(uint32_t(f.residual_bits)));
  if (f.draft_bits_by_tensor.empty()) return;
  std::vector<std::string> names;
  std::vector<int32_t> values;
  for (const auto& [name, bits] : f.draft_bits_by_tensor) {
    names.push_back(name);
    values.push_back(bits);
  }
  m.set("bitsplit.draft_bits.tensors", Value::string_array(names));
  m.set("bitsplit.draft_bits.values", Value::i32_array(values));
}

std::string describe_draft_bits(const std::map<std::string, int>& bits, double bits_per_weight) {
  std::map<int, int> count;
  std::vector<std::string> widest;
  int top = 0;
  for (const auto& [name, b] : bits) top = std::max(top, b);
  for (const auto& [name, b] : bits) {
    ++count[b];
    if (b == top) widest.push_back(name);
  }
  char head[64];
  std::snprintf(head, sizeof head, "draft %.2f bits/weight:", bits_per_weight);
  std::string s = head;
  const char* sep = " ";
  for (const auto& [b, n] : count) {
    s.append(sep).append(std::to_string(b)).append("-bit x").append(std::to_string(n));
    sep = ", ";
  }
  if (count.size() > 1) {
    s.append(" (").append(std::to_string(top)).append("-bit:");
    for (size_t i = 0; i < widest.size() && i < 6; ++i) s += std::string(i ? ", " : " ") + widest[i];
    if (widest.size() > 6) s += ", ...";
    s += ")";
  }
  return s;
}

SplitTensorNames split_tensor_names(const std::string& base) {
  return {base + ".draft_codes", base + ".draft_scales", base + ".draft_offsets",
          base + ".resid_codes", base + ".resid_scales", base + ".resid_packed"};
}

bool is_residual_plane_tensor(const std::string& name) {
  return name.ends_with(".resid_codes") || name.ends_with(".resid_scales") || name.ends_with(".resid_packed");
}

std::vector<SplitPlaneTensor> split_plane_tensors(const std::string& base, int64_t in, int64_t out,
                                                  const SplitFormat& f) {
  const SplitTensorNames n = split_tensor_names(base);
  const int64_t groups = quant::groups_per_row(in, f.group);
  using gguf::TensorType;
  std::vector<SplitPlaneTensor> t = {
      {n.draft_codes, TensorType::I8, quant::code_row_bytes(in, f.group, f.draft_bits_for(base)), out,
       SplitPlane::kDraftCodes},
      {n.draft_scales, TensorType::F16, groups, out, SplitPlane::kDraftScales},
      {n.draft_offsets, TensorType::F16, groups, out, SplitPlane::kDraftOffsets}};
  if (f.packed_residual()) {
    const quant::PackedShape s = quant::packed_shape(out, in, f.group, f.residual_bits, false);
    t.push_back({n.resid_packed, TensorType::I8, s.tile_bytes, s.tiles, SplitPlane::kResidPacked});
  } else {
    t.push_back({n.resid_codes, TensorType::I8, quant::code_row_bytes(in, f.group, f.residual_bits), out,
                 SplitPlane::kResidCodes});
    t.push_back({n.resid_scales, TensorType::F16, groups, out, SplitPlane::kResidScales});
  }
  return t;
}

bool split_block_name(std::string_view name, int64_t* layer, std::string* rest) {
  if (!name.starts_with("blk.")) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4) return false;
  int64_t v = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (int64_t(1) << 40)) return false;
    v = v * 10 + (name[i] - '0');
  }
  *layer = v;
  *rest = std::string(name.substr(dot + 1));
  return true;
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
  std::string_view kind = n.substr(digits + 1);
  for (const char* p : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_shexp",
                        "ffn_up_shexp", "ffn_down_shexp"})
    if (kind == p) return true;
  // An expert's projection: "ffn_gate.<expert>" (fused_tensors.h's views of the stacked tensors).
  const size_t dot = kind.find('.');
  if (dot == std::string_view::npos || dot + 1 == kind.size()) return false;
  for (char ch : kind.substr(dot + 1))
    if (ch < '0' || ch > '9') return false;
  kind = kind.substr(0, dot);
  return kind == "ffn_gate" || kind == "ffn_up" || kind == "ffn_down";
}

}  // namespace bitsplit
