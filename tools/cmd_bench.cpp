// `bitsplit bench accept`: acceptance rate and speed of speculative decoding for chain and
// tree drafting settings over a prompt file — the benchmark users run on their own models.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bitsplit/convert.h"
#include "bitsplit/speculative.h"
#include "bitsplit/variant.h"
#include "commands.h"
#include "option_checks.h"
#include "progress.h"

namespace bitsplit::cli {
namespace {

struct BenchAcceptArgs {
  std::string model, prompts;
  int n_predict = 64, threads = 0;
  float temperature = 0.0f;
  uint64_t seed = 1;
  std::vector<int> chains = {1, 2, 4, 8};
  std::vector<int> budgets = {4, 8, 16, 32};
  std::vector<std::string> deltas;  // NAME=FILE
  bool json = false;
  bool auto_row = false;  // also a row for the online controller (--budget auto)
  int lookup = 0;         // context lookup in every row (greedy decoding)
};

// What one row decodes: the base, or a variant with its own draft or the plain base draft.
struct Decoded {
  std::string name;
  const Variant* variant = nullptr;
  bool base_draft = false;
};

struct Setting {
  std::string name;
  speculation::DraftPolicy policy;
  bool auto_budget = false;
};

int bench_accept(const BenchAcceptArgs& a) {
  const auto threads = limit_threads(a.threads);
  auto loaded = load_model(a.model);
  if (!loaded) return report_error(loaded.status().message());
  auto split = read_split_format(loaded->source->metadata());
  if (!split || !split->has_value()) {
    return report_error(a.model + " is not a bit-split model; run `bitsplit convert` on it first");
  }
  auto text = read_text_file(a.prompts);
  if (!text) return report_error(text.status().message());
  std::vector<std::vector<int32_t>> prompts;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) prompts.push_back(loaded->tokenizer->encode(line));
  }
  if (prompts.empty()) return report_error(a.prompts + " has no prompts (one per line)");
  VariantRegistry registry(loaded->model, *loaded->source, {.budget_bytes = UINT64_MAX});
  std::vector<std::shared_ptr<const Variant>> variants;
  std::vector<Decoded> decoded = {{"base"}};
  for (const auto& d : a.deltas) {
    if (Status st = registry.add_spec(d); !st) return report_error("--delta: " + st.message());
    auto v = registry.get(d.substr(0, d.find('=')));
    if (!v) return report_error(v.status().message());
    variants.push_back(*v);
    decoded.push_back({(*v)->name(), v->get(), false});
    decoded.push_back({(*v)->name() + "/base-draft", v->get(), true});
  }

  std::vector<Setting> settings;
  for (int k : a.chains) {
    Setting s{"chain-" + std::to_string(k), {}};
    s.policy.shape = speculation::DraftShape::kChain;
    s.policy.budget = k;
    s.policy.max_depth = k;
    settings.push_back(s);
  }
  for (int b : a.budgets) {
    Setting s{"tree-" + std::to_string(b), {}};
    s.policy.budget = b;
    settings.push_back(s);
  }
  if (a.auto_row) settings.push_back({"auto", {}, true});
  if (a.lookup > 0) {
    for (auto& s : settings) s.name += "+lookup";
  }
  SamplingParams sp;
  sp.temperature = a.temperature;
  sp.seed = a.seed;
  if (Status st = sp.validate(); !st) return report_error(st.message());

  nlohmann::json results = nlohmann::json::array();
  ProgressBar bar("bench accept");
  size_t done = 0;
  struct Row {
    std::string name, model;
    speculation::AcceptanceStats acc;
    int64_t tokens = 0;
    double seconds = 0;
  };
  std::vector<Row> rows;
  for (const auto& s : settings) {
    // Base and variants alternate prompt by prompt, so drifting machine speed hits them alike.
    std::vector<Row> by_model;
    for (const auto& d : decoded) by_model.push_back({s.name, d.name, {}, 0, 0});
    for (const auto& prompt : prompts) {
      for (size_t m = 0; m < decoded.size(); ++m) {
        Sampler sampler(sp);
        SpeculativeOptions o;
        o.policy = s.policy;
        o.auto_budget = o.auto_shape = s.auto_budget;
        o.lookup.max_tokens = a.lookup;
        o.n_predict = a.n_predict;
        o.variant = decoded[m].variant;
        o.base_draft = decoded[m].base_draft;
        auto r = generate_speculative(loaded->model, loaded->model, prompt, o, sampler, [](int32_t) { return true; });
        if (!r) return report_error(r.status().message());
        const auto& g = r->generation;
        by_model[m].tokens += g.generated_tokens;
        by_model[m].seconds += g.generate_seconds;
        by_model[m].acc.add(r->acceptance);
        bar.update(double(++done), double(settings.size() * prompts.size() * decoded.size()));
      }
    }
    rows.insert(rows.end(), by_model.begin(), by_model.end());
  }
  for (const auto& r : rows) {
    results.push_back({{"setting", r.name}, {"model", r.model}, {"checks", r.acc.checks},
                       {"accepted_per_check", r.acc.accepted_per_check()},
                       {"tokens_per_check", r.acc.tokens_per_check()},
                       {"draft_ms_per_check", 1e3 * r.acc.draft_seconds / double(std::max<int64_t>(1, r.acc.checks))},
                       {"verify_ms_per_check", 1e3 * r.acc.verify_seconds / double(std::max<int64_t>(1, r.acc.checks))},
                       {"tokens_per_second", r.seconds > 0 ? double(r.tokens) / r.seconds : 0.0},
                       // Per position (vLLM's num_accepted_tokens_per_pos): index d - 1 for depth d.
                       {"accepted_at_depth", r.acc.accepted_at_depth},
                       {"drafted_at_depth", r.acc.drafted_at_depth},
                       {"lookup_drafted", r.acc.lookup_drafted},
                       {"lookup_accepted", r.acc.lookup_accepted}});
  }
  if (a.json) {
    nlohmann::json j = {{"model", a.model}, {"prompts", a.prompts}, {"n_prompts", prompts.size()},
                        {"n_predict", a.n_predict}, {"temperature", a.temperature}, {"lookup", a.lookup},
                        {"results", results}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model %s, %zu prompts x %d tokens, temperature %g\n\n", a.model.c_str(), prompts.size(), a.n_predict,
              a.temperature);
  std::printf("| setting         | model              | accepted/check | tokens/check | draft ms/check | verify ms/check | tokens/s |\n");
  std::printf("|-----------------|--------------------|----------------|--------------|----------------|-----------------|----------|\n");
  for (const auto& r : results) {
    std::printf("| %-15s | %-18s | %14.2f | %12.2f | %14.3f | %15.3f | %8.1f |\n", r["setting"].get<std::string>().c_str(),
                r["model"].get<std::string>().c_str(),
                r["accepted_per_check"].get<double>(), r["tokens_per_check"].get<double>(),
                r["draft_ms_per_check"].get<double>(), r["verify_ms_per_check"].get<double>(),
                r["tokens_per_second"].get<double>());
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto a = std::make_shared<BenchAcceptArgs>();
  CLI::App* cmd = bench->add_subcommand("accept", "Acceptance rate and tokens/s of speculative decoding per draft setting");
  cmd->add_option("-m,--model", a->model, "Bit-split model (from `bitsplit convert`)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--prompts", a->prompts, "Prompt file, one prompt per line (bench/prompts/ has ours)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens per prompt")->capture_default_str()->check(whole_in(1, 1 << 16));
  cmd->add_option("--temp", a->temperature, "Temperature (0 = greedy)")->capture_default_str()->check(real_in(0.0, 100.0));
  cmd->add_option("--seed", a->seed, "Seed for sampling")->capture_default_str()->check(seed_number());
  cmd->add_option("--chains", a->chains, "Chain lengths to try")->capture_default_str()->check(whole_in(1, 64));
  cmd->add_option("--budgets", a->budgets, "Tree budgets to try")->capture_default_str()->check(whole_in(1, 64));
  cmd->add_option("--delta", a->deltas,
                  "Also decode this BitDelta variant, NAME=FILE (repeatable): rows for its own draft and for the "
                  "plain base draft, interleaved with the base in the same run")
      ->type_name("NAME=FILE");
  cmd->add_flag("--auto", a->auto_row, "Also a row for the online choice of setting (as `run --budget auto`)");
  cmd->add_option("--lookup", a->lookup,
                  "Context lookup in every row: up to N tokens that followed an earlier occurrence of the text's "
                  "last tokens (greedy only; 0 = off)")
      ->capture_default_str()->check(whole_in(0, speculation::kMaxBudget));
  cmd->add_flag("--json", a->json,
                "Print JSON instead of a table (with acceptance per depth: accepted_at_depth / drafted_at_depth)");
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code] { *exit_code = bench_accept(*a); });
}

}  // namespace bitsplit::cli
