// `bitsplit bench accept`: acceptance rate and speed of speculative decoding for chain and
// tree drafting settings, against plain decoding of the same target, over a prompt file (one
// prompt per line, or JSONL with categories and chat turns) — the benchmark users run on their
// own models. Results per category as markdown tables or JSON.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "bitsplit/convert.h"
#include "bitsplit/generation_args.h"
#include "bitsplit/session.h"
#include "bitsplit/variant.h"
#include "commands.h"
#include "bench_prompts.h"
#include "bench_report.h"
#include "option_checks.h"
#include "variant_options.h"
#include "progress.h"

namespace bitsplit::cli {
namespace {

struct BenchAcceptArgs {
  std::string model, prompts;
  TargetActivations target_activations = TargetActivations::kDraftRemainder;
  int n_predict = 64, threads = 0;
  float temperature = 0.0f;
  uint64_t seed = 1;
  std::vector<int> chains = {1, 2, 4, 8};
  std::vector<int> budgets = {4, 8, 16, 32};
  std::vector<std::string> settings;  // explicit rows; replaces --chains/--budgets/--auto
  cli::VariantSpecs variant_specs;    // --delta, --lora
  bool json = false;
  std::string json_file;  // also write the JSON here (the tables then go to stdout)
  std::string render_dir;  // write the rendered prompts here and stop (for other engines)
  bool auto_row = false;  // also a row for the online controller (--budget auto)
  bool ignore_eos = false;
  bool fresh_controller = false;  // auto rows: a new controller per prompt (as one `run`), not carried
  int lookup = 0;         // context lookup in every row (greedy decoding)
};

// What one row decodes: the base, or a variant with its own draft or the plain base draft.
struct Decoded {
  std::string name;
  std::shared_ptr<const Variant> variant;  // null: the base
  bool base_draft = false;
  std::string plain_name;  // the row whose plain decoding is this one's reference
};

size_t index_of(const std::vector<Decoded>& decoded, const std::string& name) {
  return size_t(std::find_if(decoded.begin(), decoded.end(), [&](const Decoded& d) { return d.name == name; }) - decoded.begin());
}

enum class SettingKind { kPlain, kFixed, kAuto };

struct Setting {
  std::string name;
  SettingKind kind = SettingKind::kFixed;
  spec::DraftShape shape = spec::DraftShape::kTree;
  int32_t budget = 0;  // kFixed: drafted nodes per check
  int lookup = 0;      // context-lookup tokens per check (greedy only)
};

// Plain decoding of a variant with the base draft is the variant's own plain decoding: no row.
bool has_row(const Setting& s, const Decoded& d) { return !(s.kind == SettingKind::kPlain && d.base_draft); }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Setting chain_setting(int k) { return {"chain-" + std::to_string(k), SettingKind::kFixed, spec::DraftShape::kChain, k}; }

Setting tree_setting(int b) { return {"tree-" + std::to_string(b), SettingKind::kFixed, spec::DraftShape::kTree, b}; }

// "plain", "auto", "chain-K" or "tree-B" (K, B budgets as spec::parse_budget reads them), the last
// three optionally with "+lookup" (context lookup of kDefaultLookup tokens; "auto+lookup" is what
// `run` does by default).
Result<Setting> parse_setting(const std::string& text) {
  const std::string suffix = "+lookup";
  if (ends_with(text, suffix) && text != "plain" + suffix) {
    auto s = parse_setting(text.substr(0, text.size() - suffix.size()));
    if (s) {
      s->name += suffix;
      s->lookup = kDefaultLookup;
    }
    return s;
  }
  if (text == "plain") return Setting{"plain", SettingKind::kPlain};
  if (text == "auto") return Setting{"auto", SettingKind::kAuto};
  for (const std::string prefix : {"chain-", "tree-"}) {
    if (text.rfind(prefix, 0) != 0) continue;
    auto n = spec::parse_budget(text.substr(prefix.size()));
    if (!n || !n->has_value()) {
      return Status::error("'" + text + "': the budget after '" + prefix + "' must be a whole number 1.." +
                           std::to_string(spec::kMaxBudget));
    }
    return prefix == "chain-" ? chain_setting(**n) : tree_setting(**n);
  }
  return Status::error("'" + text + "' is not a setting; use plain, auto, chain-K or tree-B, the last three optionally "
                       "with +lookup (e.g. plain,auto+lookup,chain-4,tree-16)");
}

// ---- Measurements ----

// One (setting, model, category) cell, or a setting and model over all categories.
struct Cell {
  spec::AcceptanceStats acc;  // speculative rows
  int64_t tokens = 0, prompts = 0;
  double seconds = 0;
  void add(const Cell& o) {
    acc.add(o.acc);
    tokens += o.tokens;
    prompts += o.prompts;
    seconds += o.seconds;
  }
  double tokens_per_second() const { return seconds > 0 ? double(tokens) / seconds : 0.0; }
};

// What a row reports. A plain row makes one target pass per token: τ = 1, no draft.
nlohmann::json cell_json(const Setting& s, const Decoded& d, const std::string& category, const Cell& c,
                         std::optional<double> reference_tps) {
  const bool plain = s.kind == SettingKind::kPlain;
  const int64_t checks = plain ? c.tokens : c.acc.checks;
  const double per_check = 1e3 / double(std::max<int64_t>(1, checks));
  nlohmann::json speedup = nullptr;
  if (reference_tps && *reference_tps > 0) speedup = c.tokens_per_second() / *reference_tps;
  return {{"setting", s.name}, {"model", d.name}, {"category", category}, {"prompts", c.prompts},
          {"tokens", c.tokens}, {"seconds", c.seconds}, {"checks", checks},
          {"accepted_per_check", plain ? 0.0 : c.acc.accepted_per_check()},
          {"tokens_per_check", plain ? (checks > 0 ? 1.0 : 0.0) : c.acc.tokens_per_check()},
          {"draft_ms_per_check", plain ? 0.0 : c.acc.draft_seconds * per_check},
          {"verify_ms_per_check", plain ? c.seconds * per_check : c.acc.verify_seconds * per_check},
          {"tokens_per_second", c.tokens_per_second()}, {"speedup", speedup},
          // Per position (vLLM's num_accepted_tokens_per_pos): index d - 1 for depth d.
          {"accepted_at_depth", c.acc.accepted_at_depth}, {"drafted_at_depth", c.acc.drafted_at_depth},
          {"lookup_drafted", c.acc.lookup_drafted}, {"lookup_accepted", c.acc.lookup_accepted}};
}

// "results" (a row per setting, model and category) and "summary": the rows over all categories
// ("overall"), per setting τ, tokens/s and speedup by category ("rows"), and the fastest setting
// per model and category ("best"). Speedup: over the plain row of the same model and category.
// cells[setting][model][category].
nlohmann::json summarise(const std::vector<Setting>& settings, const std::vector<Decoded>& decoded,
                         const std::vector<std::string>& categories, const std::vector<std::vector<std::vector<Cell>>>& cells) {
  const auto plain_index = std::find_if(settings.begin(), settings.end(), [](const Setting& s) { return s.kind == SettingKind::kPlain; });
  const bool has_plain = plain_index != settings.end();
  const size_t pi = has_plain ? size_t(plain_index - settings.begin()) : 0;
  auto reference_tps = [&](const Cell& plain_cell) -> std::optional<double> {
    if (!has_plain) return std::nullopt;
    return plain_cell.tokens_per_second();
  };
  const size_t n_cat = categories.size();
  auto overall = [&](size_t si, size_t m) {
    Cell c;
    for (const auto& cat : cells[si][m]) c.add(cat);
    return c;
  };
  nlohmann::json results = nlohmann::json::array(), overall_rows = nlohmann::json::array(),
                 summary_rows = nlohmann::json::array();
  for (size_t si = 0; si < settings.size(); ++si) {
    for (size_t m = 0; m < decoded.size(); ++m) {
      if (!has_row(settings[si], decoded[m])) continue;
      const size_t pm = index_of(decoded, decoded[m].plain_name);
      nlohmann::json tau = nlohmann::json::object(), tps = nlohmann::json::object(), speedup = nlohmann::json::object();
      for (size_t c = 0; c < n_cat; ++c) {
        auto row = cell_json(settings[si], decoded[m], categories[c], cells[si][m][c], reference_tps(cells[pi][pm][c]));
        tau[categories[c]] = row["tokens_per_check"];
        tps[categories[c]] = row["tokens_per_second"];
        speedup[categories[c]] = row["speedup"];
        results.push_back(std::move(row));
      }
      auto row = cell_json(settings[si], decoded[m], "overall", overall(si, m), reference_tps(overall(pi, pm)));
      tau["overall"] = row["tokens_per_check"];
      tps["overall"] = row["tokens_per_second"];
      speedup["overall"] = row["speedup"];
      overall_rows.push_back(std::move(row));
      summary_rows.push_back({{"setting", settings[si].name}, {"model", decoded[m].name}, {"tokens_per_check", tau},
                              {"tokens_per_second", tps}, {"speedup", speedup}});
    }
  }
  // The fastest setting per model and category.
  nlohmann::json best = nlohmann::json::array();
  std::vector<std::string> cats = categories;
  if (n_cat > 1) cats.push_back("overall");
  for (const auto& d : decoded) {
    for (const auto& cat : cats) {
      const nlohmann::json* top = nullptr;
      for (const auto& r : summary_rows) {
        if (r["model"] != d.name) continue;
        if (!top || r["tokens_per_second"][cat].get<double>() > (*top)["tokens_per_second"][cat].get<double>()) top = &r;
      }
      if (top) {
        best.push_back({{"model", d.name}, {"category", cat}, {"setting", (*top)["setting"]},
                        {"tokens_per_second", (*top)["tokens_per_second"][cat]}, {"speedup", (*top)["speedup"][cat]}});
      }
    }
  }
  return {{"results", results},
          {"summary", {{"reference", has_plain ? nlohmann::json("plain") : nlohmann::json(nullptr)},
                       {"categories", categories}, {"overall", overall_rows}, {"rows", summary_rows}, {"best", best}}}};
}

// One row's generation: setting `s` on `d`, sampled as --temp and --seed say, every prompt from a
// fresh cache (nothing kept from the prompt before).
GenerationArgs row_generation(const Setting& s, const Decoded& d, const BenchAcceptArgs& a) {
  GenerationArgs g;
  g.sampling.temperature = a.temperature;
  g.seed = a.seed;
  g.speculative = s.kind != SettingKind::kPlain;
  if (s.kind == SettingKind::kFixed) g.budget = s.budget;
  g.shape = s.shape;
  g.lookup = s.lookup;
  g.base_draft = d.base_draft;
  g.reuse_prefix = false;
  return g;
}

// The rows, in order: --settings, or plain, the chains, the trees and auto; --lookup on every
// speculative row.
Result<std::vector<Setting>> make_settings(const BenchAcceptArgs& a) {
  std::vector<Setting> settings;
  if (!a.settings.empty()) {
    for (const auto& name : a.settings) {
      auto s = parse_setting(name);
      if (!s) return Status::error("--settings: " + s.status().message());
      if (std::any_of(settings.begin(), settings.end(), [&](const Setting& o) { return o.name == s->name; })) {
        return Status::error("--settings: '" + name + "' is listed twice");
      }
      settings.push_back(*s);
    }
  } else {
    settings.push_back({"plain", SettingKind::kPlain});
    for (int k : a.chains) settings.push_back(chain_setting(k));
    for (int b : a.budgets) settings.push_back(tree_setting(b));
    if (a.auto_row) settings.push_back({"auto", SettingKind::kAuto});
  }
  if (a.lookup > 0) {
    for (auto& s : settings) {
      if (s.kind == SettingKind::kPlain) continue;
      if (s.lookup == 0) s.name += "+lookup";
      s.lookup = a.lookup;
    }
  }
  return settings;
}

// The prompt file, read and tokenized for the model; a note when chat turns are joined as plain text.
Result<PromptSet> load_prompts(const BenchAcceptArgs& a, const Tokenizer& tokenizer) {
  BITSPLIT_ASSIGN_OR_RETURN(const std::string text, read_text_file(a.prompts));
  BITSPLIT_ASSIGN_OR_RETURN(PromptSet ps, read_prompts(a.prompts, text, tokenizer, a.ignore_eos));
  if (ps.rendering == "plain") {
    std::fprintf(stderr, "note: the vocabulary has no <|im_start|>/<|im_end|>; turns rendered as plain text joined "
                         "with blank lines\n");
  }
  return ps;
}

// The measurement: every row (a setting on a decoded model) generates from every prompt, settings
// and models alternating prompt by prompt so drifting machine speed hits them alike;
// cells[setting][model][category] collect the results.
class AcceptBench {
 public:
  AcceptBench(const BenchAcceptArgs& a, const std::vector<Setting>& settings, const LoadedModel& loaded,
              const PromptSet& ps)
      : a_(a), settings_(settings), loaded_(loaded), ps_(ps) {}

  // The base, then each variant the registry holds (those the pool refused are not among them),
  // with its own draft and with the plain base draft.
  Status add_models(VariantRegistry& registry) {
    decoded_ = {{"base", nullptr, false, "base"}};
    BITSPLIT_RETURN_IF_ERROR(cli::register_variants(registry, a_.variant_specs, loaded_, log_line));
    for (const std::string& name : registry.names()) {
      BITSPLIT_ASSIGN_OR_RETURN(std::shared_ptr<const Variant> v, registry.get(name));
      decoded_.push_back({v->name(), v, false, v->name()});
      decoded_.push_back({v->name() + "/base-draft", v, true, v->name()});
    }
    return Status::ok();
  }

  // Each row's session options and sampling, and every prompt checked against the context.
  Status configure() {
    configs_.assign(settings_.size(), {});
    for (size_t si = 0; si < settings_.size(); ++si) {
      for (const Decoded& d : decoded_) {
        BITSPLIT_ASSIGN_OR_RETURN(GenerationConfig config, generation_config(row_generation(settings_[si], d, a_)));
        configs_[si].push_back(std::move(config));
      }
    }
    for (const auto& p : ps_.prompts) {
      if (Status st = check_generation(loaded_.model.config(), p.tokens.size(), a_.n_predict, 256); !st) {
        return Status::error("a prompt of " + std::to_string(p.tokens.size()) + " tokens: " + st.message());
      }
    }
    return Status::ok();
  }

  // Untimed: pages the weights in and fills the caches, so the first timed row does not pay for
  // it: a short generation with the first plain and the first speculative setting.
  Status warm_up() {
    std::vector<size_t> warm;
    for (bool plain : {true, false}) {
      auto it = std::find_if(settings_.begin(), settings_.end(), [&](const Setting& s) { return (s.kind == SettingKind::kPlain) == plain; });
      if (it != settings_.end()) warm.push_back(size_t(it - settings_.begin()));
    }
    for (size_t m = 0; m < decoded_.size(); ++m) {
      for (size_t si : warm) {
        std::vector<int32_t> ignored;
        Cell ignored_cell;
        if (!has_row(settings_[si], decoded_[m])) continue;
        BITSPLIT_RETURN_IF_ERROR(generate_once(si, m, ps_.prompts.front(), std::min(a_.n_predict, 8), ignored, ignored_cell));
      }
    }
    forget_controllers();
    return Status::ok();
  }

  // Each row's online controller memory, new: a row's first prompt starts from nothing and its
  // later prompts continue what the earlier ones taught it, as a server's requests on one model
  // do (SessionOptions::controller_memory); with --fresh-controller every prompt starts anew.
  void forget_controllers() {
    for (auto& row : configs_)
      for (GenerationConfig& config : row)
        config.session.controller_memory = a_.fresh_controller ? nullptr : std::make_shared<ControllerMemory>();
  }

  // Every row on every prompt; counts greedy generations that differ from their model's first row.
  Status measure() {
    cells_.assign(settings_.size(),
                  std::vector<std::vector<Cell>>(decoded_.size(), std::vector<Cell>(ps_.categories.size())));
    ProgressBar bar("bench accept");
    size_t done = 0, total = 0;
    for (const auto& s : settings_)
      for (const auto& d : decoded_) total += has_row(s, d) ? ps_.prompts.size() : 0;
    for (const auto& p : ps_.prompts) {
      std::vector<std::vector<int32_t>> reference(decoded_.size());  // the first row's output per model
      for (size_t si = 0; si < settings_.size(); ++si) {
        for (size_t m = 0; m < decoded_.size(); ++m) {
          if (!has_row(settings_[si], decoded_[m])) continue;
          std::vector<int32_t> out;
          BITSPLIT_RETURN_IF_ERROR(generate_once(si, m, p, a_.n_predict, out, cells_[si][m][p.category]));
          // Greedy output is the target's whatever the setting; a difference is a bug worth a line.
          std::vector<int32_t>& ref = reference[index_of(decoded_, decoded_[m].plain_name)];
          if (ref.empty()) ref = out;
          else if (a_.temperature == 0.0f && out != ref) ++mismatches_;
          bar.update(double(++done), double(total));
        }
      }
    }
    if (mismatches_ > 0) {
      std::fprintf(stderr, "warning: %lld greedy generations differ from the first setting's output for the same "
                           "prompt (speculative greedy decoding should equal plain decoding)\n", (long long)mismatches_);
    }
    return Status::ok();
  }

  // The results and summary (summarise) with what was run: model, prompts, settings, options.
  nlohmann::json results() const {
    nlohmann::json j = summarise(settings_, decoded_, ps_.categories, cells_);
    nlohmann::json setting_names = nlohmann::json::array();
    for (const auto& s : settings_) setting_names.push_back(s.name);
    const auto& prompts = ps_.prompts;
    nlohmann::json categories = nlohmann::json::array();
    for (size_t c = 0; c < ps_.categories.size(); ++c) {
      categories.push_back({{"name", ps_.categories[c]},
                            {"prompts", std::count_if(prompts.begin(), prompts.end(), [&](const BenchPrompt& p) { return p.category == c; })}});
    }
    const std::string stop = ps_.stop_token >= 0 ? loaded_.tokenizer->token_to_piece(ps_.stop_token, true) : "";
    j.update({{"model", a_.model}, {"prompts", a_.prompts}, {"format", ps_.format}, {"rendering", ps_.rendering},
              {"stop_token", ps_.stop_token >= 0 ? nlohmann::json(stop) : nlohmann::json(nullptr)},
              {"n_prompts", prompts.size()}, {"categories", categories}, {"n_predict", a_.n_predict},
              {"settings", setting_names}, {"temperature", a_.temperature}, {"lookup", a_.lookup}, {"threads", a_.threads},
              {"controller", a_.fresh_controller ? "new per prompt" : "carried across prompts"},
              {"greedy_mismatches", mismatches_}});
    return j;
  }

 private:
  // One generation of setting `si` on model `m`; its tokens go to `out` (for the greedy-agreement check).
  Status generate_once(size_t si, size_t m, const BenchPrompt& p, int32_t n, std::vector<int32_t>& out, Cell& cell) {
    const GenerationConfig& config = configs_[si][m];
    Session session(loaded_.model, decoded_[m].variant, config.session);
    Sampler sampler(config.sampling);
    auto keep = [&out](int32_t t) {
      out.push_back(t);
      return true;
    };
    BITSPLIT_ASSIGN_OR_RETURN(const SessionResult r, session.generate(p.tokens, n, ps_.stop_token, sampler, keep));
    cell.tokens += r.generation.generated_tokens;
    cell.seconds += r.generation.generate_seconds;
    if (r.speculative) cell.acc.add(r.speculative->acceptance);
    ++cell.prompts;
    return Status::ok();
  }

  const BenchAcceptArgs& a_;
  const std::vector<Setting>& settings_;
  const LoadedModel& loaded_;
  const PromptSet& ps_;
  std::vector<Decoded> decoded_;
  std::vector<std::vector<GenerationConfig>> configs_;  // [setting][model]
  std::vector<std::vector<std::vector<Cell>>> cells_;   // [setting][model][category]
  int64_t mismatches_ = 0;
};

// JSON on stdout with --json; else tables on stdout, and the JSON also in --json-file.
int print_results(const BenchAcceptArgs& a, const nlohmann::json& j) {
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (!a.json_file.empty()) {
    std::ofstream out(a.json_file);
    out << j.dump(2) << "\n";
    if (!out.flush()) return report_error("could not write " + a.json_file);
  }
  print_report(j);
  return 0;
}

int bench_accept(const BenchAcceptArgs& a) {
  const auto threads = limit_threads(a.threads);
  auto settings = make_settings(a);
  if (!settings) return report_error(settings.status().message());
  auto loaded = load_model(a.model, {.target_activations = a.target_activations});
  if (!loaded) return report_error(loaded.status().message());
  auto split = read_split_format(loaded->source->metadata());
  if (!split || !split->has_value()) {
    return report_error(a.model + " is not a bit-split model; run `bitsplit convert` on it first");
  }
  auto ps = load_prompts(a, *loaded->tokenizer);
  if (!ps) return report_error(ps.status().message());
  if (!a.render_dir.empty()) {
    if (Status st = render_prompts(*ps, *loaded->tokenizer, a.render_dir); !st) return report_error(st.message());
    std::fprintf(stderr, "wrote %zu prompts (%s) to %s\n", ps->prompts.size(), ps->rendering.c_str(), a.render_dir.c_str());
    return 0;
  }
  VariantRegistry registry(loaded->model, *loaded->source, {.budget_bytes = UINT64_MAX});
  AcceptBench bench(a, *settings, *loaded, *ps);
  if (Status st = bench.add_models(registry); !st) return report_error(st.message());
  if (Status st = bench.configure(); !st) return report_error(st.message());
  if (Status st = bench.warm_up(); !st) return report_error(st.message());
  if (Status st = bench.measure(); !st) return report_error(st.message());
  return print_results(a, bench.results());
}

}  // namespace

void add_bench_command(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto a = std::make_shared<BenchAcceptArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "accept", "Acceptance rate (tokens per check, bonus included) and tokens/s of speculative decoding per draft "
                "setting, with speedup over plain decoding of the same target, per prompt category");
  cmd->add_option("-m,--model", a->model, "Bit-split model (from `bitsplit convert`)")->required()->check(CLI::ExistingFile);
  add_target_activations_option(cmd, &a->target_activations);
  cmd->add_option("--prompts", a->prompts,
                  "Prompt file: one prompt per line, or (name ending .jsonl) one JSON object per line, "
                  "{\"category\": \"qa\", \"turns\": [{\"role\": \"system\"|\"user\"|\"assistant\", \"content\": \"...\"}, ...]}, "
                  "rendered as ChatML when the vocabulary has <|im_start|> (generation then stops at <|im_end|>), "
                  "else as the turns' text joined with blank lines. bench/prompts/ has ours (spec-bench.jsonl: "
                  "Spec-Bench's six categories)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens per prompt (at most)")->capture_default_str()->check(whole_in(1, 1 << 16));
  cmd->add_option("--temp", a->temperature, "Temperature (0 = greedy)")->capture_default_str()->check(real_in(0.0, 100.0));
  cmd->add_option("--seed", a->seed, "Seed for sampling")->capture_default_str()->check(seed_number());
  // Given with no values, --chains / --budgets have one empty result (no default string to fill
  // in): no rows of that kind.
  const CLI::Validator budget_or_nothing(
      [](std::string& s) { return s.empty() ? std::string() : whole_in(1, spec::kMaxBudget)(s); }, "INT");
  auto* chains = cmd->add_option("--chains", a->chains, "Chain lengths to try (default 1 2 4 8; given with no values: none)")
                     ->check(budget_or_nothing)->expected(0, CLI::detail::expected_max_vector_size);
  auto* budgets = cmd->add_option("--budgets", a->budgets, "Tree budgets to try (default 4 8 16 32; given with no values: none)")
                      ->check(budget_or_nothing)->expected(0, CLI::detail::expected_max_vector_size);
  auto* auto_row = cmd->add_flag("--auto", a->auto_row, "Also a row for the online choice of setting (as `run --budget auto`)");
  cmd->add_option("--settings", a->settings,
                  "The rows to measure, in order, comma-separated: plain (the target D + R without a draft: the "
                  "reference for speedups), auto (the online choice, as `run --budget auto`), chain-K, tree-B "
                  "(K, B in 1.." + std::to_string(spec::kMaxBudget) + "); auto, chain-K and tree-B may end in +lookup "
                  "(context lookup of " + std::to_string(kDefaultLookup) + " tokens; "
                  "auto+lookup is what `bitsplit run` does by default). E.g. plain,auto+lookup,chain-4,tree-16. "
                  "Replaces --chains/--budgets/--auto, whose rows are plain, then the chains, the trees and auto")
      ->delimiter(',')->excludes(chains)->excludes(budgets)->excludes(auto_row)->type_name("LIST");
  cli::add_variant_options(cmd, &a->variant_specs,
                           "each variant is also decoded, with rows for its own draft and for the plain base draft, "
                           "interleaved with the base in the same run");
  cmd->add_option("--lookup", a->lookup,
                  "Context lookup in every speculative row (instead of +lookup's " + std::to_string(kDefaultLookup) +
                      "): up to N tokens that followed an earlier occurrence of the text's "
                  "last tokens (greedy only; 0 = off)")
      ->capture_default_str()->check(whole_in(0, spec::kMaxBudget));
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Generate all -n tokens of ChatML prompts (do not stop at <|im_end|>)");
  cmd->add_flag("--fresh-controller", a->fresh_controller,
                "Rows with an online budget (auto) start a new controller on every prompt, as one `bitsplit run` "
                "does; by default a row's prompts carry what the controller learned, as a server's requests do");
  auto* json = cmd->add_flag("--json", a->json,
                "Print JSON instead of tables: a row per setting, model and category (\"results\"), and \"summary\": "
                "per setting tau, tokens/s and speedup per category and overall, and the fastest setting per "
                "category (acceptance per depth: accepted_at_depth / drafted_at_depth)");
  cmd->add_option("--json-file", a->json_file, "Write the JSON (as --json prints it) to FILE and print the tables")
      ->excludes(json)->type_name("FILE");
  cmd->add_option("--render-prompts", a->render_dir,
                  "Write each prompt as rendered for this model (ChatML or plain text) to DIR/NNNN.txt with an index "
                  "DIR/prompts.tsv (file, category, tokens, stop token), and measure nothing: the same prompts for "
                  "another engine (bench/compare_llama_cpp.sh)")
      ->type_name("DIR");
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code, chains, budgets] {
    if (chains->results() == std::vector<std::string>{""}) a->chains.clear();
    if (budgets->results() == std::vector<std::string>{""}) a->budgets.clear();
    *exit_code = bench_accept(*a);
  });
}

}  // namespace bitsplit::cli
