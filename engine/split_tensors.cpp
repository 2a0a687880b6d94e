// Naming, metadata and loading of bit-split planes in converted files, and the importance
// matrix file format.
#include <cstring>

#include "bitsplit/convert.h"

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

namespace {

// Checks a plane tensor's presence, type and shape.
Status check_plane(const WeightSource& source, const std::string& name, gguf::TensorType type, int64_t row_elems,
                   int64_t rows) {
  const gguf::TensorInfo* t = source.find_tensor(name);
  if (!t) return Status::error(source.path() + ": tensor '" + name + "' is missing");
  if (t->type != type || t->dims != std::vector<int64_t>{row_elems, rows}) {
    return Status::error(source.path() + ": tensor '" + name + "' is " + gguf::tensor_type_name(t->type) + " " +
                         t->shape_string() + ", expected " + gguf::tensor_type_name(type) + " [" +
                         std::to_string(row_elems) + ", " + std::to_string(rows) + "]");
  }
  return Status::ok();
}

}  // namespace

Result<SplitProjection> load_split_planes(const WeightSource& source, const std::string& base, int64_t in,
                                          int64_t out, const SplitFormat& f) {
  SplitProjection p = SplitProjection::sized(out, in, f.group, f.draft_bits, f.residual_bits);
  // Each plane's bytes are copied as stored (I8 codes, little-endian F16 scales) into the
  // buffers sized for the shape; check_plane has already matched the sizes.
  const auto tensors = split_plane_tensors(base, in, f);
  const std::pair<void*, size_t> dest[kSplitPlanes] = {
      {p.draft_codes.data(), p.draft_codes.size()},         {p.draft_scales.data(), p.draft_scales.size() * 2},
      {p.draft_offsets.data(), p.draft_offsets.size() * 2}, {p.resid_codes.data(), p.resid_codes.size()},
      {p.resid_scales.data(), p.resid_scales.size() * 2}};
  for (int i = 0; i < kSplitPlanes; ++i) {
    const SplitPlaneTensor& st = tensors[size_t(i)];
    BITSPLIT_RETURN_IF_ERROR(check_plane(source, st.name, st.type, st.row, out));
    const gguf::TensorInfo& t = *source.find_tensor(st.name);
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> raw, source.raw_bytes(t));
    BITSPLIT_CHECK(raw.size() == dest[i].second, "plane size checked above");
    std::memcpy(dest[i].first, raw.data(), dest[i].second);
    source.release(t);
  }
  return p;
}

Result<std::vector<float>> load_split_f32(const WeightSource& source, const std::string& base, int64_t in,
                                          int64_t out, const SplitFormat& f, bool with_residual) {
  BITSPLIT_ASSIGN_OR_RETURN(SplitProjection p, load_split_planes(source, base, in, out, f));
  return p.dequantize(with_residual);
}

Result<ImportanceMatrix> read_imatrix(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(path));
  auto kind = file.metadata().get_string_or("general.type", "");
  if (!kind || *kind != "bitsplit.imatrix") {
    return Status::error(path + ": not a bitsplit importance matrix (general.type is not 'bitsplit.imatrix'); "
                         "make one with `bitsplit imatrix`");
  }
  ImportanceMatrix m;
  for (const auto& t : file.tensors()) {
    if (t.dims.size() != 1 || t.type != gguf::TensorType::F32) {
      return Status::error(path + ": tensor '" + t.name + "' must be a 1-D F32 vector");
    }
    BITSPLIT_ASSIGN_OR_RETURN(m[t.name], file.read_f32(t));
  }
  return m;
}

Status write_imatrix(const ImportanceMatrix& imatrix, int64_t n_tokens, const std::string& source_text,
                     const std::string& path) {
  gguf::Writer w;
  w.metadata().set("general.type", gguf::Value::string("bitsplit.imatrix"));
  w.metadata().set("imatrix.tokens", gguf::Value::u64(uint64_t(n_tokens)));
  w.metadata().set("imatrix.text", gguf::Value::string(source_text));
  for (const auto& [name, v] : imatrix) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    BITSPLIT_RETURN_IF_ERROR(w.add_tensor(name, gguf::TensorType::F32, {int64_t(v.size())}, std::move(bytes)));
  }
  return w.write_file(path);
}

}  // namespace bitsplit
