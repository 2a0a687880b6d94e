// forward_pass over a batch with an arbitrary attention mask: f32 ops for norms, RoPE and
// attention; projections on f32 weights, Q8_0 blocks or bit-split planes (D·X on the model's
// Backend, R·X on the CPU). Every op is batch invariant, so a token's logits do not depend on
// its batch.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "bitsplit/model.h"
#include "bitsplit/variant.h"

namespace bitsplit {

namespace {

// Rows of activations: [rows x width] row-major.
struct Activations {
  int64_t rows, width;
  std::vector<float> data;
  Activations(int64_t r, int64_t w) : rows(r), width(w), data(size_t(r * w)) {}
  float* row(int64_t r) { return data.data() + r * width; }
  const float* row(int64_t r) const { return data.data() + r * width; }
};

// The mask of the sliding-window layers: the batch's, less the slots whose token is window or
// more positions behind the row's (the cache holds every slot's position). Empty without a
// sliding window.
std::vector<uint8_t> sliding_window_mask(const ModelConfig& c, const KvCache& cache, const Batch& batch) {
  if (c.sliding_window <= 0) return {};
  std::vector<uint8_t> visible = batch.mask;
  for (int64_t i = 0; i < batch.size(); ++i) {
    const int64_t pos = batch.positions[size_t(i)];
    for (int64_t j = 0; j < batch.kv_len; ++j) {
      if (pos - cache.position(j) >= c.sliding_window) visible[size_t(i * batch.kv_len + j)] = 0;
    }
  }
  return visible;
}

// `vis`: [rows x kv_len], the batch's mask or (sliding-window layers) sliding_window_mask's.
void attention(const ModelConfig& c, const KvCache& cache, int64_t layer, const Batch& batch, const uint8_t* vis,
               const Activations& q, Activations& out) {
  const int64_t group = c.n_heads / c.n_kv_heads;
  const int64_t kv_len = batch.kv_len;
  // Keys and values of one kv head: rows of the layer's cache, kv_dim apart. A task is a block
  // of up to kAttentionBlock (row, head) pairs of one kv head, which read its K and V once.
  const float* k0 = cache.k(layer, 0);
  const float* v0 = cache.v(layer, 0);
  const int64_t per_kv = batch.size() * group;  // (row, head) pairs of one kv head
  const int64_t blocks = (per_kv + cpu::kAttentionBlock - 1) / cpu::kAttentionBlock;
  tbb::parallel_for(int64_t{0}, c.n_kv_heads * blocks, [&](int64_t task) {
    const int64_t kvh = task / blocks, first = task % blocks * cpu::kAttentionBlock;
    const int nq = int(std::min<int64_t>(cpu::kAttentionBlock, per_kv - first));
    thread_local std::vector<float> scratch;
    scratch.resize(size_t(cpu::kAttentionBlock * kv_len));
    const float* qs[cpu::kAttentionBlock];
    const uint8_t* vs[cpu::kAttentionBlock];
    float* ss[cpu::kAttentionBlock];
    float* os[cpu::kAttentionBlock];
    for (int r = 0; r < nq; ++r) {
      const int64_t pair = first + r, i = pair / group, h = kvh * group + pair % group;
      qs[r] = q.data.data() + i * q.width + h * c.head_dim;
      vs[r] = vis + i * kv_len;
      ss[r] = scratch.data() + r * kv_len;
      os[r] = out.data.data() + i * out.width + h * c.head_dim;
    }
    cpu::attention_block(nq, qs, vs, k0 + kvh * c.head_dim, v0 + kvh * c.head_dim, c.kv_dim(), c.head_dim, kv_len,
                         c.attn_scale, c.attn_softcap, ss, os);
  });
}

// The input of one or more projections. Its int8 form (plane kernels) or int8-rounded f32
// form (llama.cpp emulation) is made at most once, however many projections read it: q, k
// and v share one input, gate and up another.
class ProjectionInput {
 public:
  explicit ProjectionInput(const Activations& x) : x_(x) {}
  const Activations& f32() const { return x_; }

  const cpu::QuantizedActivations& quantized(const Model& model, int group) {
    if (qa_group_ != group) {
      cpu::quantize_activations(model.cpu(), x_.data.data(), x_.rows, x_.width, group, qa_);
      qa_group_ = group;
    }
    return qa_;
  }

  // The Q8_0 kernel; the input is quantised once for every projection that reads it.
  void q8_0_kernel(const Model& model, const cpu::Q8_0PlaneView& w, float* y) {
    if (!q8_ready_) {
      cpu::quantize_activations_q8_0(model.cpu(), x_.data.data(), x_.rows, x_.width, q8_);
      q8_ready_ = true;
    }
    cpu::q8_0_matmul(model.cpu(), w, q8_, y);
  }

  // int8 round trip of the activations per block, as llama.cpp's CPU quantised matmuls do.
  const std::vector<float>& rounded(int64_t group) {
    if (rounded_group_ == group) return rounded_;
    rounded_ = x_.data;
    for (int64_t r = 0; r < x_.rows; ++r) {
      for (int64_t b = 0; b < x_.width; b += group) {
        float* v = rounded_.data() + r * x_.width + b;
        const int64_t n = std::min(group, x_.width - b);
        float amax = 0.0f;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int64_t i = 0; i < n; ++i) v[i] = d * std::round(v[i] * inv);
      }
    }
    rounded_group_ = group;
    return rounded_;
  }

 private:
  const Activations& x_;
  cpu::QuantizedActivations qa_;
  int qa_group_ = 0;
  std::vector<float> rounded_;
  int64_t rounded_group_ = 0;
  cpu::Q8_0Activations q8_;
  bool q8_ready_ = false;
};

// One projection: f32 weights through the reference matmul, or bit-split planes through the
// plane kernels (D + R for the target, D alone for the draft), then the bias. A variant's sign
// plane joins D (fused into the draft kernel on the plane path); its LoRA change is added in
// f32 from the unrounded input, in every tier, before the bias.
Status linear(const Model& model, Pass pass, const std::string& name, ProjectionInput& in, const std::vector<float>& w,
              const std::vector<float>& bias, Activations& y, const VariantSigns* signs, const VariantLora* lora) {
  const Activations& x = in.f32();
  const SplitProjection* planes = model.split(name);
  std::optional<cpu::SignPlaneView> delta;
  if (signs) delta = signs->view();
  if (const std::vector<uint8_t>* q8 = model.q8_0(name)) {
    in.q8_0_kernel(model, cpu::Q8_0PlaneView{q8->data(), y.width, x.width}, y.data.data());
    if (delta) cpu::sign_matmul_add_f32(*delta, x.data.data(), x.rows, y.data.data());
  } else if (!planes) {
    const std::vector<float>& xs = model.activation_rounding() > 0 ? in.rounded(model.activation_rounding()) : x.data;
    cpu::matmul_f32(xs, x.rows, x.width, w, y.width, {}, y.data);
    if (delta) cpu::sign_matmul_add_f32(*delta, xs.data(), x.rows, y.data.data());
  } else {
    const cpu::QuantizedActivations& qa = in.quantized(model, planes->group);
    // The two planes: D·X (+ the variant's signs) on the model's backend (CPU or GPU), R·X on the
    // CPU, summed draft first (the same order as cpu::target_matmul).
    const cpu::SignPlaneView* d = delta ? &*delta : nullptr;
    if (pass == Pass::kDraft) {
      BITSPLIT_RETURN_IF_ERROR(model.backend().draft_matmul(*planes, qa, y.data.data(), d));
    } else {
      // R·X (packed when loaded) runs on the CPU while the backend computes D·X (a GPU overlaps).
      std::vector<float> residual(y.data.size());
      BITSPLIT_RETURN_IF_ERROR(model.backend().target_matmul(
          *planes, qa, y.data.data(), d, [&] { planes->cpu_residual_matmul(model.cpu(), qa, residual.data()); }));
      for (size_t i = 0; i < residual.size(); ++i) y.data[i] += residual[i];
    }
  }
  if (lora) lora->apply(x.data.data(), x.rows, y.data.data());
  if (!bias.empty()) {
    for (int64_t r = 0; r < y.rows; ++r)
      for (int64_t o = 0; o < y.width; ++o) y.data[size_t(r * y.width + o)] += bias[size_t(o)];
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<float>> forward_pass(const Model& model, KvCache& cache, const Batch& batch,
                                        const ActivationObserver* observer, Pass pass, const Variant* variant) {
  if (pass == Pass::kDefault) pass = model.default_pass();
  const ModelConfig& c = model.config();
  BITSPLIT_RETURN_IF_ERROR(batch.validate(c, cache));
  const int64_t n = batch.size();
  Activations x(n, c.n_embd), h(n, c.n_embd), q(n, c.q_dim()), k(n, c.kv_dim()), v(n, c.kv_dim());
  Activations attn(n, c.q_dim()), proj(n, c.n_embd);
  // Every tensor a variant may change goes through these: base tensors unless it replaces
  // them, and its sign planes where it has them.
  auto pick = [&](const std::string& tensor, const std::vector<float>& base) -> const std::vector<float>& {
    return variant ? variant->pick(tensor, base) : base;
  };
  // A layer tensor's name is only built when a variant could replace it (hot path).
  auto pick_layer = [&](int64_t layer, const char* tensor, const char* suffix,
                        const std::vector<float>& base) -> const std::vector<float>& {
    if (!variant || base.empty()) return base;
    return variant->pick("blk." + std::to_string(layer) + "." + tensor + suffix, base);
  };
  auto signs_of = [&](const std::string& weight) { return variant ? variant->signs(weight) : nullptr; };
  auto lora_of = [&](const std::string& weight) { return variant ? variant->lora(weight) : nullptr; };
  const std::vector<float>& embd = pick("token_embd.weight", model.token_embd());
  const VariantSigns* embd_signs = signs_of("token_embd.weight");
  const VariantLora* embd_lora = lora_of("token_embd.weight");
  std::vector<float> delta_row(embd_signs ? static_cast<size_t>(c.n_embd) : 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t token = batch.tokens[size_t(i)];
    const float* e = embd.data() + token * c.n_embd;
    std::copy(e, e + c.n_embd, x.row(i));
    if (embd_signs) {
      quant::bitdelta_decode_row_ref(embd_signs->signs.data() + token * embd_signs->row_bytes,
                                     embd_signs->alpha_of(token), c.n_embd, delta_row.data());
      for (int64_t j = 0; j < c.n_embd; ++j) x.row(i)[j] += delta_row[size_t(j)];
    }
    if (embd_lora) embd_lora->add_row(token, x.row(i));
    if (c.embd_scale != 1.0f) {
      for (int64_t j = 0; j < c.n_embd; ++j) x.row(i)[j] *= c.embd_scale;
    }
  }
  const std::vector<float> no_bias;
  auto name = [](int64_t layer, const char* weight) { return "blk." + std::to_string(layer) + "." + weight + ".weight"; };
  auto project = [&](int64_t layer, const char* weight, ProjectionInput& in, const std::vector<float>& w,
                     const std::vector<float>& bias, Activations& y) {
    const std::string n = name(layer, weight);
    const std::vector<float>& b = pick_layer(layer, weight, ".bias", bias);
    return linear(model, pass, n, in, w, b, y, signs_of(n), lora_of(n));
  };
  auto observe = [&](int64_t layer, const char* weight, const Activations& a) {
    if (observer) (*observer)(name(layer, weight), a.data.data(), a.rows, a.width);
  };
  // out = down(act(gate(in)) ⊙ up(in)) with the projections "ffn_gate<suffix>" etc. of width ff.
  auto gated_ffn = [&](int64_t l, const std::string& suffix, const Activations& in, int64_t ff, Activations& out) -> Status {
    const LayerWeights& w = model.layer(l);
    const std::string g = "ffn_gate" + suffix, u = "ffn_up" + suffix, d = "ffn_down" + suffix;
    Activations gt(in.rows, ff), upv(in.rows, ff);
    observe(l, g.c_str(), in);
    observe(l, u.c_str(), in);
    ProjectionInput ffn_in(in);
    BITSPLIT_RETURN_IF_ERROR(project(l, g.c_str(), ffn_in, w.projection(g), no_bias, gt));
    BITSPLIT_RETURN_IF_ERROR(project(l, u.c_str(), ffn_in, w.projection(u), no_bias, upv));
    if (c.ffn_act == FfnActivation::kGeluTanh) {
      for (size_t e = 0; e < gt.data.size(); ++e) gt.data[e] = cpu::gelu_tanh(gt.data[e]) * upv.data[e];
    } else {
      for (size_t e = 0; e < gt.data.size(); ++e) gt.data[e] = cpu::silu(gt.data[e]) * upv.data[e];
    }
    observe(l, d.c_str(), gt);
    ProjectionInput down_in(gt);
    return project(l, d.c_str(), down_in, w.projection(d), no_bias, out);
  };
  // A mixture of experts: each row goes to its n_expert_used most probable experts (softmax of
  // the router's logits, ties to the lower index), their outputs summed with those
  // probabilities (renormalised when expert_weights_norm); an expert runs once, on the rows
  // routed to it, so a pass reads only the routed experts' planes. The shared expert (if any)
  // is added after, gated by sigmoid(x · ffn_gate_inp_shexp).
  auto moe_ffn = [&](int64_t l, const Activations& in, Activations& out) -> Status {
    const LayerWeights& w = model.layer(l);
    const std::vector<float>& router = pick_layer(l, "ffn_gate_inp", ".weight", w.ffn_gate_inp);
    std::vector<float> logits(size_t(in.rows * c.n_expert));
    cpu::matmul_f32(in.data, in.rows, c.n_embd, router, c.n_expert, {}, logits);
    std::vector<std::vector<std::pair<int64_t, float>>> routed(size_t(c.n_expert));  // (row, weight) per expert
    std::vector<int64_t> order(size_t(c.n_expert));
    for (int64_t r = 0; r < in.rows; ++r) {
      float* p = logits.data() + r * c.n_expert;
      cpu::softmax_f32(p, c.n_expert);
      for (int64_t e = 0; e < c.n_expert; ++e) order[size_t(e)] = e;
      std::partial_sort(order.begin(), order.begin() + c.n_expert_used, order.end(),
                        [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      double sum = 0.0;
      for (int64_t k = 0; k < c.n_expert_used; ++k) sum += p[order[size_t(k)]];
      for (int64_t k = 0; k < c.n_expert_used; ++k) {
        const int64_t e = order[size_t(k)];
        routed[size_t(e)].push_back({r, c.expert_weights_norm ? float(p[e] / sum) : p[e]});
      }
    }
    std::fill(out.data.begin(), out.data.end(), 0.0f);
    for (int64_t e = 0; e < c.n_expert; ++e) {
      const auto& rows = routed[size_t(e)];
      if (rows.empty()) continue;
      Activations xe(int64_t(rows.size()), c.n_embd), ye(int64_t(rows.size()), c.n_embd);
      for (size_t j = 0; j < rows.size(); ++j) std::copy(in.row(rows[j].first), in.row(rows[j].first) + c.n_embd, xe.row(int64_t(j)));
      std::string suffix(1, '.');
      suffix += std::to_string(e);
      BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, suffix, xe, c.n_ff_exp, ye));
      for (size_t j = 0; j < rows.size(); ++j) {
        float* o = out.row(rows[j].first);
        const float* y = ye.row(int64_t(j));
        for (int64_t d = 0; d < c.n_embd; ++d) o[d] += rows[j].second * y[d];
      }
    }
    if (c.n_ff_shexp > 0) {
      Activations ys(in.rows, c.n_embd);
      BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, "_shexp", in, c.n_ff_shexp, ys));
      const std::vector<float>& gate_w = pick_layer(l, "ffn_gate_inp_shexp", ".weight", w.ffn_gate_inp_shexp);
      for (int64_t r = 0; r < in.rows; ++r) {
        const float g = 1.0f / (1.0f + std::exp(-cpu::dot_f32(in.row(r), gate_w.data(), c.n_embd)));
        float* o = out.row(r);
        const float* y = ys.row(r);
        for (int64_t d = 0; d < c.n_embd; ++d) o[d] += g * y[d];
      }
    }
    return Status::ok();
  };
  // Every slot the batch writes takes its token's position (before any layer reads positions),
  // and the sliding-window layers' mask is made once for the pass.
  for (int64_t i = 0; i < n; ++i) cache.set_position(batch.slots[size_t(i)], batch.positions[size_t(i)]);
  const std::vector<uint8_t> swa_mask = sliding_window_mask(c, cache, batch);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layer(l);
    const std::vector<float>& attn_norm = pick_layer(l, "attn_norm", ".weight", w.attn_norm);
    const std::vector<float>& ffn_norm = pick_layer(l, "ffn_norm", ".weight", w.ffn_norm);
    const std::vector<float>& q_norm = pick_layer(l, "attn_q_norm", ".weight", w.q_norm);
    const std::vector<float>& k_norm = pick_layer(l, "attn_k_norm", ".weight", w.k_norm);
    const std::vector<float>& post_attn_norm = pick_layer(l, "post_attention_norm", ".weight", w.post_attn_norm);
    const std::vector<float>& post_ffn_norm = pick_layer(l, "post_ffw_norm", ".weight", w.post_ffn_norm);
    const float rope_base = c.layer_rope_base(l), rope_scale = c.layer_rope_freq_scale(l);
    // Gemma: the branch's output is normalised before it joins the residual stream.
    auto add_branch = [&](const std::vector<float>& post_norm) {
      if (c.has_post_norms) {
        for (int64_t i = 0; i < n; ++i) cpu::rms_norm_f32(proj.row(i), post_norm.data(), c.n_embd, c.rms_eps, proj.row(i));
      }
      for (size_t e = 0; e < x.data.size(); ++e) x.data[e] += proj.data[e];
    };
    for (int64_t i = 0; i < n; ++i) cpu::rms_norm_f32(x.row(i), attn_norm.data(), c.n_embd, c.rms_eps, h.row(i));
    observe(l, "attn_q", h);
    observe(l, "attn_k", h);
    observe(l, "attn_v", h);
    ProjectionInput attn_in(h);
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_q", attn_in, w.wq, w.bq, q));
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_k", attn_in, w.wk, w.bk, k));
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_v", attn_in, w.wv, w.bv, v));
    for (int64_t i = 0; i < n; ++i) {
      const float pos = float(batch.positions[size_t(i)]);
      for (int64_t hd = 0; hd < c.n_heads; ++hd) {
        float* qh = q.row(i) + hd * c.head_dim;
        if (c.has_qk_norm) cpu::rms_norm_f32(qh, q_norm.data(), c.head_dim, c.rms_eps, qh);
        cpu::rope_f32(qh, c.n_rot, c.rope_order, pos, rope_base, rope_scale, model.rope_freq_factors());
      }
      for (int64_t hd = 0; hd < c.n_kv_heads; ++hd) {
        float* kh = k.row(i) + hd * c.head_dim;
        if (c.has_qk_norm) cpu::rms_norm_f32(kh, k_norm.data(), c.head_dim, c.rms_eps, kh);
        cpu::rope_f32(kh, c.n_rot, c.rope_order, pos, rope_base, rope_scale, model.rope_freq_factors());
      }
      std::copy(k.row(i), k.row(i) + c.kv_dim(), cache.k(l, batch.slots[size_t(i)]));
      std::copy(v.row(i), v.row(i) + c.kv_dim(), cache.v(l, batch.slots[size_t(i)]));
    }
    attention(c, cache, l, batch, c.is_swa(l) ? swa_mask.data() : batch.mask.data(), q, attn);
    observe(l, "attn_output", attn);
    ProjectionInput out_in(attn);
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_output", out_in, w.wo, no_bias, proj));
    add_branch(post_attn_norm);

    for (int64_t i = 0; i < n; ++i) cpu::rms_norm_f32(x.row(i), ffn_norm.data(), c.n_embd, c.rms_eps, h.row(i));
    if (!c.is_moe()) {
      BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, "", h, c.n_ff, proj));
    } else {
      BITSPLIT_RETURN_IF_ERROR(moe_ffn(l, h, proj));
    }
    add_branch(post_ffn_norm);
  }

  int64_t n_out = 0;
  for (uint8_t want : batch.want_logits) n_out += want ? 1 : 0;
  Activations last(n_out, c.n_embd);
  const std::vector<float>& output_norm = pick("output_norm.weight", model.output_norm());
  for (int64_t i = 0, r = 0; i < n; ++i) {
    if (batch.want_logits[size_t(i)]) cpu::rms_norm_f32(x.row(i), output_norm.data(), c.n_embd, c.rms_eps, last.row(r++));
  }
  Activations logits(n_out, c.n_vocab);
  if (observer && n_out > 0) (*observer)("output.weight", last.data.data(), last.rows, last.width);
  if (n_out > 0) {
    ProjectionInput head_in(last);
    // A tied head reads the embedding, so it takes the embedding's delta (full or signs).
    const bool tied = c.tied_output;
    const std::vector<float>& head = tied ? embd : model.output();
    const VariantSigns* head_signs = tied ? embd_signs : signs_of("output.weight");
    // Variant::make gives a head read from the embedding the embedding's LoRA under this name.
    BITSPLIT_RETURN_IF_ERROR(
        linear(model, pass, "output.weight", head_in, head, no_bias, logits, head_signs, lora_of("output.weight")));
    if (c.final_softcap > 0.0f) {
      for (float& v : logits.data) v = cpu::softcap(v, c.final_softcap);
    }
  }
  return std::move(logits.data);
}

}  // namespace bitsplit
