// The draft model's description for a device (what Backend::make_device_draft takes).
#include "bitsplit/draft_description.h"

#include <algorithm>

#include "bitsplit/variant.h"

namespace bitsplit {

Result<gpu::DraftModelHost> describe_device_draft(const Model& draft, const Variant* variant, int64_t context) {
  const ModelConfig& c = draft.config();
  gpu::DraftModelHost m;
  m.n_layers = c.n_layers;
  m.n_embd = c.n_embd;
  m.n_heads = c.n_heads;
  m.n_kv_heads = c.n_kv_heads;
  m.head_dim = c.head_dim;
  m.n_ff = c.n_ff;
  m.n_vocab = c.n_vocab;
  m.n_rot = c.n_rot;
  m.rope_base = c.rope_base;
  m.rope_freq_scale = c.rope_freq_scale;
  m.rms_eps = c.rms_eps;
  m.rope_neox = c.rope_order == cpu::RopeOrder::kNeox;
  m.embd_scale = c.embd_scale;
  m.attn_scale = c.attn_scale;
  m.attn_softcap = c.attn_softcap;
  m.final_softcap = c.final_softcap;
  m.gelu = c.ffn_act == FfnActivation::kGeluTanh;
  m.sliding_window = c.sliding_window;
  m.n_expert = c.n_expert;
  m.n_expert_used = c.n_expert_used;
  m.n_ff_exp = c.n_ff_exp;
  m.n_ff_shexp = c.n_ff_shexp;
  m.expert_weights_norm = c.expert_weights_norm;
  if (draft.token_embd().empty()) return Status::error("the draft has no f32 token embedding");
  // A variant: its sign planes join the planes, its full tensors (norms, biases) replace the
  // base's; a full replacement of anything larger stays on the host path.
  auto pick = [&](const std::string& name, const std::vector<float>& base) -> const std::vector<float>& {
    return variant ? variant->pick(name, base) : base;
  };
  if (variant) {
    for (const std::string& name : variant->full_names()) {
      if (name.ends_with("norm.weight") || name.ends_with(".bias")) continue;
      return Status::error("the variant replaces " + name + " in full (the device draft takes signs, norms and biases)");
    }
  }
  const VariantSigns* embd_signs = variant ? variant->signs("token_embd.weight") : nullptr;
  if (embd_signs) m.embd_signs = embd_signs->view();
  // A LoRA variant's factors (forward_pass applies the same, in the same order).
  auto lora_view = [&](const VariantLora* l) {
    gpu::DraftModelHost::Plane::Lora v;
    if (!l) return v;
    v.up = l->up.data();
    v.down = l->down.data();
    v.rank = l->rank;
    v.scale = l->scale;
    m.max_lora_rank = std::max(m.max_lora_rank, l->rank);
    return v;
  };
  if (variant) m.embd_lora = lora_view(variant->lora("token_embd.weight"));
  m.token_embd = draft.token_embd().data();
  m.output_norm = pick("output_norm.weight", draft.output_norm()).data();
  const std::vector<float>& factors = draft.rope_freq_factors(context);
  m.rope_freq_factors = factors.empty() ? nullptr : factors.data();
  m.rope_attn_factor = c.rope_attn_factor;
  int group = 0;
  auto plane = [&](const std::string& name, gpu::DraftModelHost::Plane& out) -> Status {
    const SplitProjection* p = draft.split(name);
    if (!p) return Status::error(name + " is not a bit-split projection (held in f32)");
    if (p->draft_codes.empty()) return Status::error(name + ": the draft plane's file layout was released");
    if (group == 0) group = p->group;
    if (p->group != group) return Status::error(name + " has group " + std::to_string(p->group) + ", others " + std::to_string(group));
    out.key = p;
    out.plane = p->draft();
    // A tied head takes the embedding's signs, as in forward_pass.
    const VariantSigns* v = !variant                                          ? nullptr
                            : name == "output.weight" && c.tied_output ? embd_signs
                                                                        : variant->signs(name);
    if (v) {
      out.signs_key = v->signs.data();
      out.signs = v->view();
    }
    // Variant::make gives a head read from the embedding the embedding's LoRA under this name.
    if (variant) out.lora = lora_view(variant->lora(name));
    return Status::ok();
  };
  auto opt = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  m.layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = draft.layer(l);
    gpu::DraftModelHost::Layer& d = m.layers[size_t(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    d.attn_norm = pick(b + "attn_norm.weight", w.attn_norm).data();
    d.ffn_norm = pick(b + "ffn_norm.weight", w.ffn_norm).data();
    d.post_attn_norm = c.has_post_norms ? opt(pick(b + "post_attention_norm.weight", w.post_attn_norm)) : nullptr;
    d.post_ffn_norm = c.has_post_norms ? opt(pick(b + "post_ffw_norm.weight", w.post_ffn_norm)) : nullptr;
    d.swa = c.is_swa(l);
    d.rope_base = c.layer_rope_base(l);
    d.rope_freq_scale = c.layer_rope_freq_scale(l);
    d.q_norm = c.has_qk_norm ? opt(pick(b + "attn_q_norm.weight", w.q_norm)) : nullptr;
    d.k_norm = c.has_qk_norm ? opt(pick(b + "attn_k_norm.weight", w.k_norm)) : nullptr;
    d.bq = c.has_qkv_bias ? opt(pick(b + "attn_q.bias", w.bq)) : nullptr;
    d.bk = c.has_qkv_bias ? opt(pick(b + "attn_k.bias", w.bk)) : nullptr;
    d.bv = c.has_qkv_bias ? opt(pick(b + "attn_v.bias", w.bv)) : nullptr;
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_q.weight", d.wq));
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_k.weight", d.wk));
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_v.weight", d.wv));
    BITSPLIT_RETURN_IF_ERROR(plane(b + "attn_output.weight", d.wo));
    // Gate, up and down of one FFN ("ffn_gate" + suffix + ".weight", ...).
    auto ffn = [&](const std::string& suffix, gpu::DraftModelHost::Plane* to[3]) -> Status {
      const char* kinds[3] = {"ffn_gate", "ffn_up", "ffn_down"};
      for (int k = 0; k < 3; ++k) BITSPLIT_RETURN_IF_ERROR(plane(b + kinds[k] + suffix + ".weight", *to[k]));
      return Status::ok();
    };
    if (c.is_moe()) {  // every expert (a pass runs the routed ones), the router, a shared expert
      d.router = opt(pick(b + "ffn_gate_inp.weight", w.ffn_gate_inp));
      if (!d.router) return Status::error(b + "ffn_gate_inp.weight (the router) is not held in f32");
      d.experts.resize(size_t(3 * c.n_expert));
      for (size_t e = 0; e < size_t(c.n_expert); ++e) {
        gpu::DraftModelHost::Plane* to[3] = {&d.experts[3 * e], &d.experts[3 * e + 1], &d.experts[3 * e + 2]};
        BITSPLIT_RETURN_IF_ERROR(ffn("." + std::to_string(e), to));
      }
      if (c.n_ff_shexp > 0) {
        gpu::DraftModelHost::Plane* to[3] = {&d.shexp_gate, &d.shexp_up, &d.shexp_down};
        BITSPLIT_RETURN_IF_ERROR(ffn("_shexp", to));
        d.shexp_gate_inp = opt(pick(b + "ffn_gate_inp_shexp.weight", w.ffn_gate_inp_shexp));
        if (!d.shexp_gate_inp) return Status::error(b + "ffn_gate_inp_shexp.weight is not held in f32");
      }
    } else {
      gpu::DraftModelHost::Plane* to[3] = {&d.gate, &d.up, &d.down};
      BITSPLIT_RETURN_IF_ERROR(ffn("", to));
    }
  }
  BITSPLIT_RETURN_IF_ERROR(plane("output.weight", m.head));
  m.group = group;
  return m;
}

}  // namespace bitsplit
