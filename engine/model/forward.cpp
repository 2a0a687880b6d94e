// forward_pass over a batch with an arbitrary attention mask, and forward_passes over several
// sequences' batches at once: f32 ops for norms, RoPE and attention; projections on f32 weights,
// Q8_0 blocks or bit-split planes (D·X on the model's Backend, R·X on the CPU). Every op is batch
// invariant, so a token's logits do not depend on its batch, nor on the other sequences beside it.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "bitsplit/expert_routing.h"
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

// body(begin, end) over [0, n) in contiguous slices on the model's CPU threads when there are at
// least kMinParallel items (prompt chunks; each item is written by one slice only), else inline:
// a one-row decode step does not pay for waking the workers. Same results either way.
template <typename Body>
void for_slices(const Model& model, int64_t n, int64_t min_parallel, Body&& body) {
  if (n < min_parallel || !model.has_cpu()) return body(int64_t{0}, n);
  model.cpu().run_slices(n, 1, body);
}
constexpr int64_t kParallelRows = 16, kParallelElements = 1 << 16;

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

// Consecutive rows of a pass decoded with one variant (null: the base). A pass's sequences are
// ordered by variant, so each variant's rows form one group.
struct RowGroup {
  int64_t row0 = 0, rows = 0;
  const Variant* variant = nullptr;
};

// The input of one or more projections. Its int8 form (plane kernels) or int8-rounded f32
// form (llama.cpp emulation) is made at most once, however many projections read it: q, k
// and v share one input, gate and up another. With several row groups the plane kernels' D
// runs per group (each with its variant's signs) on the group's own rows, quantised once
// per group too: activations are quantised row by row, so a group's rows quantise alike alone.
class ProjectionInput {
 public:
  ProjectionInput(const Activations& x, const std::vector<RowGroup>& groups) : x_(x), groups_(groups) {}
  const Activations& f32() const { return x_; }
  const std::vector<RowGroup>& groups() const { return groups_; }

  // Step 1 of the plane kernels' arithmetic; with `remainder`, step 1b too (2·rows rows: the
  // activations' int8 form, then their remainder's).
  const cpu::QuantizedActivations& quantized(const Model& model, int group, bool remainder = false) {
    Quantized& c = all_[remainder];
    if (c.group != group) {
      quantize(model, x_.data.data(), x_.rows, group, remainder, c.qa);
      c.group = group;
    }
    return c.qa;
  }

  // The rows of row group g alone (all of them when there is one group).
  const cpu::QuantizedActivations& quantized_group(const Model& model, int group, size_t g, bool remainder = false) {
    if (groups_.size() == 1) return quantized(model, group, remainder);
    std::vector<Quantized>& per = per_group_[remainder];
    if (per.size() != groups_.size()) per.resize(groups_.size());
    if (per[g].group != group) {
      quantize(model, x_.row(groups_[g].row0), groups_[g].rows, group, remainder, per[g].qa);
      per[g].group = group;
    }
    return per[g].qa;
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
  struct Quantized {
    cpu::QuantizedActivations qa;
    int group = 0;  // 0: not made yet
  };
  void quantize(const Model& model, const float* x, int64_t rows, int group, bool remainder,
                cpu::QuantizedActivations& qa) const {
    if (remainder) cpu::quantize_activations_with_remainder(model.cpu(), x, rows, x_.width, group, qa);
    else cpu::quantize_activations(model.cpu(), x, rows, x_.width, group, qa);
  }

  const Activations& x_;
  const std::vector<RowGroup>& groups_;
  Quantized all_[2];                    // [remainder]
  std::vector<Quantized> per_group_[2];  // [remainder][row group]
  std::vector<float> rounded_;
  int64_t rounded_group_ = 0;
  cpu::Q8_0Activations q8_;
  bool q8_ready_ = false;
};

// linear()'s intermediate products in one pass: R·X, and D·X of step 1b's two halves. Grown as
// the projections need, never zeroed (every element is written before it is read), freed with the
// pass. (A fresh zeroed vector per projection was a zeroing pass and, at prompt sizes, fresh pages
// to fault in.)
class LinearScratch {
 public:
  float* residual(size_t n) { return fit(residual_, n); }
  float* draft(size_t n) { return fit(draft_, n); }

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t size = 0;
  };
  static float* fit(Buffer& b, size_t n) {
    if (b.size < n) {
      b.data.reset();  // the old buffer goes before the new one is allocated
      b.data = std::make_unique_for_overwrite<float[]>(n);
      b.size = n;
    }
    return b.data.get();
  }
  Buffer residual_, draft_;
};

// A product over step 1b's 2·n rows folded to n: out[i] = two[i] + two[half + i], one f32 add,
// then `plus[i]` added when given (the residual term, in the same pass: (D·X̂ + D·Ê) + R·X̂).
// out may be `two`: each element is read before it is written.
void sum_halves(const Model& model, const float* two, size_t half, float* out, const float* plus = nullptr) {
  for_slices(model, int64_t(half), kParallelElements, [&](int64_t b, int64_t e) {
    if (plus) {
      for (int64_t i = b; i < e; ++i) out[i] = (two[i] + two[int64_t(half) + i]) + plus[i];
    } else {
      for (int64_t i = b; i < e; ++i) out[i] = two[i] + two[int64_t(half) + i];
    }
  });
}

// What one row group's variant makes of a projection: the f32 weights (the f32 path), the bias,
// the sign plane and the LoRA change.
struct GroupProjection {
  const std::vector<float>* w = nullptr;
  const std::vector<float>* bias = nullptr;
  const VariantSigns* signs = nullptr;
  const VariantLora* lora = nullptr;
};

// One projection: f32 weights through the reference matmul, or bit-split planes through the
// plane kernels (D + R for the target, D alone for the draft), then the bias. A variant's sign
// plane joins D (fused into the draft kernel on the plane path); its LoRA change is added in
// f32 from the unrounded input, in every tier, before the bias. `parts` has one entry per row
// group of `in`. The residual R (the target's bulk) is streamed once for every group's rows;
// D runs per group, with that group's signs.
Status linear(const Model& model, Pass pass, const std::string& name, ProjectionInput& in,
              const std::vector<GroupProjection>& parts, LinearScratch& scratch, Activations& y) {
  const Activations& x = in.f32();
  const std::vector<RowGroup>& groups = in.groups();
  const SplitProjection* planes = model.split(name);
  auto delta_of = [&](size_t g) -> std::optional<cpu::SignPlaneView> {
    if (parts[g].signs) return parts[g].signs->view();
    return std::nullopt;
  };
  if (const std::vector<uint8_t>* q8 = model.q8_0(name)) {
    in.q8_0_kernel(model, cpu::Q8_0PlaneView{q8->data(), y.width, x.width}, y.data.data());
    for (size_t g = 0; g < groups.size(); ++g) {
      if (auto d = delta_of(g)) cpu::sign_matmul_add_f32(*d, x.row(groups[g].row0), groups[g].rows, y.row(groups[g].row0));
    }
  } else if (!planes) {
    const std::vector<float>& xs = model.activation_rounding() > 0 ? in.rounded(model.activation_rounding()) : x.data;
    const bool shared = std::all_of(parts.begin(), parts.end(), [&](const GroupProjection& p) { return p.w == parts[0].w; });
    if (shared) cpu::matmul_f32(xs, x.rows, x.width, *parts[0].w, y.width, {}, y.data);
    for (size_t g = 0; g < groups.size(); ++g) {
      const RowGroup& rg = groups[g];
      const float* xg = xs.data() + rg.row0 * x.width;
      if (!shared) {
        cpu::matmul_f32({xg, size_t(rg.rows * x.width)}, rg.rows, x.width, *parts[g].w, y.width, {},
                        {y.row(rg.row0), size_t(rg.rows * y.width)});
      }
      if (auto d = delta_of(g)) cpu::sign_matmul_add_f32(*d, xg, rg.rows, y.row(rg.row0));
    }
  } else if (pass == Pass::kDraft) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto d = delta_of(g);
      BITSPLIT_RETURN_IF_ERROR(model.backend().draft_matmul(*planes, in.quantized_group(model, planes->group, g),
                                                            y.row(groups[g].row0), d ? &*d : nullptr));
    }
  } else {
    // The two planes: D·X (+ the variant's signs) on the model's backend (CPU or GPU), R·X on the
    // CPU, summed draft first (the same order as cpu::target_matmul). R·X (packed when loaded)
    // runs on the CPU, over every group's rows at once, while the backend computes the first
    // group's D·X (a GPU overlaps); the other groups' D·X follow. With the activations'
    // remainder (step 1b: for D, and for R too, as the model asks) a plane multiplies twice the
    // rows and each row sums its two halves.
    const bool rem_r = model.target_activations() == TargetActivations::kRemainder;
    const bool rem_d = rem_r || model.target_activations() == TargetActivations::kDraftRemainder;
    const cpu::QuantizedActivations& all = in.quantized(model, planes->group, rem_r);
    float* residual = scratch.residual(size_t(all.rows * y.width));
    float* dbuf = nullptr;
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto d = delta_of(g);
      const cpu::QuantizedActivations& qg = in.quantized_group(model, planes->group, g, rem_d);
      float* yg = y.row(groups[g].row0);
      float* out = yg;
      if (rem_d) {
        dbuf = scratch.draft(size_t(qg.rows * y.width));
        out = dbuf;
      }
      if (g == 0) {
        BITSPLIT_RETURN_IF_ERROR(model.backend().target_matmul(
            *planes, qg, out, d ? &*d : nullptr, [&] { planes->cpu_residual_matmul(model.cpu(), all, residual); }));
      } else {
        BITSPLIT_RETURN_IF_ERROR(model.backend().draft_matmul(*planes, qg, out, d ? &*d : nullptr));
      }
      // With the residual's halves still to be summed, R·X is added after the loop.
      if (rem_d) {
        sum_halves(model, dbuf, size_t(groups[g].rows * y.width), yg,
                   rem_r ? nullptr : residual + groups[g].row0 * y.width);
      }
    }
    if (rem_r) sum_halves(model, residual, y.data.size(), residual);
    if (!rem_d || rem_r) {  // (else added with D's halves above)
      for_slices(model, int64_t(y.data.size()), kParallelElements, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y.data[size_t(i)] += residual[i];
      });
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const RowGroup& rg = groups[g];
    if (parts[g].lora) parts[g].lora->apply(x.row(rg.row0), rg.rows, y.row(rg.row0));
    const std::vector<float>& bias = *parts[g].bias;
    if (bias.empty()) continue;
    for (int64_t r = rg.row0; r < rg.row0 + rg.rows; ++r)
      for (int64_t o = 0; o < y.width; ++o) y.data[size_t(r * y.width + o)] += bias[size_t(o)];
  }
  return Status::ok();
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

// The pass over `seqs` (ordered by variant; row groups as `groups`). Logits of the wanted rows,
// per sequence.
Result<std::vector<std::vector<float>>> run_pass(const Model& model, std::vector<Sequence>& seqs,
                                                 const std::vector<RowGroup>& groups, const ActivationObserver* observer,
                                                 Pass pass) {
  const ModelConfig& c = model.config();
  int64_t n = 0;
  for (const Sequence& s : seqs) n += s.batch->size();
  Activations x(n, c.n_embd), h(n, c.n_embd), q(n, c.q_dim()), k(n, c.kv_dim()), v(n, c.kv_dim());
  Activations attn(n, c.q_dim()), proj(n, c.n_embd);
  // Every tensor a variant may change goes through these: base tensors unless it replaces
  // them, and its sign planes where it has them.
  auto pick = [&](const Variant* variant, const std::string& tensor,
                  const std::vector<float>& base) -> const std::vector<float>& {
    return variant ? variant->pick(tensor, base) : base;
  };
  // A layer tensor's name is only built when a variant could replace it (hot path).
  auto pick_layer = [&](const Variant* variant, int64_t layer, const char* tensor, const char* suffix,
                        const std::vector<float>& base) -> const std::vector<float>& {
    if (!variant || base.empty()) return base;
    return variant->pick("blk." + std::to_string(layer) + "." + tensor + suffix, base);
  };
  auto signs_of = [&](const Variant* variant, const std::string& weight) { return variant ? variant->signs(weight) : nullptr; };
  auto lora_of = [&](const Variant* variant, const std::string& weight) { return variant ? variant->lora(weight) : nullptr; };
  for (const Sequence& s : seqs) {
    const Batch& batch = *s.batch;
    // A variant's own full embedding, else the model's rows (held f32 or Q8_0).
    const std::vector<float>* embd = s.variant ? s.variant->full("token_embd.weight") : nullptr;
    const VariantSigns* embd_signs = signs_of(s.variant, "token_embd.weight");
    const VariantLora* embd_lora = lora_of(s.variant, "token_embd.weight");
    std::vector<float> delta_row(embd_signs ? static_cast<size_t>(c.n_embd) : 0);
    for (int64_t i = 0; i < batch.size(); ++i) {
      const int64_t token = batch.tokens[size_t(i)];
      float* xr = x.row(s.row0 + i);
      if (embd) {
        const float* e = embd->data() + token * c.n_embd;
        std::copy(e, e + c.n_embd, xr);
      } else {
        model.embed_row(token, xr);
      }
      if (embd_signs) {
        quant::bitdelta_decode_row_ref(embd_signs->signs.data() + token * embd_signs->row_bytes,
                                       embd_signs->alpha_of(token), c.n_embd, delta_row.data());
        for (int64_t j = 0; j < c.n_embd; ++j) xr[j] += delta_row[size_t(j)];
      }
      if (embd_lora) embd_lora->add_row(token, xr);
      if (c.embd_scale != 1.0f) {
        for (int64_t j = 0; j < c.n_embd; ++j) xr[j] *= c.embd_scale;
      }
    }
  }
  const std::vector<float> no_bias;
  LinearScratch scratch;  // every projection's intermediate products
  auto name = [](int64_t layer, const char* weight) { return "blk." + std::to_string(layer) + "." + weight + ".weight"; };
  // A layer's projection as each row group sees it. `base` is the base's f32 weights.
  auto project = [&](int64_t layer, const char* weight, ProjectionInput& in, const std::vector<float>& base,
                     const std::vector<float>& bias, Activations& y) {
    const std::string n = name(layer, weight);
    std::vector<GroupProjection> parts;
    for (const RowGroup& g : in.groups()) {
      parts.push_back({&base, &pick_layer(g.variant, layer, weight, ".bias", bias), signs_of(g.variant, n),
                       lora_of(g.variant, n)});
    }
    return linear(model, pass, n, in, parts, scratch, y);
  };
  auto observe = [&](int64_t layer, const char* weight, const Activations& a) {
    if (observer) (*observer)(name(layer, weight), a.data.data(), a.rows, a.width);
  };
  Activations ffn_gate(0, 0), ffn_up(0, 0);  // gated_ffn's
  // out = down(act(gate(in)) ⊙ up(in)) with the projections "ffn_gate<suffix>" etc. of width ff.
  auto gated_ffn = [&](int64_t l, const std::string& suffix, const Activations& in, const std::vector<RowGroup>& gs,
                       int64_t ff, Activations& out) -> Status {
    const LayerWeights& w = model.layer(l);
    const std::string g = "ffn_gate" + suffix, u = "ffn_up" + suffix, d = "ffn_down" + suffix;
    // The gate and up outputs: the pass's buffers when the shape is the last one's (every layer
    // of a dense model), not fresh zeroed ones per layer; the projections write every element.
    auto fit = [](Activations& a, int64_t rows, int64_t width) {
      if (a.rows != rows || a.width != width) a = Activations(rows, width);
    };
    fit(ffn_gate, in.rows, ff);
    fit(ffn_up, in.rows, ff);
    Activations& gt = ffn_gate;
    Activations& upv = ffn_up;
    observe(l, g.c_str(), in);
    observe(l, u.c_str(), in);
    ProjectionInput ffn_in(in, gs);
    BITSPLIT_RETURN_IF_ERROR(project(l, g.c_str(), ffn_in, w.projection(g), no_bias, gt));
    BITSPLIT_RETURN_IF_ERROR(project(l, u.c_str(), ffn_in, w.projection(u), no_bias, upv));
    const bool gelu = c.ffn_act == FfnActivation::kGeluTanh;
    for_slices(model, int64_t(gt.data.size()), kParallelElements, [&](int64_t b, int64_t e) {
      float* g = gt.data.data();
      const float* u = upv.data.data();
      if (gelu) {
        for (int64_t i = b; i < e; ++i) g[i] = cpu::gelu_tanh(g[i]) * u[i];
      } else {
        cpu::silu_mul(g + b, u + b, e - b);
      }
    });
    observe(l, d.c_str(), gt);
    ProjectionInput down_in(gt, gs);
    return project(l, d.c_str(), down_in, w.projection(d), no_bias, out);
  };
  // A mixture of experts: each row goes to its n_expert_used most probable experts (softmax of
  // the router's logits, ties to the lower index), their outputs summed with those
  // probabilities (renormalised when expert_weights_norm); an expert runs once, on the rows
  // routed to it, so a pass reads only the routed experts' planes. The shared expert (if any)
  // is added after, gated by sigmoid(x · ffn_gate_inp_shexp). One sequence per pass
  // (forward_passes runs MoE sequences one by one).
  auto moe_ffn = [&](int64_t l, const Activations& in, Activations& out) -> Status {
    const LayerWeights& w = model.layer(l);
    const Variant* variant = seqs[0].variant;
    const std::vector<float>& router = pick_layer(variant, l, "ffn_gate_inp", ".weight", w.ffn_gate_inp);
    std::vector<float> logits(size_t(in.rows * c.n_expert));
    observe(l, "ffn_gate_inp", in);  // the router's input (importance matrices; routing measurements)
    cpu::matmul_f32(in.data, in.rows, c.n_embd, router, c.n_expert, {}, logits);
    std::vector<ExpertRows> routed;
    route_experts(logits.data(), in.rows, c.n_expert, c.n_expert_used, c.expert_weights_norm, routed);
    std::fill(out.data.begin(), out.data.end(), 0.0f);
    for (int64_t e = 0; e < c.n_expert; ++e) {
      const ExpertRows& rows = routed[size_t(e)];
      if (rows.rows.empty()) continue;
      Activations xe(int64_t(rows.rows.size()), c.n_embd), ye(int64_t(rows.rows.size()), c.n_embd);
      for (size_t j = 0; j < rows.rows.size(); ++j) std::copy(in.row(rows.rows[j]), in.row(rows.rows[j]) + c.n_embd, xe.row(int64_t(j)));
      std::string suffix(1, '.');
      suffix += std::to_string(e);
      const std::vector<RowGroup> expert_rows{{0, xe.rows, variant}};
      BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, suffix, xe, expert_rows, c.n_ff_exp, ye));
      for (size_t j = 0; j < rows.rows.size(); ++j) {
        float* o = out.row(rows.rows[j]);
        const float* y = ye.row(int64_t(j));
        const float wt = rows.weights[j];
        for (int64_t d = 0; d < c.n_embd; ++d) o[d] += wt * y[d];
      }
    }
    if (c.n_ff_shexp > 0) {
      Activations ys(in.rows, c.n_embd);
      BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, "_shexp", in, groups, c.n_ff_shexp, ys));
      const std::vector<float>& gate_w = pick_layer(variant, l, "ffn_gate_inp_shexp", ".weight", w.ffn_gate_inp_shexp);
      for (int64_t r = 0; r < in.rows; ++r) {
        const float g = 1.0f / (1.0f + std::exp(-cpu::dot_f32(in.row(r), gate_w.data(), c.n_embd)));
        float* o = out.row(r);
        const float* y = ys.row(r);
        for (int64_t d = 0; d < c.n_embd; ++d) o[d] += g * y[d];
      }
    }
    return Status::ok();
  };
  // Every slot a batch writes takes its token's position (before any layer reads positions),
  // and the sliding-window layers' mask is made once for the pass.
  for (Sequence& s : seqs) {
    for (int64_t i = 0; i < s.batch->size(); ++i) s.cache->set_position(s.batch->slots[size_t(i)], s.batch->positions[size_t(i)]);
    s.swa = sliding_window_mask(c, *s.cache, *s.batch);
  }
  // rms_norm of rows with each group's copy of a norm tensor (`tensor` in the variant's names).
  auto norm_rows = [&](int64_t l, const char* tensor, const std::vector<float>& base, const Activations& from,
                       Activations& to) {
    for (const RowGroup& g : groups) {
      const std::vector<float>& weight = pick_layer(g.variant, l, tensor, ".weight", base);
      for_slices(model, g.rows, kParallelRows, [&](int64_t b, int64_t e) {
        for (int64_t i = g.row0 + b; i < g.row0 + e; ++i) cpu::rms_norm_f32(from.row(i), weight.data(), c.n_embd, c.rms_eps, to.row(i));
      });
    }
  };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layer(l);
    const float rope_base = c.layer_rope_base(l), rope_scale = c.layer_rope_freq_scale(l);
    // Gemma: the branch's output is normalised before it joins the residual stream.
    auto add_branch = [&](const char* post_norm, const std::vector<float>& base) {
      if (c.has_post_norms) norm_rows(l, post_norm, base, proj, proj);
      for_slices(model, int64_t(x.data.size()), kParallelElements, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) x.data[size_t(i)] += proj.data[size_t(i)];
      });
    };
    norm_rows(l, "attn_norm", w.attn_norm, x, h);
    observe(l, "attn_q", h);
    observe(l, "attn_k", h);
    observe(l, "attn_v", h);
    ProjectionInput attn_in(h, groups);
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_q", attn_in, w.wq, w.bq, q));
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_k", attn_in, w.wk, w.bk, k));
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_v", attn_in, w.wv, w.bv, v));
    for (const Sequence& s : seqs) {
      const Batch& batch = *s.batch;
      const std::vector<float>& q_norm = pick_layer(s.variant, l, "attn_q_norm", ".weight", w.q_norm);
      const std::vector<float>& k_norm = pick_layer(s.variant, l, "attn_k_norm", ".weight", w.k_norm);
      const std::vector<float>& factors = model.rope_freq_factors(s.cache->context());
      for_slices(model, batch.size(), kParallelRows, [&](int64_t rb, int64_t re) {
        // The position's rotation, once for all its heads (rope_f32's values).
        std::vector<float> rotation(size_t(c.n_rot));
        for (int64_t i = rb; i < re; ++i) {
          const float pos = float(batch.positions[size_t(i)]);
          cpu::rope_table(c.n_rot, pos, rope_base, rope_scale, factors, c.rope_attn_factor, rotation.data());
          float* qr = q.row(s.row0 + i);
          float* kr = k.row(s.row0 + i);
          for (int64_t hd = 0; hd < c.n_heads; ++hd) {
            float* qh = qr + hd * c.head_dim;
            if (c.has_qk_norm) cpu::rms_norm_f32(qh, q_norm.data(), c.head_dim, c.rms_eps, qh);
            cpu::rope_apply(qh, c.n_rot, c.rope_order, rotation.data());
          }
          for (int64_t hd = 0; hd < c.n_kv_heads; ++hd) {
            float* kh = kr + hd * c.head_dim;
            if (c.has_qk_norm) cpu::rms_norm_f32(kh, k_norm.data(), c.head_dim, c.rms_eps, kh);
            cpu::rope_apply(kh, c.n_rot, c.rope_order, rotation.data());
          }
          std::copy(kr, kr + c.kv_dim(), s.cache->k(l, batch.slots[size_t(i)]));
          const float* vr = v.row(s.row0 + i);
          std::copy(vr, vr + c.kv_dim(), s.cache->v(l, batch.slots[size_t(i)]));
        }
      });
    }
    for (const Sequence& s : seqs) {
      attention(c, *s.cache, l, *s.batch, c.is_swa(l) ? s.swa.data() : s.batch->mask.data(), q, attn, s.row0);
    }
    observe(l, "attn_output", attn);
    ProjectionInput out_in(attn, groups);
    BITSPLIT_RETURN_IF_ERROR(project(l, "attn_output", out_in, w.wo, no_bias, proj));
    add_branch("post_attention_norm", w.post_attn_norm);

    norm_rows(l, "ffn_norm", w.ffn_norm, x, h);
    if (!c.is_moe()) {
      BITSPLIT_RETURN_IF_ERROR(gated_ffn(l, "", h, groups, c.n_ff, proj));
    } else {
      BITSPLIT_RETURN_IF_ERROR(moe_ffn(l, h, proj));
    }
    add_branch("post_ffw_norm", w.post_ffn_norm);
  }

  // The wanted rows, in pass order, and their row groups.
  std::vector<RowGroup> out_groups(groups.size());
  std::vector<int64_t> wanted(seqs.size(), 0);
  int64_t n_out = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (uint8_t want : seqs[i].batch->want_logits) wanted[i] += want ? 1 : 0;
    RowGroup& g = out_groups[seqs[i].group];
    if (g.rows == 0) g.row0 = n_out;
    g.rows += wanted[i];
    g.variant = groups[seqs[i].group].variant;
    n_out += wanted[i];
  }
  std::erase_if(out_groups, [](const RowGroup& g) { return g.rows == 0; });
  Activations last(n_out, c.n_embd);
  int64_t r = 0;  // the wanted rows, in pass order
  for (const Sequence& s : seqs) {
    const std::vector<float>& output_norm = pick(s.variant, "output_norm.weight", model.output_norm());
    for (int64_t i = 0; i < s.batch->size(); ++i) {
      if (s.batch->want_logits[size_t(i)]) cpu::rms_norm_f32(x.row(s.row0 + i), output_norm.data(), c.n_embd, c.rms_eps, last.row(r++));
    }
  }
  Activations logits(n_out, c.n_vocab);
  if (observer && n_out > 0) (*observer)("output.weight", last.data.data(), last.rows, last.width);
  if (n_out > 0) {
    ProjectionInput head_in(last, out_groups);
    // A tied head reads the embedding, so it takes the embedding's delta (full or signs).
    // Variant::make gives a head read from the embedding the embedding's LoRA under this name.
    const bool tied = c.tied_output;
    // A head held as planes or Q8_0 blocks reads no f32 matrix (and a Q8_0-held embedding is
    // not expanded to f32 for it).
    const bool head_f32 = !model.split("output.weight") && !model.q8_0("output.weight");
    static const std::vector<float> kNoMatrix;
    std::vector<GroupProjection> parts;
    for (const RowGroup& g : out_groups) {
      const std::vector<float>& head = !head_f32 ? kNoMatrix
                                       : tied    ? pick(g.variant, "token_embd.weight", model.token_embd())
                                                 : model.output();
      parts.push_back({&head, &no_bias, tied ? signs_of(g.variant, "token_embd.weight") : signs_of(g.variant, "output.weight"),
                       lora_of(g.variant, "output.weight")});
    }
    BITSPLIT_RETURN_IF_ERROR(linear(model, pass, "output.weight", head_in, parts, scratch, logits));
    if (c.final_softcap > 0.0f) {
      for (float& v : logits.data) v = cpu::softcap(v, c.final_softcap);
    }
  }
  std::vector<std::vector<float>> result(seqs.size());
  r = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    result[i].assign(logits.row(r), logits.row(r) + wanted[i] * c.n_vocab);
    r += wanted[i];
  }
  return result;
}

// One sequence's pass (its batch already validated).
Result<std::vector<float>> run_one(const Model& model, KvCache& cache, const Batch& batch, const Variant* variant,
                                   const ActivationObserver* observer, Pass pass) {
  std::vector<Sequence> seqs{{&cache, &batch, variant, 0, 0, {}}};
  const std::vector<RowGroup> groups{{0, batch.size(), variant}};
  BITSPLIT_ASSIGN_OR_RETURN(auto logits, run_pass(model, seqs, groups, observer, pass));
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
  BITSPLIT_ASSIGN_OR_RETURN(auto logits, run_pass(model, seqs, groups, nullptr, pass));
  std::vector<std::vector<float>> out(sequences.size());
  for (size_t k = 0; k < order.size(); ++k) out[order[k]] = std::move(logits[k]);
  return out;
}

Result<std::vector<float>> forward_pass(const Model& model, KvCache& cache, const Batch& batch,
                                        const ActivationObserver* observer, Pass pass, const Variant* variant) {
  if (pass == Pass::kDefault) pass = model.default_pass();
  BITSPLIT_RETURN_IF_ERROR(batch.validate(model.config(), cache));
  return run_one(model, cache, batch, variant, observer, pass);
}

}  // namespace bitsplit
