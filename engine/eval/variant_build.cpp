// BitDeltas computed in memory from two loaded models, and scale distillation on a text.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

#include "bitsplit/model.h"
#include "bitsplit/quality.h"
#include "bitsplit/variant_build.h"
#include "bitsplit/variant.h"

namespace bitsplit {
namespace {

struct NamedTensor {
  std::string name;
  const std::vector<float>* data;
  bool sign_plane;  // a projection or the embedding (the rest is stored in full)
};

// Every weight of a model in f32 by GGUF name. The head is listed only when it is its own
// tensor (a tied head reads the embedding's delta).
std::vector<NamedTensor> named_tensors(const Model& m) {
  const ModelConfig& c = m.config();
  std::vector<NamedTensor> t = {{"token_embd.weight", &m.token_embd(), true},
                                {"output_norm.weight", &m.output_norm(), false}};
  if (!c.tied_output) t.push_back({"output.weight", &m.output(), true});
  const std::vector<ProjectionSlot> projections = layer_projections(c);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layer(l);
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const ProjectionSlot& p : projections) t.push_back({b + p.kind + ".weight", &w.projection(p.kind), true});
    const std::pair<const char*, const std::vector<float>*> small[] = {
        {"attn_norm.weight", &w.attn_norm}, {"ffn_norm.weight", &w.ffn_norm}, {"attn_q_norm.weight", &w.q_norm},
        {"attn_k_norm.weight", &w.k_norm},  {"attn_q.bias", &w.bq},          {"attn_k.bias", &w.bk},
        {"attn_v.bias", &w.bv},
        // gemma's norms after each branch; a mixture of experts' router and shared-expert gate
        {"post_attention_norm.weight", &w.post_attn_norm}, {"post_ffw_norm.weight", &w.post_ffn_norm},
        {"ffn_gate_inp.weight", &w.ffn_gate_inp}, {"ffn_gate_inp_shexp.weight", &w.ffn_gate_inp_shexp}};
    for (const auto& [n, v] : small)
      if (!v->empty()) t.push_back({b + n, v, false});
  }
  return t;
}

}  // namespace

Result<DeltaParts> compute_delta(const Model& base, const Model& finetuned, quant::DeltaAlpha alpha) {
  if (base.has_planes() || finetuned.has_planes()) return Status::error("a delta is computed from the original base and fine-tuned models, not from converted bit-split ones");
  const ModelConfig &cb = base.config(), &cf = finetuned.config();
  if (cb.n_layers != cf.n_layers || cb.n_embd != cf.n_embd || cb.n_ff != cf.n_ff || cb.n_vocab != cf.n_vocab ||
      cb.q_dim() != cf.q_dim() || cb.kv_dim() != cf.kv_dim() || cb.tied_output != cf.tied_output) {
    return Status::error("the base and fine-tuned models have different shapes");
  }
  const auto bt = named_tensors(base), ft = named_tensors(finetuned);
  if (bt.size() != ft.size()) return Status::error("the base and fine-tuned models have different tensors");
  DeltaParts parts;
  for (size_t i = 0; i < bt.size(); ++i) {
    const std::vector<float>&b = *bt[i].data, &f = *ft[i].data;
    if (bt[i].name != ft[i].name || b.size() != f.size()) {
      return Status::error("tensor '" + bt[i].name + "' differs in shape between the base and the fine-tuned model");
    }
    if (b == f) continue;
    if (!bt[i].sign_plane) {
      parts.full[bt[i].name] = f;
      continue;
    }
    BITSPLIT_ASSIGN_OR_RETURN(WeightShape shape, weight_shape(base, bt[i].name));
    std::vector<float> d(b.size());
    for (size_t j = 0; j < d.size(); ++j) d[j] = f[j] - b[j];
    VariantSigns s;
    s.out = shape.out;
    s.in = shape.in;
    s.row_bytes = quant::delta_sign_row_bytes(shape.in);
    s.alpha_per_row = alpha == quant::DeltaAlpha::kRow;
    s.signs.resize(size_t(s.out * s.row_bytes));
    s.alpha.resize(s.alpha_per_row ? size_t(s.out) : 1);
    quant::bitdelta_encode_ref(d.data(), s.out, s.in, alpha, s.signs.data(), s.alpha.data());
    parts.signs[bt[i].name] = std::move(s);
  }
  return parts;
}

Result<DistillReport> distill_delta_scales(const Model& base, const Model& finetuned, const std::vector<int32_t>& tokens,
                                           int32_t ctx, int32_t bos, DeltaParts& delta,
                                           const std::function<void(int64_t, int64_t)>& on_progress) {
  if (ctx < 2 || ctx > finetuned.config().n_ctx_train) return Status::error("distillation window out of range");
  if (tokens.size() < 2) return Status::error("the distillation text is too short: it needs at least 2 tokens");
  // Per projection: Δ and S as f32 matrices, and per output row the sums Σ(Δx)(Sx), Σ(Sx)², Σ(Δx)².
  struct Fit {
    WeightShape shape;
    std::vector<float> d, s;
    std::vector<double> num, den, dd;
  };
  std::map<std::string, Fit> fits;
  std::map<std::string, const std::vector<float>*> base_w, ft_w;
  for (const auto& t : named_tensors(base)) base_w[t.name] = t.data;
  for (const auto& t : named_tensors(finetuned)) ft_w[t.name] = t.data;
  for (const auto& [name, signs] : delta.signs) {
    if (name == "token_embd.weight") continue;  // a lookup, not a product with activations
    if (!base_w.contains(name)) continue;       // a tied head shares the embedding's signs
    Fit f;
    f.shape = {signs.out, signs.in};
    const std::vector<float>&b = *base_w[name], &w = *ft_w[name];
    f.d.resize(b.size());
    f.s.resize(b.size());
    for (size_t k = 0; k < f.d.size(); ++k) f.d[k] = w[k] - b[k];
    for (int64_t o = 0; o < signs.out; ++o)  // S as ±1: the signs decoded with α = 1
      quant::bitdelta_decode_row_ref(signs.signs.data() + o * signs.row_bytes, 1.0f, signs.in, f.s.data() + o * signs.in);
    f.num.assign(size_t(signs.out), 0.0);
    f.den.assign(size_t(signs.out), 0.0);
    f.dd.assign(size_t(signs.out), 0.0);
    fits.emplace(name, std::move(f));
  }
  const ActivationObserver observer = [&](const std::string& weight, const float* x, int64_t rows, int64_t cols) {
    auto it = fits.find(weight);
    if (it == fits.end()) return;
    Fit& f = it->second;
    if (cols != f.shape.in) return;
    tbb::parallel_for(int64_t{0}, f.shape.out, [&](int64_t o) {
      const float* d = f.d.data() + o * cols;
      const float* s = f.s.data() + o * cols;
      for (int64_t r = 0; r < rows; ++r) {
        const double a = cpu::dot_f32(d, x + r * cols, cols), b = cpu::dot_f32(s, x + r * cols, cols);
        f.num[size_t(o)] += a * b;
        f.den[size_t(o)] += b * b;
        f.dd[size_t(o)] += a * a;
      }
    });
  };
  DistillReport rep;
  const int64_t run = bos >= 0 ? ctx - 1 : ctx;
  const int64_t total = (int64_t(tokens.size()) + run - 1) / run;
  int64_t done = 0;
  for (size_t at = 0; at + 1 < tokens.size(); at += size_t(run)) {
    std::vector<int32_t> win;
    if (bos >= 0) win.push_back(bos);
    const size_t n = std::min(tokens.size() - at, size_t(run));
    win.insert(win.end(), tokens.begin() + ptrdiff_t(at), tokens.begin() + ptrdiff_t(at + n));
    KvCache cache(finetuned.config(), int64_t(win.size()));
    // Every row's logits, so the output head sees every position's input.
    BITSPLIT_RETURN_IF_ERROR(forward_pass(finetuned, cache, Batch::causal(win, 0, true), &observer));
    rep.tokens += int64_t(win.size());
    if (on_progress) on_progress(++done, total);
  }
  // Squared error of the outputs with scales α: Σ dd − 2α num + α² den, per row.
  double before = 0, after = 0, norm = 0;
  for (auto& [name, f] : fits) {
    VariantSigns& signs = delta.signs.at(name);
    auto err = [&](int64_t o, double a) { return f.dd[size_t(o)] - 2 * a * f.num[size_t(o)] + a * a * f.den[size_t(o)]; };
    double num = 0, den = 0;
    for (int64_t o = 0; o < signs.out; ++o) {
      before += err(o, signs.alpha_of(o));
      norm += f.dd[size_t(o)];
      num += f.num[size_t(o)];
      den += f.den[size_t(o)];
      // A row whose outputs never moved, or whose best scale is not positive, keeps mean |Δ|.
      if (signs.alpha_per_row && f.den[size_t(o)] > 0 && f.num[size_t(o)] > 0)
        signs.alpha[size_t(o)] = float(f.num[size_t(o)] / f.den[size_t(o)]);
    }
    if (!signs.alpha_per_row && den > 0 && num > 0) signs.alpha[0] = float(num / den);
    for (int64_t o = 0; o < signs.out; ++o) after += err(o, signs.alpha_of(o));
    ++rep.matrices;
  }
  rep.rel_error_before = norm > 0 ? before / norm : 0;
  rep.rel_error_after = norm > 0 ? after / norm : 0;
  return rep;
}

Result<KlDistillReport> distill_delta_kl(const Model& base, const Model& finetuned, const std::vector<int32_t>& tokens,
                                         int32_t ctx, int32_t bos, DeltaParts& delta, int sweeps, int64_t max_tokens,
                                         const std::function<void(int64_t, int64_t)>& on_progress) {
  if (ctx < 2 || ctx > finetuned.config().n_ctx_train) return Status::error("distillation window out of range");
  if (tokens.size() < 2) return Status::error("the distillation text is too short: it needs at least 2 tokens");
  if (sweeps < 0) return Status::error("distillation sweeps must be >= 0");
  // Windows of [BOS] + up to ctx - 1 text tokens, and the fine-tune's log-probabilities on them.
  const int64_t V = finetuned.config().n_vocab, run = bos >= 0 ? ctx - 1 : ctx;
  const size_t used = size_t(std::min<int64_t>(int64_t(tokens.size()), std::max<int64_t>(max_tokens, 2)));
  std::vector<std::vector<int32_t>> windows;
  for (size_t at = 0; at + 1 < used; at += size_t(run)) {
    std::vector<int32_t> win;
    if (bos >= 0) win.push_back(bos);
    win.insert(win.end(), tokens.begin() + ptrdiff_t(at), tokens.begin() + ptrdiff_t(std::min(used, at + size_t(run))));
    windows.push_back(std::move(win));
  }
  std::vector<std::vector<double>> ref;  // per window: [n x V] log-probs
  KlDistillReport rep;
  for (const auto& win : windows) {
    KvCache cache(finetuned.config(), int64_t(win.size()));
    BITSPLIT_ASSIGN_OR_RETURN(auto logits, forward_pass(finetuned, cache, Batch::causal(win, 0, true)));
    std::vector<double> lp, all;
    for (size_t r = 0; r < win.size(); ++r) {
      log_softmax(logits.data() + r * size_t(V), V, lp);
      all.insert(all.end(), lp.begin(), lp.end());
    }
    ref.push_back(std::move(all));
    rep.tokens += int64_t(win.size());
  }
  // The mean KL of the base + this delta against the fine-tune.
  auto objective = [&](const DeltaParts& d) -> Result<double> {
    BITSPLIT_ASSIGN_OR_RETURN(auto v, Variant::make(base, "distill", d.signs, d.full));
    double kl = 0;
    int64_t rows = 0;
    std::vector<double> lq;
    for (size_t w = 0; w < windows.size(); ++w) {
      KvCache cache(base.config(), int64_t(windows[w].size()));
      BITSPLIT_ASSIGN_OR_RETURN(auto logits, forward_pass(base, cache, Batch::causal(windows[w], 0, true), nullptr,
                                                               Pass::kDefault, v.get()));
      for (size_t r = 0; r < windows[w].size(); ++r, ++rows) {
        log_softmax(logits.data() + r * size_t(V), V, lq);
        const double* lp = ref[w].data() + r * size_t(V);
        double k = 0;
        for (int64_t i = 0; i < V; ++i) k += std::exp(lp[i]) * (lp[i] - lq[size_t(i)]);
        kl += std::max(k, 0.0);
      }
    }
    ++rep.evaluations;
    return kl / double(std::max<int64_t>(rows, 1));
  };
  BITSPLIT_ASSIGN_OR_RETURN(double best, objective(delta));
  rep.kl_before = best;
  std::vector<std::string> names;
  for (const auto& [name, signs] : delta.signs) names.push_back(name);
  const int64_t total = int64_t(sweeps) * int64_t(names.size());
  int64_t done = 0;
  double step = 0.25;
  for (int sweep = 0; sweep < sweeps; ++sweep, step /= 2) {
    for (const std::string& name : names) {
      std::vector<float>& alpha = delta.signs.at(name).alpha;
      const std::vector<float> kept = alpha;
      for (double factor : {1 + step, 1 - step}) {
        for (size_t i = 0; i < alpha.size(); ++i) alpha[i] = float(kept[i] * factor);
        BITSPLIT_ASSIGN_OR_RETURN(double kl, objective(delta));
        if (kl < best) {
          best = kl;
          ++rep.changed;
          break;
        }
        alpha = kept;
      }
      if (on_progress) on_progress(++done, total);
    }
  }
  rep.kl_after = best;
  return rep;
}

}  // namespace bitsplit
