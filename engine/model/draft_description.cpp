// The draft model's description for a device (what Backend::make_device_draft takes).
#include "bitsplit/draft_description.h"

#include <algorithm>
#include <array>

#include "bitsplit/variant.h"

namespace bitsplit {

namespace {

using Plane = gpu::DraftModelHost::Plane;

const float* data_or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// describe_device_draft's steps, with what they share: the draft, the variant (may be null), the
// description being filled and the group every plane must share.
class DraftDescriber {
 public:
  DraftDescriber(const Model& draft, const Variant* variant) : draft_(draft), variant_(variant), c_(draft.config()) {}

  // The shape: the config's own (a ModelConfig is a ModelShape).
  void describe_shape() { m_.shape = c_; }

  // The embedding (and a variant's signs and LoRA on it), the output norm, the RoPE factors the
  // sequence's context picks. A variant's full tensors replace the base's norms and biases; a
  // full replacement of anything larger stays on the host path.
  Status describe_embedding(int64_t context) {
    if (draft_.token_embd().empty()) return Status::error("the draft has no f32 token embedding");
    if (variant_) {
      for (const std::string& name : variant_->full_names()) {
        if (name.ends_with("norm.weight") || name.ends_with(".bias")) continue;
        return Status::error("the variant replaces " + name + " in full (the device draft takes signs, norms and biases)");
      }
    }
    embd_signs_ = variant_ ? variant_->signs("token_embd.weight") : nullptr;
    if (embd_signs_) m_.embd_signs = embd_signs_->view();
    if (variant_) m_.embd_lora = lora_view(variant_->lora("token_embd.weight"));
    m_.token_embd = draft_.token_embd().data();
    m_.output_norm = pick("output_norm.weight", draft_.output_norm()).data();
    const std::vector<float>& factors = draft_.rope_freq_factors(context);
    m_.rope_freq_factors = factors.empty() ? nullptr : factors.data();
    return Status::ok();
  }

  Status describe_layers() {
    m_.layers.resize(size_t(c_.n_layers));
    for (int64_t l = 0; l < c_.n_layers; ++l) BITSPLIT_RETURN_IF_ERROR(describe_layer(l));
    return Status::ok();
  }

  // The head's plane; then the description, with the planes' group.
  Result<gpu::DraftModelHost> finish() {
    BITSPLIT_RETURN_IF_ERROR(plane("output.weight", m_.head));
    m_.group = group_;
    return std::move(m_);
  }

 private:
  // Layer l: its norms, biases and RoPE, and every projection's plane.
  Status describe_layer(int64_t l) {
    const LayerWeights& w = draft_.layer(l);
    gpu::DraftModelHost::Layer& d = m_.layers[size_t(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    d.attn_norm = pick(b + "attn_norm.weight", w.attn_norm).data();
    d.ffn_norm = pick(b + "ffn_norm.weight", w.ffn_norm).data();
    d.post_attn_norm = c_.has_post_norms ? data_or_null(pick(b + "post_attention_norm.weight", w.post_attn_norm)) : nullptr;
    d.post_ffn_norm = c_.has_post_norms ? data_or_null(pick(b + "post_ffw_norm.weight", w.post_ffn_norm)) : nullptr;
    d.swa = c_.is_swa(l);
    d.rope_base = c_.layer_rope_base(l);
    d.rope_freq_scale = c_.layer_rope_freq_scale(l);
    d.q_norm = c_.has_qk_norm ? data_or_null(pick(b + "attn_q_norm.weight", w.q_norm)) : nullptr;
    d.k_norm = c_.has_qk_norm ? data_or_null(pick(b + "attn_k_norm.weight", w.k_norm)) : nullptr;
    d.bq = c_.has_qkv_bias ? data_or_null(pick(b + "attn_q.bias", w.bq)) : nullptr;
    d.bk = c_.has_qkv_bias ? data_or_null(pick(b + "attn_k.bias", w.bk)) : nullptr;
    d.bv = c_.has_qkv_bias ? data_or_null(pick(b + "attn_v.bias", w.bv)) : nullptr;
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_q.weight", d.wq));
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_k.weight", d.wk));
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_v.weight", d.wv));
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_output.weight", d.wo));
    if (c_.is_moe()) return describe_experts(b, w, d);
    return ffn(b, "", {&d.gate, &d.up, &d.down});
  }

  // `base` unless the variant replaces `name` in full.
  const std::vector<float>& pick(const std::string& name, const std::vector<float>& base) const {
    return variant_ ? variant_->pick(name, base) : base;
  }

  // A LoRA variant's factors (forward_pass applies the same, in the same order).
  Plane::Lora lora_view(const VariantLora* l) {
    Plane::Lora v;
    if (!l) return v;
    v.up = l->up.data();
    v.down = l->down.data();
    v.rank = l->rank;
    v.scale = l->scale;
    m_.max_lora_rank = std::max(m_.max_lora_rank, l->rank);
    return v;
  }

  // A projection's draft plane (in the file layout, keyed by its SplitProjection) with the
  // variant's signs and LoRA change on it.
  Status plane(const std::string& name, Plane& out) {
    const SplitProjection* p = draft_.split(name);
    if (!p) return Status::error(name + " is not a bit-split projection (held in f32)");
    if (p->draft_codes.empty()) return Status::error(name + ": the draft plane's file layout was released");
    if (group_ == 0) group_ = p->group;
    if (p->group != group_) return Status::error(name + " has group " + std::to_string(p->group) + ", others " + std::to_string(group_));
    out.key = p;
    out.plane = p->draft();
    // A tied head takes the embedding's signs, as in forward_pass.
    const VariantSigns* v = !variant_                                    ? nullptr
                            : name == "output.weight" && c_.tied_output ? embd_signs_
                                                                         : variant_->signs(name);
    if (v) {
      out.signs_key = v->signs.data();
      out.signs = v->view();
    }
    // Variant::make gives a head read from the embedding the embedding's LoRA under this name.
    if (variant_) out.lora = lora_view(variant_->lora(name));
    return Status::ok();
  }

  // Gate, up and down of one FFN ("ffn_gate" + suffix + ".weight", ...).
  Status ffn(const std::string& b, const std::string& suffix, std::array<Plane*, 3> to) {
    const char* kinds[3] = {"ffn_gate", "ffn_up", "ffn_down"};
    for (int k = 0; k < 3; ++k) BITSPLIT_RETURN_IF_ERROR(plane(b + kinds[k] + suffix + ".weight", *to[size_t(k)]));
    return Status::ok();
  }

  // Every expert (a pass runs the routed ones), the router, a shared expert and its gate.
  Status describe_experts(const std::string& b, const LayerWeights& w, gpu::DraftModelHost::Layer& d) {
    d.router = data_or_null(pick(b + "ffn_gate_inp.weight", w.ffn_gate_inp));
    if (!d.router) return Status::error(b + "ffn_gate_inp.weight (the router) is not held in f32");
    d.experts.resize(size_t(3 * c_.n_expert));
    for (size_t e = 0; e < size_t(c_.n_expert); ++e) {
      std::string suffix(1, '.');  // (not "." + ...: GCC 12's -Wrestrict misfires on that)
      suffix += std::to_string(e);
      BITSPLIT_RETURN_IF_ERROR(ffn(b, suffix, {&d.experts[3 * e], &d.experts[3 * e + 1], &d.experts[3 * e + 2]}));
    }
    if (c_.n_ff_shexp > 0) {
      BITSPLIT_RETURN_IF_ERROR(ffn(b, "_shexp", {&d.shexp_gate, &d.shexp_up, &d.shexp_down}));
      d.shexp_gate_inp = data_or_null(pick(b + "ffn_gate_inp_shexp.weight", w.ffn_gate_inp_shexp));
      if (!d.shexp_gate_inp) return Status::error(b + "ffn_gate_inp_shexp.weight is not held in f32");
    }
    return Status::ok();
  }

  const Model& draft_;
  const Variant* variant_;
  const ModelConfig& c_;
  gpu::DraftModelHost m_;
  const VariantSigns* embd_signs_ = nullptr;
  int group_ = 0;
};

}  // namespace

Result<gpu::DraftModelHost> describe_device_draft(const Model& draft, const Variant* variant, int64_t context) {
  DraftDescriber describer(draft, variant);
  describer.describe_shape();
  BITSPLIT_RETURN_IF_ERROR(describer.describe_embedding(context));
  BITSPLIT_RETURN_IF_ERROR(describer.describe_layers());
  return describer.finish();
}

}  // namespace bitsplit
