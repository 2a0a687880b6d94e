// eval and imatrix: windows of text through the reference model, with weights replaced by
// each quantisation scheme (dequantised to f32, so only weight error is measured).
#include "bitsplit/quality.h"

#include <cblas.h>

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <cstdlib>

namespace bitsplit {
namespace {

using quant::SplitParams;

// Applies `row_fn(in_row, out_row, cols)` to every row of w in parallel.
std::vector<float> per_row(const std::vector<float>& w, int64_t rows, int64_t cols,
                           const std::function<void(const float*, float*, int64_t)>& row_fn) {
  std::vector<float> out(w.size());
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) { row_fn(w.data() + r * cols, out.data() + r * cols, cols); });
  return out;
}

// Q8_0 round trip of a row; a row whose length is not a multiple of 32 gets a zero-padded
// last block (llama.cpp would refuse Q8_0 for it; padding is the closest honest baseline).
void q8_0_roundtrip_row(const float* w, float* out, int64_t cols) {
  const int64_t padded = (cols + 31) / 32 * 32;
  std::vector<float> x(static_cast<size_t>(padded), 0.0f), y(x.size());
  std::copy(w, w + cols, x.begin());
  std::vector<quant::BlockQ8_0> blocks(static_cast<size_t>(padded / 32));
  quant::quantize_q8_0_ref(x, blocks);
  quant::dequantize_q8_0_ref(blocks, y);
  std::copy(y.begin(), y.begin() + cols, out);
}

struct Scheme {
  std::string name;
  WeightTransform projection;  // f32 schemes: the weights' round trip
  bool in_vram, in_ram;
  // bytes of one [rows x cols] projection in each tier
  std::function<double(int64_t cols)> vram_row_bytes, ram_row_bytes;
  // Bit-split schemes run the engine's plane kernels (int8 activations, as the target model
  // is defined) instead of a weight round trip: residual bits, and the pass to run.
  int split_residual_bits = 0;
  Pass pass = Pass::kTarget;
  int activation_rounding = 0;  // f32 schemes: int8 activations per block of this many
  // Bit-split target schemes: the target pass's activations (docs/FORMAT.md, steps 1 and 1b).
  TargetActivations activations = TargetActivations::kDraftRemainder;
};

// Weights-only view of a bit-split scheme: D (+ R) dequantised to f32, f32 activations.
WeightTransform split_transform(int group, int residual_bits, bool keep_residual, const ImportanceMatrix* imatrix,
                                const std::map<std::string, int>* draft_bits) {
  return [=](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols) {
    quant::SplitParams p;
    p.group = group;
    p.residual_bits = residual_bits;
    if (draft_bits) {
      auto it = draft_bits->find(split_base_name(name));
      if (it != draft_bits->end()) p.draft_bits = it->second;
    }
    return split_projection(w, rows, cols, p, importance_columns(imatrix, name, cols)).dequantize(keep_residual);
  };
}

std::vector<Scheme> make_schemes(const EvalOptions& o, const std::map<std::string, int>* draft_bits) {
  const int g = o.group;
  auto plane_bytes = [g](int bits, int scale_bytes) {
    return [=](int64_t cols) {
      return double(quant::code_row_bytes(cols, g, bits) + quant::groups_per_row(cols, g) * scale_bytes);
    };
  };
  auto none = [](int64_t) { return 0.0; };
  auto q8 = [](int64_t cols) { return double((cols + 31) / 32 * 34); };
  auto minmax = [g](int bits) {
    return [=](const std::string&, const std::vector<float>& w, int64_t rows, int64_t cols) {
      return per_row(w, rows, cols, [&](const float* in, float* out, int64_t n) {
        quant::minmax_roundtrip_row_ref(in, n, g, bits, out);
      });
    };
  };
  std::vector<Scheme> all = {
      {"draft(R8)", nullptr, true, false, plane_bytes(2, 4), none, 8, Pass::kDraft},
      {"draft(R6)", nullptr, true, false, plane_bytes(2, 4), none, 6, Pass::kDraft},
      {"D+R6", nullptr, true, true, plane_bytes(2, 4), plane_bytes(6, 2), 6, Pass::kTarget},
      {"D+R8", nullptr, true, true, plane_bytes(2, 4), plane_bytes(8, 2), 8, Pass::kTarget},
      {"D+R6/a8", nullptr, true, true, plane_bytes(2, 4), plane_bytes(6, 2), 6, Pass::kTarget, 0, TargetActivations::kInt8},
      {"D+R8/a8", nullptr, true, true, plane_bytes(2, 4), plane_bytes(8, 2), 8, Pass::kTarget, 0, TargetActivations::kInt8},
      {"D+R6/a16", nullptr, true, true, plane_bytes(2, 4), plane_bytes(6, 2), 6, Pass::kTarget, 0,
       TargetActivations::kRemainder},
      {"D+R8/a16", nullptr, true, true, plane_bytes(2, 4), plane_bytes(8, 2), 8, Pass::kTarget, 0,
       TargetActivations::kRemainder},
      {"D+R6/w", split_transform(g, 6, true, o.imatrix, draft_bits), true, true, plane_bytes(2, 4), plane_bytes(6, 2)},
      {"D+R8/w", split_transform(g, 8, true, o.imatrix, draft_bits), true, true, plane_bytes(2, 4), plane_bytes(8, 2)},
      {"Q8_0",
       [](const std::string&, const std::vector<float>& w, int64_t rows, int64_t cols) {
         return per_row(w, rows, cols, q8_0_roundtrip_row);
       },
       false, true, none, q8},
      {"Q8_0/a8",
       [](const std::string&, const std::vector<float>& w, int64_t rows, int64_t cols) {
         return per_row(w, rows, cols, q8_0_roundtrip_row);
       },
       false, true, none, q8, 0, Pass::kTarget, 32},
      {"minmax2", minmax(2), true, false, plane_bytes(2, 4), none},
      {"minmax4", minmax(4), true, false, plane_bytes(4, 4), none},
  };
  // By default the target's other activation arithmetics (/a8, /a16) are left out: asked for by name.
  auto other_arithmetic = [](const Scheme& s) {
    return s.split_residual_bits != 0 && s.activations != TargetActivations::kDraftRemainder;
  };
  std::vector<Scheme> chosen;
  for (const auto& s : all) {
    const bool asked = std::find(o.schemes.begin(), o.schemes.end(), s.name) != o.schemes.end();
    if (o.schemes.empty() ? !other_arithmetic(s) : asked) chosen.push_back(s);
  }
  return chosen;
}

// Shapes [rows x cols] of every split projection of the model.
std::vector<std::pair<int64_t, int64_t>> projection_shapes(const ModelConfig& c) {
  std::vector<std::pair<int64_t, int64_t>> s;
  const auto layer = layer_projections(c);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (const ProjectionSlot& p : layer) s.push_back({p.rows, p.cols});
  }
  s.push_back({c.n_vocab, c.n_embd});
  return s;
}

// Every split projection of the model: base name ("blk.3.attn_v", "output") and weights, in
// projection_shapes' order.
std::vector<std::pair<std::string, const std::vector<float>*>> split_projections(const Model& m) {
  std::vector<std::pair<std::string, const std::vector<float>*>> v;
  const auto layer = layer_projections(m.config());
  for (int64_t l = 0; l < m.config().n_layers; ++l) {
    const LayerWeights& w = m.layer(l);
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const ProjectionSlot& p : layer) v.push_back({b + p.kind, &w.projection(p.kind)});
  }
  v.push_back({"output", &m.output()});
  return v;
}

// The per-tensor draft bits `convert --draft-bpw` would choose for this model.
Result<quant::DraftAllocation> allocate_model_draft_bits(const Model& model, const EvalOptions& o) {
  const ModelConfig& c = model.config();
  const auto shapes = projection_shapes(c);
  const auto projections = split_projections(model);
  std::vector<quant::DraftTensorErrors> errors;
  quant::SplitParams p;
  p.group = o.group;
  for (size_t i = 0; i < projections.size(); ++i) {
    const auto& [base, w] = projections[i];
    const auto [rows, cols] = shapes[i];
    errors.push_back(
        measure_draft_errors(base, *w, rows, cols, c.n_layers, p, importance_columns(o.imatrix, base + ".weight", cols)));
  }
  return quant::allocate_draft_bits(errors, o.group, o.draft_bpw);
}


struct Window {
  std::vector<int32_t> tokens;  // model input
  int64_t first_target;         // position of the first text token (predictions start there)
};

// Windows of at most ctx tokens: [BOS] + a run of text. Consecutive runs overlap by one
// token, so every text token after the first is predicted exactly once.
std::vector<Window> make_windows(const std::vector<int32_t>& tokens, int32_t ctx, int32_t bos, int64_t max_tokens) {
  std::vector<Window> windows;
  const int64_t run = bos >= 0 ? ctx - 1 : ctx;
  int64_t budget = max_tokens > 0 ? max_tokens : INT64_MAX;
  for (size_t at = 0; at + 1 < tokens.size() && budget > 0;) {
    // n text tokens make n - 1 predictions: the last window stops at the budget.
    int64_t n = std::min<int64_t>(run, int64_t(tokens.size() - at));
    if (budget < n - 1) n = budget + 1;
    Window w;
    if (bos >= 0) w.tokens.push_back(bos);
    w.tokens.insert(w.tokens.end(), tokens.begin() + int64_t(at), tokens.begin() + int64_t(at) + n);
    w.first_target = bos >= 0 ? 1 : 0;
    budget -= n - 1;
    windows.push_back(std::move(w));
    at += size_t(n - 1);
  }
  return windows;
}

// EvalOptions::llama_windows: llama-perplexity's chunks (perplexity.cpp's layout, for KL
// divergences comparable with its --kl-divergence).
std::vector<Window> make_llama_windows(const std::vector<int32_t>& tokens, int32_t ctx, int32_t bos, int64_t max_tokens) {
  std::vector<int32_t> text;
  if (bos >= 0) text.push_back(bos);
  text.insert(text.end(), tokens.begin(), tokens.end());
  int64_t chunks = int64_t(text.size()) / ctx;
  if (max_tokens > 0) chunks = std::min(chunks, std::max<int64_t>(1, max_tokens / (ctx / 2)));
  std::vector<Window> windows;
  for (int64_t i = 0; i < chunks; ++i) {
    Window w;
    w.tokens.assign(text.begin() + i * ctx, text.begin() + (i + 1) * ctx);
    if (bos >= 0) w.tokens[0] = bos;
    w.first_target = ctx / 2;
    windows.push_back(std::move(w));
  }
  return windows;
}

Status check_window_options(const Model& model, int32_t ctx) {
  if (ctx < 2) return Status::error("the window (ctx) must be at least 2 tokens");
  if (ctx > model.config().n_ctx_train) {
    return Status::error("the window (ctx) of " + std::to_string(ctx) + " tokens exceeds the model's context length " +
                         std::to_string(model.config().n_ctx_train));
  }
  return Status::ok();
}

}  // namespace

void log_softmax(const float* logits, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max);
  const double lse = max + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - lse;
}

const std::vector<std::string>& eval_scheme_names() {
  static const std::vector<std::string> names = {"draft(R8)", "draft(R6)", "D+R6",    "D+R8",    "D+R6/a8", "D+R8/a8",
                                                 "D+R6/a16",  "D+R8/a16",  "D+R6/w",  "D+R8/w",  "Q8_0",    "Q8_0/a8",
                                                 "minmax2",   "minmax4"};
  return names;
}

Result<ScoreReport> score_against(const Model& reference, const std::vector<ScoredModel>& candidates,
                                  const std::vector<int32_t>& tokens, int32_t ctx, int32_t bos, int64_t max_tokens,
                                  const std::function<void(int64_t, int64_t)>& on_progress, bool llama_windows) {
  BITSPLIT_RETURN_IF_ERROR(check_window_options(reference, ctx));
  if (llama_windows && ctx < 4) return Status::error("llama-perplexity windows need a window (ctx) of at least 4 tokens");
  const std::vector<Window> windows =
      llama_windows ? make_llama_windows(tokens, ctx, bos, max_tokens) : make_windows(tokens, ctx, bos, max_tokens);
  if (windows.empty()) {
    return Status::error(llama_windows ? "the text is shorter than one window of " + std::to_string(ctx) + " tokens"
                                       : std::string("the text is too short: it needs at least 2 tokens"));
  }
  const ModelConfig& c = reference.config();
  for (const auto& cand : candidates) {
    if (cand.model->config().n_vocab != c.n_vocab) return Status::error(cand.name + ": the vocabularies differ");
  }
  const size_t n_cand = candidates.size();
  const int64_t V = c.n_vocab;
  std::vector<double> nll(n_cand, 0.0), kl_sum(n_cand, 0.0);
  std::vector<int64_t> agree(n_cand, 0);
  std::vector<std::vector<double>> kls(n_cand);
  double nll_ref = 0.0;
  int64_t scored = 0;
  std::vector<double> lp, lq;
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const Window& win = windows[wi];
    const int32_t n = int32_t(win.tokens.size());
    KvCache cache(c, n);
    BITSPLIT_ASSIGN_OR_RETURN(auto ref, forward_pass(reference, cache, Batch::causal(win.tokens, 0, true),
                                                          nullptr, Pass::kDefault));
    std::vector<std::vector<float>> outs;
    for (const auto& cand : candidates) {
      KvCache mc(c, n);
      if (cand.prepare) cand.prepare();
      BITSPLIT_ASSIGN_OR_RETURN(auto logits, forward_pass(*cand.model, mc, Batch::causal(win.tokens, 0, true),
                                                               nullptr, cand.pass, cand.variant));
      outs.push_back(std::move(logits));
    }
    for (int32_t pos = int32_t(win.first_target); pos + 1 < n; ++pos) {
      const int32_t target = win.tokens[size_t(pos + 1)];
      log_softmax(ref.data() + pos * V, V, lp);
      nll_ref -= lp[size_t(target)];
      const int64_t ref_top = std::max_element(lp.begin(), lp.end()) - lp.begin();
      for (size_t s = 0; s < n_cand; ++s) {
        log_softmax(outs[s].data() + pos * V, V, lq);
        double kl = 0.0;
        for (int64_t v = 0; v < V; ++v) kl += std::exp(lp[size_t(v)]) * (lp[size_t(v)] - lq[size_t(v)]);
        kl = std::max(kl, 0.0);  // rounding can make a ~0 divergence slightly negative
        kl_sum[s] += kl;
        kls[s].push_back(kl);
        nll[s] -= lq[size_t(target)];
        agree[s] += (std::max_element(lq.begin(), lq.end()) - lq.begin()) == ref_top;
      }
      ++scored;
    }
    if (on_progress) on_progress(int64_t(wi + 1), int64_t(windows.size()));
  }
  ScoreReport report;
  report.tokens = scored;
  report.windows = int64_t(windows.size());
  report.reference_perplexity = std::exp(nll_ref / double(scored));
  for (size_t s = 0; s < n_cand; ++s) {
    Score row;
    row.name = candidates[s].name;
    row.perplexity = std::exp(nll[s] / double(scored));
    row.kl_mean = kl_sum[s] / double(scored);
    auto& k = kls[s];
    std::sort(k.begin(), k.end());
    row.kl_p99 = k[std::min(k.size() - 1, size_t(std::ceil(0.99 * double(k.size()))) - 1)];
    row.top1_agreement = double(agree[s]) / double(scored);
    report.rows.push_back(row);
  }
  return report;
}

Result<EvalReport> evaluate_quality(const Model& model, const std::vector<int32_t>& tokens, const EvalOptions& o,
                                    const std::function<void(int64_t, int64_t)>& on_progress) {
  BITSPLIT_RETURN_IF_ERROR(check_window_options(model, o.ctx));
  if (o.group != 32 && o.group != 64 && o.group != 128) return Status::error("the group size must be 32, 64 or 128");
  for (const auto& s : o.schemes) {
    const auto& names = eval_scheme_names();
    if (std::find(names.begin(), names.end(), s) == names.end()) return Status::error("unknown scheme '" + s + "'");
  }
  const ModelConfig& c = model.config();
  const auto embed_q8 = [&](const std::string&, const std::vector<float>& w, int64_t rows, int64_t cols) {
    return per_row(w, rows, cols, q8_0_roundtrip_row);
  };
  std::optional<quant::DraftAllocation> draft;
  if (o.draft_bpw > 0.0) {
    BITSPLIT_ASSIGN_OR_RETURN(quant::DraftAllocation a, allocate_model_draft_bits(model, o));
    draft = std::move(a);
  }
  std::vector<Scheme> schemes = make_schemes(o, draft ? &draft->bits : nullptr);
  if (draft) {
    // The bit-split schemes' VRAM tier is the mixed draft (bits per weight from the allocation).
    for (Scheme& s : schemes)
      if (s.split_residual_bits != 0 || s.name.starts_with("D+R")) s.vram_row_bytes = nullptr;
  }
  std::vector<Model> models;
  auto cpu_context = std::make_shared<cpu::CpuContext>();
  std::map<int, size_t> split_models;  // residual bits -> index in models (draft and target share one)
  std::vector<size_t> model_of(schemes.size());
  for (size_t i = 0; i < schemes.size(); ++i) {
    const Scheme& s = schemes[i];
    if (s.split_residual_bits == 0) {
      model_of[i] = models.size();
      models.push_back(model.transformed(s.projection, embed_q8));
      models.back().set_activation_rounding(s.activation_rounding);
      continue;
    }
    auto it = split_models.find(s.split_residual_bits);
    if (it == split_models.end()) {
      quant::SplitParams p;
      p.group = o.group;
      p.residual_bits = s.split_residual_bits;
      it = split_models.emplace(s.split_residual_bits, models.size()).first;
      BITSPLIT_ASSIGN_OR_RETURN(Model split, model.with_split_planes(p, o.imatrix, embed_q8, cpu_context,
                                                                      draft ? &draft->bits : nullptr, o.covariances));
      models.push_back(std::move(split));
    }
    model_of[i] = it->second;
  }

  std::vector<ScoredModel> scored_models;
  for (size_t i = 0; i < schemes.size(); ++i) {
    Model& m = models[model_of[i]];
    const TargetActivations a = schemes[i].activations;
    std::function<void()> prepare;  // the split models are shared by schemes of different arithmetics
    if (schemes[i].split_residual_bits != 0) prepare = [&m, a] { m.set_target_activations(a); };
    scored_models.push_back({schemes[i].name, &m, schemes[i].pass, nullptr, std::move(prepare)});
  }
  BITSPLIT_ASSIGN_OR_RETURN(ScoreReport scores, score_against(model, scored_models, tokens, o.ctx, o.bos, o.max_tokens, on_progress,
                                                                      o.llama_windows));
  EvalReport report;
  if (draft) report.draft_bits = describe_draft_bits(draft->bits, draft->bits_per_weight);
  report.tokens = scores.tokens;
  report.windows = scores.windows;
  report.f32_perplexity = scores.reference_perplexity;
  const auto shapes = projection_shapes(c);
  double weights = 0;
  for (const auto& [rows, cols] : shapes) weights += double(rows * cols);
  for (size_t s = 0; s < schemes.size(); ++s) {
    EvalRow row;
    row.scheme = schemes[s].name;
    double vram = 0, ram = 0;
    for (const auto& [rows, cols] : shapes) {
      if (schemes[s].vram_row_bytes) vram += double(rows) * schemes[s].vram_row_bytes(cols);
      ram += double(rows) * schemes[s].ram_row_bytes(cols);
    }
    row.vram_bits_per_weight = schemes[s].vram_row_bytes ? 8.0 * vram / weights : draft->bits_per_weight;
    row.ram_bits_per_weight = 8.0 * ram / weights;
    row.perplexity = scores.rows[s].perplexity;
    row.kl_mean = scores.rows[s].kl_mean;
    row.kl_p99 = scores.rows[s].kl_p99;
    row.top1_agreement = scores.rows[s].top1_agreement;
    report.rows.push_back(row);
  }
  return report;
}

Result<ImportanceMatrix> collect_imatrix(const Model& model, const std::vector<int32_t>& tokens, int32_t ctx,
                                         int32_t bos, const std::function<void(int64_t, int64_t)>& on_progress,
                                         int64_t* n_tokens, InputCovariances* covariances) {
  BITSPLIT_RETURN_IF_ERROR(check_window_options(model, ctx));
  const auto windows = make_windows(tokens, ctx, bos, 0);
  if (windows.empty()) return Status::error("the text is too short: it needs at least 2 tokens");
  std::map<std::string, std::vector<double>> sums;
  std::map<std::string, int64_t> counts;
  // Second moments, upper triangle summed by BLAS ssyrk (f32; one window's rows at a time), by
  // the first weight that reads each input; the projections observed right after it with equal
  // activations (attn_q/k/v, ffn_gate/up: compared value by value) share its matrix.
  std::map<std::string, std::shared_ptr<std::vector<float>>> second;
  std::map<std::string, std::string> reads_same_as;
  std::vector<float> last_x;
  int64_t last_rows = 0, last_cols = 0;
  std::string last_owner;
  const ActivationObserver observer = [&](const std::string& weight, const float* x, int64_t rows, int64_t cols) {
    auto& s = sums[weight];
    s.resize(size_t(cols), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < cols; ++i) s[size_t(i)] += double(x[r * cols + i]) * double(x[r * cols + i]);
    counts[weight] += rows;
    if (!covariances) return;
    if (rows == last_rows && cols == last_cols && !last_owner.empty() &&
        std::memcmp(last_x.data(), x, sizeof(float) * size_t(rows * cols)) == 0) {
      reads_same_as[weight] = last_owner;
      return;
    }
    last_x.assign(x, x + rows * cols);
    last_rows = rows, last_cols = cols, last_owner = weight;
    auto& c = second[weight];
    if (!c) c = std::make_shared<std::vector<float>>(size_t(cols * cols), 0.0f);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, int(cols), int(rows), 1.0f, x, int(cols), 1.0f, c->data(),
                int(cols));
  };
  int64_t seen = 0;
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const auto& win = windows[wi];
    KvCache cache(model.config(), int64_t(win.tokens.size()));
    last_owner.clear();
    // All rows' logits, so the output head sees every position's activations.
    BITSPLIT_RETURN_IF_ERROR(
        forward_pass(model, cache, Batch::causal(win.tokens, 0, /*all_logits=*/true), &observer));
    seen += int64_t(win.tokens.size());
    if (on_progress) on_progress(int64_t(wi + 1), int64_t(windows.size()));
  }
  ImportanceMatrix m;
  for (const auto& [name, s] : sums) {
    std::vector<float> mean(s.size());
    for (size_t i = 0; i < s.size(); ++i) mean[i] = float(s[i] / double(counts[name]));
    m.emplace(name, std::move(mean));
  }
  if (covariances) {
    covariances->clear();
    for (auto& [name, c] : second) {
      const auto n = int64_t(m[name].size());
      const float inv = 1.0f / float(counts[name]);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i; j < n; ++j) {
          const float v = (*c)[size_t(i * n + j)] * inv;
          (*c)[size_t(i * n + j)] = v;
          (*c)[size_t(j * n + i)] = v;
        }
      (*covariances)[name] = Covariance::holding(std::move(*c), n);
      c.reset();
    }
    for (const auto& [name, owner] : reads_same_as) {
      // Observed with its owner's activations in one window; a weight seen with others elsewhere
      // (a layout this rule does not fit) gets no matrix rather than a wrong one.
      if (!second.count(name)) (*covariances)[name] = (*covariances)[owner];
    }
  }
  if (n_tokens) *n_tokens = seen;
  return m;
}

}  // namespace bitsplit
