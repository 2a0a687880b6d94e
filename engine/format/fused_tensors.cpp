// Row-range views of fused projections (fused_tensors.h).
#include "bitsplit/fused_tensors.h"

#include <map>

namespace bitsplit {
namespace {

// A view: rows [first_row, first_row + dims[1]) of a fused tensor of the inner source.
struct Slice {
  const gguf::TensorInfo* fused;
  int64_t first_row;
  uint64_t row_bytes;
};

class UnfusedWeights final : public WeightSource {
 public:
  UnfusedWeights(std::unique_ptr<WeightSource> inner, std::vector<gguf::TensorInfo> tensors, std::map<std::string, Slice> slices)
      : inner_(std::move(inner)), tensors_(std::move(tensors)), slices_(std::move(slices)) {
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }
  const std::string& path() const override { return inner_->path(); }
  const gguf::Metadata& metadata() const override { return inner_->metadata(); }
  const std::vector<gguf::TensorInfo>& tensors() const override { return tensors_; }
  const gguf::TensorInfo* find_tensor(std::string_view name) const override {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  Result<std::vector<float>> load_f32(const gguf::TensorInfo& t) const override {
    const Slice* s = slice_of(t);
    if (!s) return inner_->load_f32(t);
    // The fused tensor's own entry (so a split set finds its part by name), narrowed to the rows.
    gguf::TensorInfo rows = *s->fused;
    rows.dims = t.dims;  // 2-D: the fused tensor may be a 3-D stack of experts
    rows.offset += uint64_t(s->first_row) * s->row_bytes;
    rows.nbytes = uint64_t(t.dims[1]) * s->row_bytes;
    return inner_->load_f32(rows);
  }
  Result<std::span<const uint8_t>> raw_bytes(const gguf::TensorInfo& t) const override {
    const Slice* s = slice_of(t);
    if (!s) return inner_->raw_bytes(t);
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> all, inner_->raw_bytes(*s->fused));
    return all.subspan(size_t(uint64_t(s->first_row) * s->row_bytes), size_t(uint64_t(t.dims[1]) * s->row_bytes));
  }
  std::shared_ptr<const void> keep_alive() const override { return inner_->keep_alive(); }
  void will_need(const gguf::TensorInfo& t) const override {
    const Slice* s = slice_of(t);
    inner_->will_need(s ? *s->fused : t);
  }
  void release(const gguf::TensorInfo& t) const override {
    // The fused tensor's pages serve its other views too: released with the last one only.
    const Slice* s = slice_of(t);
    if (!s) return inner_->release(t);
    if (s->first_row + t.dims[1] == s->fused->rows()) inner_->release(*s->fused);
  }
  Result<std::string> content_sha256() const override { return inner_->content_sha256(); }
  std::string describe() const override { return inner_->describe() + ", fused or stacked projections read as separate tensors"; }

 private:
  const Slice* slice_of(const gguf::TensorInfo& t) const {
    auto it = slices_.find(t.name);
    return it == slices_.end() ? nullptr : &it->second;
  }

  std::unique_ptr<WeightSource> inner_;
  std::vector<gguf::TensorInfo> tensors_;
  std::map<std::string, Slice> slices_;
  std::map<std::string, size_t> index_;
};

bool is_stacked_experts(const gguf::TensorInfo& t) {
  return t.dims.size() == 3 && (t.name.ends_with(".ffn_gate_exps.weight") || t.name.ends_with(".ffn_up_exps.weight") ||
                                t.name.ends_with(".ffn_down_exps.weight"));
}

// The widths phi3's fused tensors split into: q, k, v and the FFN width.
struct Phi3Widths {
  int64_t q = 0, kv = 0, ff = 0, embd = 0;
};

Result<Phi3Widths> phi3_widths(const gguf::Metadata& m) {
  const std::string p = "phi3.";
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_embd, m.get_int(p + "embedding_length"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_heads, m.get_int(p + "attention.head_count"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_ff, m.get_int(p + "feed_forward_length"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_kv, m.get_int_or(p + "attention.head_count_kv", n_heads));
  if (n_heads <= 0 || n_embd % n_heads != 0) {
    return Status::error(p + "embedding_length is not a multiple of attention.head_count");
  }
  BITSPLIT_ASSIGN_OR_RETURN(int64_t head_dim, m.get_int_or(p + "attention.key_length", n_embd / n_heads));
  return Phi3Widths{n_heads * head_dim, n_kv * head_dim, n_ff, n_embd};
}

}  // namespace

Result<std::unique_ptr<WeightSource>> unfuse_projections(std::unique_ptr<WeightSource> source) {
  const gguf::Metadata& m = source->metadata();
  auto arch = m.get_string_or("general.architecture", "");
  if (!arch) return source;
  bool phi3_fused = false, experts = false;
  for (const auto& t : source->tensors()) {
    phi3_fused = phi3_fused || (*arch == "phi3" && t.name.ends_with(".attn_qkv.weight"));
    experts = experts || is_stacked_experts(t);
  }
  if (!phi3_fused && !experts) return source;
  auto ctx = [&](const Status& s) { return s.with_context(source->path()); };
  Phi3Widths phi3;
  if (phi3_fused) {
    auto w = phi3_widths(m);
    if (!w) return ctx(w.status());
    phi3 = *w;
  }

  std::vector<gguf::TensorInfo> tensors;
  std::map<std::string, Slice> slices;
  for (const auto& t : source->tensors()) {
    const bool stacked = is_stacked_experts(t);
    const bool qkv = phi3_fused && t.name.ends_with(".attn_qkv.weight");
    const bool gate_up = phi3_fused && t.name.ends_with(".ffn_up.weight") && t.dims.size() == 2 && t.dims[1] == 2 * phi3.ff;
    if (!stacked && !qkv && !gate_up) {
      tensors.push_back(t);
      continue;
    }
    const std::string block = t.name.substr(0, t.name.find('.', 4) + 1);  // "blk.N."
    std::vector<std::pair<std::string, int64_t>> parts;  // view kind, rows
    if (stacked) {
      // [cols, rows, n_expert]: expert e is rows e·rows .. (e+1)·rows of the flattened matrix.
      const std::string kind = t.name.substr(block.size(), t.name.size() - block.size() - std::string("_exps.weight").size());
      for (int64_t e = 0; e < t.dims[2]; ++e) parts.push_back({kind + "." + std::to_string(e), t.dims[1]});
    } else {
      const int64_t expected = qkv ? phi3.q + 2 * phi3.kv : 2 * phi3.ff;
      if (t.dims.size() != 2 || t.dims[1] != expected) {
        return ctx(Status::error("tensor '" + t.name + "' has shape " + t.shape_string() + ", expected [" +
                                 std::to_string(phi3.embd) + ", " + std::to_string(expected) + "]"));
      }
      if (qkv) {
        parts = {{"attn_q", phi3.q}, {"attn_k", phi3.kv}, {"attn_v", phi3.kv}};
      } else {
        parts = {{"ffn_gate", phi3.ff}, {"ffn_up", phi3.ff}};  // the gate is the first half
      }
    }
    auto traits = gguf::tensor_type_traits(uint32_t(t.type));
    if (!traits || t.dims[0] <= 0 || t.dims[0] % traits->block_size != 0) {
      return ctx(Status::error("tensor '" + t.name + "': rows are not whole blocks of its type"));
    }
    const uint64_t row_bytes = uint64_t(t.dims[0] / traits->block_size) * uint64_t(traits->type_size);
    int64_t row = 0;
    for (const auto& [kind, rows] : parts) {
      gguf::TensorInfo view = t;
      view.name = block + kind + ".weight";
      view.dims = {t.dims[0], rows};
      view.offset = t.offset + uint64_t(row) * row_bytes;
      view.nbytes = uint64_t(rows) * row_bytes;
      tensors.push_back(view);
      slices.emplace(view.name, Slice{&t, row, row_bytes});
      row += rows;
    }
  }
  return std::unique_ptr<WeightSource>(std::make_unique<UnfusedWeights>(std::move(source), std::move(tensors), std::move(slices)));
}

}  // namespace bitsplit
