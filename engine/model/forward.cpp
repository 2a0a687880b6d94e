// forward_pass over a batch with an arbitrary attention mask, and forward_passes over several
// sequences' batches at once: f32 ops for norms, RoPE and attention; projections on f32 weights,
// Q8_0 blocks or bit-split planes (D·X on the model's Backend, R·X on the CPU). Every op is batch
// invariant, so a token's logits do not depend on its batch, nor on the other sequences beside it.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

#include "bitsplit/expert_routing.h"
#include "bitsplit/model.h"
#include "bitsplit/variant.h"
#include "linear.h"

namespace bitsplit {

namespace {

using namespace forward_internal;

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

// `vis`: [rows x kv_len], the batch's mask or (sliding-window layers) sliding_window_mask's. The
// batch's rows are rows row0.. of q and out.
void attention(const ModelConfig& c, const KvCache& cache, int64_t layer, const Batch& batch, const uint8_t* vis,
               const Activations& q, Activations& out, int64_t row0) {
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
      qs[r] = q.row(row0 + i) + h * c.head_dim;
      vs[r] = vis + i * kv_len;
      ss[r] = scratch.data() + r * kv_len;
      os[r] = out.row(row0 + i) + h * c.head_dim;
    }
    cpu::attention_block(nq, qs, vs, k0 + kvh * c.head_dim, v0 + kvh * c.head_dim, c.kv_dim(), c.head_dim, kv_len,
                         c.attn_scale, c.attn_softcap, ss, os);
  });
}

// A sequence's place in a combined pass.
struct Sequence {
  KvCache* cache = nullptr;
  const Batch* batch = nullptr;
  const Variant* variant = nullptr;
  int64_t row0 = 0;            // its first row in the pass
  size_t group = 0;            // its row group
  std::vector<uint8_t> swa;    // sliding_window_mask
};

// Every tensor a variant may change goes through these (null variant: the base): base tensors
// unless it replaces them, its sign planes and LoRA changes where it has them.
const std::vector<float>& pick(const Variant* v, const std::string& tensor, const std::vector<float>& base) {
  return v ? v->pick(tensor, base) : base;
}
const std::vector<float>& pick(const Variant* v, int64_t layer, LayerTensor t, const std::vector<float>& base) {
  return v ? v->pick(layer, t, base) : base;
}
const VariantSigns* signs_of(const Variant* v, const std::string& weight) { return v ? v->signs(weight) : nullptr; }
const VariantLora* lora_of(const Variant* v, const std::string& weight) { return v ? v->lora(weight) : nullptr; }

const std::vector<float> kNoBias;

// One gated FFN of a layer (the dense one, an expert, the shared expert): its gate's projection
// slot (up and down follow), the base's f32 weights and its width.
struct Ffn {
  size_t slot = 0;
  const std::vector<float>* gate = nullptr;
  const std::vector<float>* up = nullptr;
  const std::vector<float>* down = nullptr;
  int64_t width = 0;
};

// gate = act(gate) ⊙ up, in place (SwiGLU or GeGLU).
void gate_activation(const Model& model, Activations& gate, const Activations& up) {
  const bool gelu = model.config().ffn_act == FfnActivation::kGeluTanh;
  for_slices(model, int64_t(gate.data.size()), kParallelElements, [&](int64_t b, int64_t e) {
    float* g = gate.data.data();
    const float* u = up.data.data();
    if (gelu) {
      for (int64_t i = b; i < e; ++i) g[i] = cpu::gelu_tanh(g[i]) * u[i];
    } else {
      cpu::silu_mul(g + b, u + b, e - b);
    }
  });
}

int64_t rows_of(const std::vector<Sequence>& seqs) {
  int64_t n = 0;
  for (const Sequence& s : seqs) n += s.batch->size();
  return n;
}

// One pass over `seqs` (ordered by variant; row groups as `groups`): its activations, scratch and
// the facts every step reads. run() follows the model's diagram: the rows' embeddings, then per
// layer the attention block and the FFN block (each adding its branch to the residual stream x),
// then the output head. Each variant's tensors come from its per-layer tables (Variant::layer)
// and the base's planes from the model's (Model::held), so the layer loop looks nothing up by name.
class ForwardPass {
 public:
  ForwardPass(const Model& model, std::vector<Sequence>& seqs, const std::vector<RowGroup>& groups,
              const ActivationObserver* observer, Pass pass)
      : model_(model), c_(model.config()), seqs_(seqs), groups_(groups), observer_(observer), pass_(pass),
        x_(rows_of(seqs), c_.n_embd), h_(x_.rows, c_.n_embd), q_(x_.rows, c_.q_dim()), k_(x_.rows, c_.kv_dim()),
        v_(x_.rows, c_.kv_dim()), attn_(x_.rows, c_.q_dim()), proj_(x_.rows, c_.n_embd) {
    if (observer_) kinds_ = projection_kinds(c_);
  }

  // Logits of the wanted rows, per sequence.
  Result<std::vector<std::vector<float>>> run() {
    embed_rows();
    place_tokens();
    BITSPLIT_RETURN_IF_ERROR(layers(0, c_.n_layers));
    return output_head();
  }

  // forward_layers: layers [first, last) from the residual stream `hidden` (empty: the
  // embeddings), which takes the stream they leave; the head's logits when asked.
  Status run_layers(int64_t first, int64_t last, std::vector<float>& hidden, std::vector<float>* logits) {
    if (hidden.empty()) {
      embed_rows();
    } else {
      x_.data.swap(hidden);
    }
    place_tokens();
    BITSPLIT_RETURN_IF_ERROR(layers(first, last));
    if (logits) {
      BITSPLIT_ASSIGN_OR_RETURN(auto per_sequence, output_head());
      *logits = std::move(per_sequence[0]);
    }
    hidden.swap(x_.data);
    return Status::ok();
  }

 private:
  // The wanted rows of the pass, in pass order: their row groups and each sequence's count.
  struct WantedRows {
    std::vector<RowGroup> groups;
    std::vector<int64_t> per_sequence;
    int64_t n = 0;
  };

  void embed_rows();
  void place_tokens();
  Status layers(int64_t first, int64_t last) {
    for (int64_t l = first; l < last; ++l) {
      BITSPLIT_RETURN_IF_ERROR(attention_block(l));
      BITSPLIT_RETURN_IF_ERROR(ffn_block(l));
    }
    return Status::ok();
  }
  Status attention_block(int64_t l);
  void rotate_and_store(int64_t l, const Sequence& s);
  Status ffn_block(int64_t l);
  Status gated_ffn(int64_t l, const Ffn& ffn, const Activations& in, const std::vector<RowGroup>& groups,
                   Activations& out);
  Status moe_ffn(int64_t l);
  Status add_expert(int64_t l, int64_t e, const ExpertRows& rows, const Variant* variant);
  Status add_shared_expert(int64_t l, const Variant* variant);
  Result<std::vector<std::vector<float>>> output_head();
  WantedRows wanted_rows() const;
  Status head(const Activations& last, const std::vector<RowGroup>& groups, Activations& logits);

  void norm_rows(int64_t l, LayerTensor t, const std::vector<float>& base, const Activations& from, Activations& to);
  void add_branch(int64_t l, LayerTensor post_norm, const std::vector<float>& base);
  Status project(int64_t l, size_t slot, ProjectionInput& in, const std::vector<float>& weights, Activations& y);
  const std::vector<float>& bias(const Variant* v, int64_t l, size_t slot) const;
  void observe(int64_t l, size_t slot, const Activations& a) const {
    if (observer_) observe(l, kinds_[slot], a);
  }
  void observe(int64_t l, const std::string& kind, const Activations& a) const {
    if (observer_) (*observer_)("blk." + std::to_string(l) + "." + kind + ".weight", a.data.data(), a.rows, a.width);
  }

  const Model& model_;
  const ModelConfig& c_;
  std::vector<Sequence>& seqs_;
  const std::vector<RowGroup>& groups_;
  const ActivationObserver* observer_;
  const Pass pass_;
  std::vector<std::string> kinds_;  // projection kinds by slot, for the observer's names (only with one)
  Activations x_, h_, q_, k_, v_, attn_, proj_;  // x: the residual stream; h: a block's normed input
  Activations ffn_gate_{0, 0}, ffn_up_{0, 0};    // gated_ffn's, kept while their shape repeats
  LinearScratch scratch_;                        // every projection's intermediate products
};

// Each row's token embedding: a variant's own full embedding, else the model's rows (held f32 or
// Q8_0), plus the variant's signs and LoRA change, times the embedding scale.
void ForwardPass::embed_rows() {
  for (const Sequence& s : seqs_) {
    const Batch& batch = *s.batch;
    const std::vector<float>* embd = s.variant ? s.variant->full("token_embd.weight") : nullptr;
    const VariantSigns* embd_signs = signs_of(s.variant, "token_embd.weight");
    const VariantLora* embd_lora = lora_of(s.variant, "token_embd.weight");
    std::vector<float> delta_row(embd_signs ? static_cast<size_t>(c_.n_embd) : 0);
    for (int64_t i = 0; i < batch.size(); ++i) {
      const int64_t token = batch.tokens[size_t(i)];
      float* xr = x_.row(s.row0 + i);
      if (embd) {
        const float* e = embd->data() + token * c_.n_embd;
        std::copy(e, e + c_.n_embd, xr);
      } else {
        model_.embed_row(token, xr);
      }
      if (embd_signs) {
        quant::bitdelta_decode_row_ref(embd_signs->signs.data() + token * embd_signs->row_bytes,
                                       embd_signs->alpha_of(token), c_.n_embd, delta_row.data());
        for (int64_t j = 0; j < c_.n_embd; ++j) xr[j] += delta_row[size_t(j)];
      }
      if (embd_lora) embd_lora->add_row(token, xr);
      if (c_.embd_scale != 1.0f) {
        for (int64_t j = 0; j < c_.n_embd; ++j) xr[j] *= c_.embd_scale;
      }
    }
  }
}

// Every slot a batch writes takes its token's position (before any layer reads positions), and
// the sliding-window layers' mask is made once for the pass.
void ForwardPass::place_tokens() {
  for (Sequence& s : seqs_) {
    for (int64_t i = 0; i < s.batch->size(); ++i) s.cache->set_position(s.batch->slots[size_t(i)], s.batch->positions[size_t(i)]);
    s.swa = sliding_window_mask(c_, *s.cache, *s.batch);
  }
}

// norm, q/k/v, QK-norm + RoPE + K/V into the caches, attention, the output projection, then
// (gemma) its post-norm, added to the residual stream.
Status ForwardPass::attention_block(int64_t l) {
  const LayerWeights& w = model_.layer(l);
  norm_rows(l, LayerTensor::kAttnNorm, w.attn_norm, x_, h_);
  observe(l, kSlotQ, h_);
  observe(l, kSlotK, h_);
  observe(l, kSlotV, h_);
  ProjectionInput attn_in(h_, groups_);
  BITSPLIT_RETURN_IF_ERROR(project(l, kSlotQ, attn_in, w.wq, q_));
  BITSPLIT_RETURN_IF_ERROR(project(l, kSlotK, attn_in, w.wk, k_));
  BITSPLIT_RETURN_IF_ERROR(project(l, kSlotV, attn_in, w.wv, v_));
  for (const Sequence& s : seqs_) rotate_and_store(l, s);
  for (const Sequence& s : seqs_) {
    attention(c_, *s.cache, l, *s.batch, c_.is_swa(l) ? s.swa.data() : s.batch->mask.data(), q_, attn_, s.row0);
  }
  observe(l, kSlotOutput, attn_);
  ProjectionInput out_in(attn_, groups_);
  BITSPLIT_RETURN_IF_ERROR(project(l, kSlotOutput, out_in, w.wo, proj_));
  add_branch(l, LayerTensor::kPostAttnNorm, w.post_attn_norm);
  return Status::ok();
}

// The sequence's queries and keys: each head's QK-norm (qwen3, gemma3) and RoPE at the row's
// position; then its keys and values into its cache slots.
void ForwardPass::rotate_and_store(int64_t l, const Sequence& s) {
  const Batch& batch = *s.batch;
  const LayerWeights& w = model_.layer(l);
  const float rope_base = c_.layer_rope_base(l), rope_scale = c_.layer_rope_freq_scale(l);
  const std::vector<float>& q_norm = pick(s.variant, l, LayerTensor::kQNorm, w.q_norm);
  const std::vector<float>& k_norm = pick(s.variant, l, LayerTensor::kKNorm, w.k_norm);
  const std::vector<float>& factors = model_.rope_freq_factors(s.cache->context());
  const ModelConfig& c = c_;
  auto norm_and_rotate = [&c](float* heads, int64_t n, const std::vector<float>& norm, const float* rotation) {
    for (int64_t hd = 0; hd < n; ++hd) {
      float* head = heads + hd * c.head_dim;
      if (c.has_qk_norm) cpu::rms_norm_f32(head, norm.data(), c.head_dim, c.rms_eps, head);
      cpu::rope_apply(head, c.n_rot, c.rope_order, rotation);
    }
  };
  for_slices(model_, batch.size(), kParallelRows, [&](int64_t rb, int64_t re) {
    // The position's rotation, once for all its heads (rope_f32's values).
    std::vector<float> rotation(size_t(c.n_rot));
    for (int64_t i = rb; i < re; ++i) {
      cpu::rope_table(c.n_rot, float(batch.positions[size_t(i)]), rope_base, rope_scale, factors, c.rope_attn_factor,
                      rotation.data());
      float* kr = k_.row(s.row0 + i);
      norm_and_rotate(q_.row(s.row0 + i), c.n_heads, q_norm, rotation.data());
      norm_and_rotate(kr, c.n_kv_heads, k_norm, rotation.data());
      std::copy(kr, kr + c.kv_dim(), s.cache->k(l, batch.slots[size_t(i)]));
      const float* vr = v_.row(s.row0 + i);
      std::copy(vr, vr + c.kv_dim(), s.cache->v(l, batch.slots[size_t(i)]));
    }
  });
}

// norm, the FFN (dense, or a mixture of experts), then (gemma) its post-norm, added to the
// residual stream.
Status ForwardPass::ffn_block(int64_t l) {
  const LayerWeights& w = model_.layer(l);
  norm_rows(l, LayerTensor::kFfnNorm, w.ffn_norm, x_, h_);
  if (!c_.is_moe()) {
    BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, {ffn_slot(0), &w.w_gate, &w.w_up, &w.w_down, c_.n_ff}, h_, groups_, proj_));
  } else {
    BITSPLIT_RETURN_IF_ERROR(moe_ffn(l));
  }
  add_branch(l, LayerTensor::kPostFfnNorm, w.post_ffn_norm);
  return Status::ok();
}

// out = down(act(gate(in)) ⊙ up(in)), `in`'s rows in row groups `groups`.
Status ForwardPass::gated_ffn(int64_t l, const Ffn& ffn, const Activations& in, const std::vector<RowGroup>& groups,
                              Activations& out) {
  // The gate and up outputs: the pass's buffers when the shape is the last one's (every layer
  // of a dense model), not fresh zeroed ones per layer; the projections write every element.
  auto fit = [](Activations& a, int64_t rows, int64_t width) {
    if (a.rows != rows || a.width != width) a = Activations(rows, width);
  };
  fit(ffn_gate_, in.rows, ffn.width);
  fit(ffn_up_, in.rows, ffn.width);
  observe(l, ffn.slot, in);
  observe(l, ffn.slot + 1, in);
  ProjectionInput ffn_in(in, groups);
  BITSPLIT_RETURN_IF_ERROR(project(l, ffn.slot, ffn_in, *ffn.gate, ffn_gate_));
  BITSPLIT_RETURN_IF_ERROR(project(l, ffn.slot + 1, ffn_in, *ffn.up, ffn_up_));
  gate_activation(model_, ffn_gate_, ffn_up_);
  observe(l, ffn.slot + 2, ffn_gate_);
  ProjectionInput down_in(ffn_gate_, groups);
  return project(l, ffn.slot + 2, down_in, *ffn.down, out);
}

// A mixture of experts, from h into proj: each row goes to its n_expert_used most probable
// experts (softmax of the router's logits, ties to the lower index), their outputs summed with
// those probabilities (renormalised when expert_weights_norm); an expert runs once, on the rows
// routed to it, so a pass reads only the routed experts' planes. The shared expert (if any) is
// added after. One sequence per pass (forward_passes runs MoE sequences one by one).
Status ForwardPass::moe_ffn(int64_t l) {
  const Variant* variant = seqs_[0].variant;
  const std::vector<float>& router = pick(variant, l, LayerTensor::kRouter, model_.layer(l).ffn_gate_inp);
  std::vector<float> logits(size_t(h_.rows * c_.n_expert));
  observe(l, "ffn_gate_inp", h_);  // the router's input (importance matrices; routing measurements)
  cpu::matmul_f32(h_.data, h_.rows, c_.n_embd, router, c_.n_expert, {}, logits);
  std::vector<ExpertRows> routed;
  route_experts(logits.data(), h_.rows, c_.n_expert, c_.n_expert_used, c_.expert_weights_norm, routed);
  std::fill(proj_.data.begin(), proj_.data.end(), 0.0f);
  for (int64_t e = 0; e < c_.n_expert; ++e) {
    if (!routed[size_t(e)].rows.empty()) BITSPLIT_RETURN_IF_ERROR(add_expert(l, e, routed[size_t(e)], variant));
  }
  if (c_.n_ff_shexp > 0) BITSPLIT_RETURN_IF_ERROR(add_shared_expert(l, variant));
  return Status::ok();
}

// Expert e on its routed rows alone (gathered), its output added to theirs with their weights.
Status ForwardPass::add_expert(int64_t l, int64_t e, const ExpertRows& rows, const Variant* variant) {
  const ExpertWeights& w = model_.layer(l).experts[size_t(e)];
  Activations xe(int64_t(rows.rows.size()), c_.n_embd), ye(int64_t(rows.rows.size()), c_.n_embd);
  for (size_t j = 0; j < rows.rows.size(); ++j) std::copy(h_.row(rows.rows[j]), h_.row(rows.rows[j]) + c_.n_embd, xe.row(int64_t(j)));
  const std::vector<RowGroup> expert_rows{{0, xe.rows, variant}};
  BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, {ffn_slot(e), &w.w_gate, &w.w_up, &w.w_down, c_.n_ff_exp}, xe, expert_rows, ye));
  for (size_t j = 0; j < rows.rows.size(); ++j) {
    float* o = proj_.row(rows.rows[j]);
    const float* y = ye.row(int64_t(j));
    const float wt = rows.weights[j];
    for (int64_t d = 0; d < c_.n_embd; ++d) o[d] += wt * y[d];
  }
  return Status::ok();
}

// qwen2moe's shared expert on every row, gated by sigmoid(x · ffn_gate_inp_shexp).
Status ForwardPass::add_shared_expert(int64_t l, const Variant* variant) {
  const LayerWeights& w = model_.layer(l);
  Activations ys(h_.rows, c_.n_embd);
  const Ffn shared{ffn_slot(c_.n_expert), &w.w_gate_shexp, &w.w_up_shexp, &w.w_down_shexp, c_.n_ff_shexp};
  BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, shared, h_, groups_, ys));
  const std::vector<float>& gate_w = pick(variant, l, LayerTensor::kShexpGate, w.ffn_gate_inp_shexp);
  for (int64_t r = 0; r < h_.rows; ++r) {
    const float g = 1.0f / (1.0f + std::exp(-cpu::dot_f32(h_.row(r), gate_w.data(), c_.n_embd)));
    float* o = proj_.row(r);
    const float* y = ys.row(r);
    for (int64_t d = 0; d < c_.n_embd; ++d) o[d] += g * y[d];
  }
  return Status::ok();
}

// The output norm of the wanted rows, the head's logits (soft-capped for gemma2), split per sequence.
Result<std::vector<std::vector<float>>> ForwardPass::output_head() {
  const WantedRows wanted = wanted_rows();
  Activations last(wanted.n, c_.n_embd);
  int64_t r = 0;  // the wanted rows, in pass order
  for (const Sequence& s : seqs_) {
    const std::vector<float>& output_norm = pick(s.variant, "output_norm.weight", model_.output_norm());
    for (int64_t i = 0; i < s.batch->size(); ++i) {
      if (s.batch->want_logits[size_t(i)]) cpu::rms_norm_f32(x_.row(s.row0 + i), output_norm.data(), c_.n_embd, c_.rms_eps, last.row(r++));
    }
  }
  Activations logits(wanted.n, c_.n_vocab);
  if (observer_ && wanted.n > 0) (*observer_)("output.weight", last.data.data(), last.rows, last.width);
  if (wanted.n > 0) BITSPLIT_RETURN_IF_ERROR(head(last, wanted.groups, logits));
  std::vector<std::vector<float>> result(seqs_.size());
  r = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    result[i].assign(logits.row(r), logits.row(r) + wanted.per_sequence[i] * c_.n_vocab);
    r += wanted.per_sequence[i];
  }
  return result;
}

ForwardPass::WantedRows ForwardPass::wanted_rows() const {
  WantedRows w;
  w.groups.resize(groups_.size());
  w.per_sequence.assign(seqs_.size(), 0);
  for (size_t i = 0; i < seqs_.size(); ++i) {
    for (uint8_t want : seqs_[i].batch->want_logits) w.per_sequence[i] += want ? 1 : 0;
    RowGroup& g = w.groups[seqs_[i].group];
    if (g.rows == 0) g.row0 = w.n;
    g.rows += w.per_sequence[i];
    g.variant = groups_[seqs_[i].group].variant;
    w.n += w.per_sequence[i];
  }
  std::erase_if(w.groups, [](const RowGroup& g) { return g.rows == 0; });
  return w;
}

// logits = the head over `last` (its rows in row groups `groups`).
Status ForwardPass::head(const Activations& last, const std::vector<RowGroup>& groups, Activations& logits) {
  ProjectionInput head_in(last, groups);
  // A tied head reads the embedding, so it takes the embedding's delta (full or signs).
  // Variant::make gives a head read from the embedding the embedding's LoRA under this name.
  const bool tied = c_.tied_output;
  const HeldProjection held{model_.split("output.weight"), model_.q8_0("output.weight")};
  // A head held as planes or Q8_0 blocks reads no f32 matrix (and a Q8_0-held embedding is
  // not expanded to f32 for it).
  const bool head_f32 = !held.planes && !held.q8_0;
  static const std::vector<float> kNoMatrix;
  std::vector<GroupProjection> parts;
  for (const RowGroup& g : groups) {
    const std::vector<float>& w = !head_f32 ? kNoMatrix
                                  : tied    ? pick(g.variant, "token_embd.weight", model_.token_embd())
                                            : model_.output();
    parts.push_back({&w, &kNoBias, tied ? signs_of(g.variant, "token_embd.weight") : signs_of(g.variant, "output.weight"),
                     lora_of(g.variant, "output.weight")});
  }
  BITSPLIT_RETURN_IF_ERROR(linear(model_, pass_, held, head_in, parts, scratch_, logits));
  if (c_.final_softcap > 0.0f) {
    for (float& v : logits.data) v = cpu::softcap(v, c_.final_softcap);
  }
  return Status::ok();
}

// rms_norm of rows with each group's copy of a norm tensor.
void ForwardPass::norm_rows(int64_t l, LayerTensor t, const std::vector<float>& base, const Activations& from,
                            Activations& to) {
  for (const RowGroup& g : groups_) {
    const std::vector<float>& weight = pick(g.variant, l, t, base);
    for_slices(model_, g.rows, kParallelRows, [&](int64_t b, int64_t e) {
      for (int64_t i = g.row0 + b; i < g.row0 + e; ++i) cpu::rms_norm_f32(from.row(i), weight.data(), c_.n_embd, c_.rms_eps, to.row(i));
    });
  }
}

// x += proj; gemma normalises the branch's output before it joins the residual stream.
void ForwardPass::add_branch(int64_t l, LayerTensor post_norm, const std::vector<float>& base) {
  if (c_.has_post_norms) norm_rows(l, post_norm, base, proj_, proj_);
  for_slices(model_, int64_t(x_.data.size()), kParallelElements, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x_.data[size_t(i)] += proj_.data[size_t(i)];
  });
}

// A layer's projection as each row group of `in` sees it; `weights` is the base's f32 matrix.
Status ForwardPass::project(int64_t l, size_t slot, ProjectionInput& in, const std::vector<float>& weights,
                            Activations& y) {
  std::vector<GroupProjection> parts;
  for (const RowGroup& g : in.groups()) {
    const ProjectionChange change = g.variant ? g.variant->layer(l).projections[slot] : ProjectionChange{};
    parts.push_back({&weights, &bias(g.variant, l, slot), change.signs, change.lora});
  }
  return linear(model_, pass_, model_.held(l, slot), in, parts, scratch_, y);
}

// q, k and v have biases in some families (a variant may replace them); no other projection has.
const std::vector<float>& ForwardPass::bias(const Variant* v, int64_t l, size_t slot) const {
  const LayerWeights& w = model_.layer(l);
  switch (slot) {
    case kSlotQ: return pick(v, l, LayerTensor::kBiasQ, w.bq);
    case kSlotK: return pick(v, l, LayerTensor::kBiasK, w.bk);
    case kSlotV: return pick(v, l, LayerTensor::kBiasV, w.bv);
    default: return kNoBias;
  }
}

// One sequence's pass (its batch already validated).
Result<std::vector<float>> run_one(const Model& model, KvCache& cache, const Batch& batch, const Variant* variant,
                                   const ActivationObserver* observer, Pass pass) {
  std::vector<Sequence> seqs{{&cache, &batch, variant, 0, 0, {}}};
  const std::vector<RowGroup> groups{{0, batch.size(), variant}};
  BITSPLIT_ASSIGN_OR_RETURN(auto logits, ForwardPass(model, seqs, groups, observer, pass).run());
  return std::move(logits[0]);
}

}  // namespace

Result<std::vector<std::vector<float>>> forward_passes(const Model& model, std::span<const SequencePass> sequences,
                                                       Pass pass) {
  if (pass == Pass::kDefault) pass = model.default_pass();
  const ModelConfig& c = model.config();
  if (sequences.empty()) return std::vector<std::vector<float>>{};
  for (size_t i = 0; i < sequences.size(); ++i) {
    const SequencePass& s = sequences[i];
    if (!s.cache || !s.batch) return Status::error("forward_passes: sequence " + std::to_string(i) + " has no cache or batch");
    if (Status st = s.batch->validate(c, *s.cache); !st) {
      return Status::error("sequence " + std::to_string(i) + ": " + st.message());
    }
    for (size_t j = 0; j < i; ++j) {
      if (sequences[j].cache == s.cache) {
        return Status::error("forward_passes: sequences " + std::to_string(j) + " and " + std::to_string(i) +
                             " share one KV cache");
      }
    }
  }
  // A mixture of experts routes rows, not sequences: its sequences run one after another.
  if (c.is_moe() && sequences.size() > 1) {
    std::vector<std::vector<float>> out;
    for (const SequencePass& s : sequences) {
      BITSPLIT_ASSIGN_OR_RETURN(auto logits, run_one(model, *s.cache, *s.batch, s.variant, nullptr, pass));
      out.push_back(std::move(logits));
    }
    return out;
  }
  // Sequences ordered by variant (stable), so each variant's rows are one group.
  std::vector<size_t> order(sequences.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::less<const Variant*>()(sequences[a].variant, sequences[b].variant);
  });
  std::vector<Sequence> seqs;
  std::vector<RowGroup> groups;
  int64_t rows = 0;
  for (size_t i : order) {
    const SequencePass& s = sequences[i];
    if (groups.empty() || groups.back().variant != s.variant) groups.push_back({rows, 0, s.variant});
    groups.back().rows += s.batch->size();
    seqs.push_back({s.cache, s.batch, s.variant, rows, groups.size() - 1, {}});
    rows += s.batch->size();
  }
  BITSPLIT_ASSIGN_OR_RETURN(auto logits, ForwardPass(model, seqs, groups, nullptr, pass).run());
  std::vector<std::vector<float>> out(sequences.size());
  for (size_t k = 0; k < order.size(); ++k) out[order[k]] = std::move(logits[k]);
  return out;
}

Status forward_layers(const Model& model, KvCache& cache, const Batch& batch, int64_t first, int64_t last,
                      std::vector<float>& hidden, const ActivationObserver* observer, Pass pass,
                      std::vector<float>* logits) {
  if (pass == Pass::kDefault) pass = model.default_pass();
  const ModelConfig& c = model.config();
  BITSPLIT_RETURN_IF_ERROR(batch.validate(c, cache));
  if (first < 0 || first > last || last > c.n_layers) {
    return Status::error("forward_layers: layers [" + std::to_string(first) + ", " + std::to_string(last) +
                         ") are not within the model's " + std::to_string(c.n_layers));
  }
  if (hidden.empty() ? first != 0 : int64_t(hidden.size()) != batch.size() * c.n_embd) {
    return Status::error("forward_layers: the residual stream has " + std::to_string(hidden.size()) +
                         " values; the batch's " + std::to_string(batch.size()) + " rows need " +
                         std::to_string(batch.size() * c.n_embd) + (first == 0 ? " (or none: the embeddings)" : ""));
  }
  if (logits && last != c.n_layers) return Status::error("forward_layers: logits need the last layer");
  std::vector<Sequence> seqs{{&cache, &batch, nullptr, 0, 0, {}}};
  const std::vector<RowGroup> groups{{0, batch.size(), nullptr}};
  return ForwardPass(model, seqs, groups, observer, pass).run_layers(first, last, hidden, logits);
}

Result<std::vector<float>> forward_pass(const Model& model, KvCache& cache, const Batch& batch,
                                        const ActivationObserver* observer, Pass pass, const Variant* variant) {
  if (pass == Pass::kDefault) pass = model.default_pass();
  BITSPLIT_RETURN_IF_ERROR(batch.validate(model.config(), cache));
  return run_one(model, cache, batch, variant, observer, pass);
}

}  // namespace bitsplit
