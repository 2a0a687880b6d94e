// What a mixture of experts' verify pass reads, and how often the draft routes as the target
// does, measured on a text (issue 20).
//
//   bench_moe_routing CONVERTED.gguf TEXT.txt [--rows 16] [--tokens 2048]
//
// The text's first --tokens tokens go through the target (D + R) and, separately, through the
// draft (D alone) in windows of the model's context (at most 4096), each in passes of --rows
// consecutive rows, as a verify pass of that many rows would see them. Per pass and layer it counts the distinct experts the rows are routed to (each
// one's residual R is what the pass streams from RAM) and, per row and layer, whether the draft
// picked the same experts as the target. Prints a table and one JSON line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/expert_routing.h"
#include "bitsplit/model.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/weights.h"

namespace {

using namespace bitsplit;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_moe_routing: %s\n", what.c_str());
  std::exit(1);
}

// Per layer, per row of the text: the experts the row is routed to (sorted).
using Routes = std::vector<std::vector<std::vector<int32_t>>>;

// Runs `tokens` through `model` in windows of `window` tokens (a KV cache each), each in passes
// of `rows` rows, and records every row's experts, from the router's input (forward_pass's
// observer) and the model's router, as route_experts picks them.
Routes route_text(const Model& model, const std::vector<int32_t>& tokens, int64_t rows, int64_t window) {
  const ModelConfig& c = model.config();
  Routes routes(static_cast<size_t>(c.n_layers));
  const ActivationObserver observe = [&](const std::string& weight, const float* x, int64_t n, int64_t cols) {
    if (!weight.ends_with(".ffn_gate_inp.weight")) return;
    const int64_t l = std::stoll(weight.substr(4));
    std::vector<float> logits(size_t(n * c.n_expert));
    cpu::matmul_f32({x, size_t(n * cols)}, n, cols, model.layer(l).ffn_gate_inp, c.n_expert, {}, logits);
    std::vector<ExpertRows> routed;
    route_experts(logits.data(), n, c.n_expert, c.n_expert_used, c.expert_weights_norm, routed);
    std::vector<std::vector<int32_t>> per_row(static_cast<size_t>(n));
    for (int64_t e = 0; e < c.n_expert; ++e)
      for (int32_t r : routed[size_t(e)].rows) per_row[size_t(r)].push_back(int32_t(e));
    for (auto& r : per_row) routes[size_t(l)].push_back(std::move(r));
  };
  for (size_t w0 = 0; w0 < tokens.size(); w0 += size_t(window)) {
    KvCache cache(c, window);
    for (size_t at = w0; at < std::min(tokens.size(), w0 + size_t(window)); at += size_t(rows)) {
      const std::vector<int32_t> chunk(tokens.begin() + int64_t(at), tokens.begin() + int64_t(at + size_t(rows)));
      auto r = forward_pass(model, cache, Batch::causal(chunk, int32_t(at - w0)), &observe);
      if (!r) die(r.status().message());
    }
  }
  return routes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) die("usage: bench_moe_routing CONVERTED.gguf TEXT.txt [--rows 16] [--tokens 2048]");
  int64_t rows = 16, max_tokens = 2048;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--rows") rows = std::atoll(argv[i + 1]);
    else if (k == "--tokens") max_tokens = std::atoll(argv[i + 1]);
    else die("unknown option " + k);
  }
  if (rows < 1 || max_tokens < rows) die("--rows must be >= 1 and --tokens >= --rows");
  auto source = open_weights(argv[1]);
  if (!source) die(source.status().message());
  auto target = Model::load(**source);
  auto draft = Model::load(**source, {.draft_only = true});
  if (!target) die(target.status().message());
  if (!draft) die(draft.status().message());
  const ModelConfig& c = target->config();
  if (!c.is_moe()) die(std::string(argv[1]) + " is not a mixture of experts");
  auto tok = Tokenizer::from_metadata((*source)->metadata());
  if (!tok) die(tok.status().message());
  std::ifstream in(argv[2]);
  if (!in) die(std::string("cannot read ") + argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<int32_t> tokens = (*tok)->encode(text.str(), {.add_special = true});
  // Windows of the model's context (rounded down to whole passes), the text cut to whole passes.
  const int64_t window = std::max(rows, std::min<int64_t>(c.n_ctx_train, 4096) / rows * rows);
  tokens.resize(size_t(std::min<int64_t>(int64_t(tokens.size()), max_tokens) / rows * rows));
  if (tokens.empty()) die("the text is shorter than one pass");

  const Routes t = route_text(*target, tokens, rows, window), d = route_text(*draft, tokens, rows, window);
  // Residual bytes of one expert (its gate, up and down), from the loaded planes.
  uint64_t expert_bytes = 0;
  for (const char* w : {"ffn_gate", "ffn_up", "ffn_down"}) {
    const SplitProjection* p = target->split("blk.0." + std::string(w) + ".0.weight");
    if (!p) die("the model is not bit-split (convert it first)");
    expert_bytes += uint64_t(p->out * p->in * p->residual_bits / 8 + p->out * ((p->in + p->group - 1) / p->group) * 2);
  }
  const int64_t n = int64_t(tokens.size()), passes = n / rows;
  double distinct_sum = 0, same_sum = 0, overlap_sum = 0;
  int64_t distinct_max = 0;
  std::printf("%s: %lld layers, %lld experts, %lld per row; %lld tokens in passes of %lld rows\n", argv[1],
              (long long)c.n_layers, (long long)c.n_expert, (long long)c.n_expert_used, (long long)n, (long long)rows);
  std::printf("| layer | distinct experts per pass (mean, max) | draft routes as the target (same set, mean overlap) |\n|---|---|---|\n");
  for (int64_t l = 0; l < c.n_layers; ++l) {
    double distinct = 0, same = 0, overlap = 0;
    int64_t most = 0;
    for (int64_t p = 0; p < passes; ++p) {
      std::set<int32_t> touched;
      for (int64_t r = p * rows; r < (p + 1) * rows; ++r) touched.insert(t[size_t(l)][size_t(r)].begin(), t[size_t(l)][size_t(r)].end());
      distinct += double(touched.size());
      most = std::max<int64_t>(most, int64_t(touched.size()));
    }
    for (int64_t r = 0; r < n; ++r) {
      const auto& a = t[size_t(l)][size_t(r)];
      const auto& b = d[size_t(l)][size_t(r)];
      same += a == b ? 1.0 : 0.0;
      int64_t common = 0;
      for (int32_t e : a) common += std::count(b.begin(), b.end(), e);
      overlap += double(common) / double(c.n_expert_used);
    }
    distinct /= double(passes);
    std::printf("| %lld | %.2f, %lld of %lld | %.1f %%, %.1f %% |\n", (long long)l, distinct, (long long)most,
                (long long)c.n_expert, 100.0 * same / double(n), 100.0 * overlap / double(n));
    distinct_sum += distinct;
    distinct_max = std::max(distinct_max, most);
    same_sum += same / double(n);
    overlap_sum += overlap / double(n);
  }
  const double mean_distinct = distinct_sum / double(c.n_layers);
  const double bytes_per_pass = mean_distinct * double(c.n_layers) * double(expert_bytes);
  const double all_experts = double(c.n_expert) * double(c.n_layers) * double(expert_bytes);
  std::printf("residual of the experts a %lld-row pass reads: %.1f KiB of %.1f KiB (%.0f %%); one expert %.1f KiB\n",
              (long long)rows, bytes_per_pass / 1024.0, all_experts / 1024.0, 100.0 * bytes_per_pass / all_experts,
              double(expert_bytes) / 1024.0);
  std::printf("{\"model\":\"%s\",\"rows\":%lld,\"tokens\":%lld,\"distinct_experts_mean\":%.3f,\"distinct_experts_max\":%lld,"
              "\"n_expert\":%lld,\"expert_residual_bytes_per_pass\":%.0f,\"all_expert_residual_bytes\":%.0f,"
              "\"draft_same_experts\":%.4f,\"draft_expert_overlap\":%.4f}\n",
              argv[1], (long long)rows, (long long)n, mean_distinct, (long long)distinct_max, (long long)c.n_expert,
              bytes_per_pass, all_experts, same_sum / double(c.n_layers), overlap_sum / double(c.n_layers));
  return 0;
}
