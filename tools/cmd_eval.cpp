// `bitsplit eval`: perplexity, KL divergence and top-1 agreement of every quantisation
// scheme against the f32 model, as a table or JSON.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "bitsplit/quality.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "commands.h"
#include "option_checks.h"
#include "progress.h"

namespace bitsplit::cli {
namespace {

struct EvalArgs {
  std::string model, text, imatrix, base, distill, reference, lora;
  std::string pass;  // --pass with --reference: target, draft or both (empty: the model's own)
  int ctx = 128, group = 64, threads = 0;
  int64_t max_tokens = 0;
  double draft_bpw = 0.0;
  bool json = false, llama_windows = false;
  std::vector<std::string> schemes;
  TargetActivations target_activations = TargetActivations::kDraftRemainder;
};

// `eval FT.gguf --base BASE.gguf`: the fine-tuned model as a BitDelta variant of its base.
int eval_variant(const EvalArgs& a, LoadedModel& ft, const std::vector<int32_t>& tokens) {
  auto base = load_model(a.base);
  if (!base) return report_error(base.status().message());
  if (base->model.has_planes()) {
    return report_error("--base: " + a.base + " is a converted (bit-split) model; give the original base model (eval "
                        "converts it in every scheme itself)");
  }
  VariantEvalOptions o;
  o.ctx = a.ctx;
  o.group = a.group;
  o.max_tokens = a.max_tokens;
  o.bos = ft.tokenizer->vocab().bos;
  std::vector<int32_t> distill_tokens;
  if (!a.distill.empty()) {
    auto text = read_text_file(a.distill);
    if (!text) return report_error(text.status().message());
    distill_tokens = ft.tokenizer->encode(*text, {.add_special = false});
    o.distill_tokens = &distill_tokens;
    o.distill_ctx = a.ctx;
  }
  ProgressBar bar("eval");
  auto r = evaluate_variant_quality(base->model, ft.model, tokens, o, [&](int64_t d, int64_t t) { bar.update(double(d), double(t)); });
  if (!r) return report_error(r.status().message());
  const ScoreReport& s = r->scores;
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["base"] = a.base;
    j["text"] = a.text;
    j["distill_text"] = a.distill.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.distill);
    j["tokens"] = s.tokens;
    j["finetuned_f32_perplexity"] = s.reference_perplexity;
    j["delta_bytes_row"] = r->delta_bytes_row;
    j["delta_bytes_matrix"] = r->delta_bytes_matrix;
    j["base_plane_bytes_r8"] = r->base_split_bytes_r8;
    j["base_plane_bytes_r6"] = r->base_split_bytes_r6;
    for (const auto& row : s.rows) {
      j["rows"].push_back({{"scheme", row.name}, {"perplexity", row.perplexity}, {"kl_mean", row.kl_mean},
                           {"kl_p99", row.kl_p99}, {"top1_agreement", row.top1_agreement}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("variant %s on base %s, text %s: %lld predictions; reference: the f32 fine-tuned model (perplexity %.4f)\n",
              a.model.c_str(), a.base.c_str(), a.text.c_str(), (long long)s.tokens, s.reference_perplexity);
  std::printf("delta: %.3f MiB (alpha per row), %.3f MiB (per matrix); base planes D+R8 %.3f MiB, D+R6 %.3f MiB\n",
              double(r->delta_bytes_row) / (1 << 20), double(r->delta_bytes_matrix) / (1 << 20),
              double(r->base_split_bytes_r8) / (1 << 20), double(r->base_split_bytes_r6) / (1 << 20));
  if (!a.distill.empty()) {
    std::printf("distilled on %s: relative output error %.4f -> %.4f (row), %.4f -> %.4f (matrix)\n", a.distill.c_str(),
                r->distill_row.rel_error_before, r->distill_row.rel_error_after, r->distill_matrix.rel_error_before,
                r->distill_matrix.rel_error_after);
    const KlDistillReport& k = r->distill_kl;
    std::printf("then on the logit KL (%lld tokens, %lld evaluations, %lld matrix scales changed): KL %.6f -> %.6f\n",
                (long long)k.tokens, (long long)k.evaluations, (long long)k.changed, k.kl_before, k.kl_after);
  }
  std::printf("\n| model                        | perplexity | KL mean   | KL p99    | top-1 agree |\n");
  std::printf("|------------------------------|------------|-----------|-----------|-------------|\n");
  for (const auto& row : s.rows) {
    std::printf("| %-28s | %10.4f | %9.6f | %9.6f | %10.2f%% |\n", row.name.c_str(), row.perplexity, row.kl_mean,
                row.kl_p99, 100 * row.top1_agreement);
  }
  return 0;
}

// `eval MODEL --reference REF`: MODEL as it is (f32, or a converted file's target D + R with its
// --target-activations), scored against another model of the same vocabulary, e.g. a merge
// against each fine-tune it merged, or a converted file against its source.
// The token that starts each window: llama-perplexity's windows start with BOS only when the
// vocabulary adds one (Qwen's does not); eval's own windows always do.
int32_t window_bos(const EvalArgs& a, const Tokenizer& tokenizer) {
  return a.llama_windows && !tokenizer.vocab().add_bos ? -1 : tokenizer.vocab().bos;
}

// How the text was cut, for the report's first line.
std::string windowing(const EvalArgs& a, int64_t windows) {
  if (a.llama_windows) {
    return std::to_string(windows) + " chunks of " + std::to_string(a.ctx) +
           " tokens, their second halves scored (llama-perplexity's windows)";
  }
  return std::to_string(windows) + " windows of <= " + std::to_string(a.ctx) + " tokens";
}

// The passes --pass names, each a row of the report: a converted file's target (D + R) and/or its
// draft (D alone); without --pass the model's own (an original model's f32 pass, a converted
// file's target).
Result<std::vector<std::pair<std::string, Pass>>> passes_to_score(const EvalArgs& a, const Model& model) {
  if (a.pass.empty()) return std::vector<std::pair<std::string, Pass>>{{"model", Pass::kDefault}};
  if (!model.has_planes()) {
    return Status::error("--pass " + a.pass + ": " + a.model +
                         " is not a converted (bit-split) file, so it has no draft or target pass; give the file `bitsplit "
                         "convert` wrote");
  }
  std::vector<std::pair<std::string, Pass>> out;
  if (a.pass != "draft") out.emplace_back("target", Pass::kTarget);
  if (a.pass != "target") out.emplace_back("draft", Pass::kDraft);
  return out;
}

int eval_against(const EvalArgs& a, LoadedModel& model, const std::vector<int32_t>& tokens) {
  auto passes = passes_to_score(a, model.model);
  if (!passes) return report_error(passes.status().message());
  auto ref = load_model(a.reference);
  if (!ref) return report_error(ref.status().message());
  if (ref->model.has_planes()) return report_error("--reference: " + a.reference + " is a converted (bit-split) model; give an original one");
  if (ref->model.config().n_vocab != model.model.config().n_vocab) {
    return report_error("--reference: " + a.reference + " has a vocabulary of " + std::to_string(ref->model.config().n_vocab) +
                        " tokens, " + a.model + " of " + std::to_string(model.model.config().n_vocab));
  }
  std::shared_ptr<const Variant> variant;  // --lora: MODEL with an adapter
  if (!a.lora.empty()) {
    auto spec = parse_variant_spec("lora=" + a.lora);
    if (!spec) return report_error("--lora: " + spec.status().message());
    auto file = open_lora(spec->path);
    if (!file) return report_error("--lora: " + file.status().message());
    auto v = Variant::load(*file, model.model, "lora", spec->scale);
    if (!v) return report_error("--lora: " + v.status().message());
    variant = *v;
  }
  std::vector<ScoredModel> candidates;
  for (const auto& [name, pass] : *passes) candidates.push_back({name, &model.model, pass, variant.get()});
  ProgressBar bar("eval");
  auto r = score_against(ref->model, candidates, tokens, a.ctx,
                         window_bos(a, *model.tokenizer), a.max_tokens, [&](int64_t d, int64_t t) { bar.update(double(d), double(t)); },
                         a.llama_windows);
  if (!r) return report_error(r.status().message());
  if (a.json) {
    nlohmann::json j = {{"model", a.model}, {"reference", a.reference}, {"text", a.text},
                        {"ctx", a.ctx},     {"tokens", r->tokens},     {"reference_perplexity", r->reference_perplexity}};
    auto fields = [](nlohmann::json& o, const Score& row) {
      o["perplexity"] = row.perplexity;
      o["kl_mean"] = row.kl_mean;
      o["kl_p99"] = row.kl_p99;
      o["top1_agreement"] = row.top1_agreement;
    };
    // One pass: its numbers at the top level (as before --pass); with --pass, also a row per pass.
    if (r->rows.size() == 1) fields(j, r->rows[0]);
    if (!a.pass.empty()) {
      j["passes"] = nlohmann::json::array();
      for (const Score& row : r->rows) {
        nlohmann::json o = {{"pass", row.name}};
        fields(o, row);
        j["passes"].push_back(o);
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model %s against %s, text %s: %lld predictions in %s; reference perplexity %.4f\n", a.model.c_str(),
              a.reference.c_str(), a.text.c_str(), (long long)r->tokens, windowing(a, r->windows).c_str(),
              r->reference_perplexity);
  for (const Score& row : r->rows) {
    const std::string what = a.pass.empty() ? "" : row.name + ": ";
    std::printf("%sperplexity %.4f, KL(reference || model) mean %.6f, p99 %.6f, top-1 agreement %.2f%%\n", what.c_str(),
                row.perplexity, row.kl_mean, row.kl_p99, 100 * row.top1_agreement);
  }
  return 0;
}

int eval(const EvalArgs& a) {
  if (!a.pass.empty() && a.reference.empty()) {
    return report_error("--pass applies to a converted MODEL scored against --reference");
  }
  const auto threads = limit_threads(a.threads);
  auto loaded = load_model(a.model, {.target_activations = a.target_activations});
  if (!loaded) return report_error(loaded.status().message());
  const WeightSource& source = *loaded->source;
  auto split = read_split_format(source.metadata());
  if (split && split->has_value() && a.reference.empty()) {
    return report_error(a.model + " is a converted (bit-split) model; eval takes the original model and quantises it "
                        "in every scheme itself (or scores this file's target with --reference ORIGINAL)");
  }
  auto text = read_text_file(a.text);
  if (!text) return report_error(text.status().message());
  const auto tokens = loaded->tokenizer->encode(*text, {.add_special = false});
  if (!a.base.empty() && !a.reference.empty()) return report_error("--base and --reference do not go together");
  if (!a.base.empty() && a.llama_windows) return report_error("--llama-windows applies to eval's schemes and --reference, not --base");
  if (!a.base.empty()) return eval_variant(a, *loaded, tokens);
  if (!a.reference.empty()) return eval_against(a, *loaded, tokens);
  if (!a.lora.empty()) return report_error("--lora applies to MODEL scored against --reference");
  if (!a.distill.empty()) return report_error("--distill-text needs --base (it distils the variant's scales)");

  ImatrixFile imatrix;
  EvalOptions o;
  o.ctx = a.ctx;
  o.group = a.group;
  o.max_tokens = a.max_tokens;
  o.bos = window_bos(a, *loaded->tokenizer);
  o.llama_windows = a.llama_windows;
  o.schemes = a.schemes;
  o.draft_bpw = a.draft_bpw;
  if (!a.imatrix.empty()) {
    auto m = read_imatrix_file(a.imatrix);
    if (!m) return report_error(m.status().message());
    imatrix = std::move(*m);
    o.imatrix = &imatrix.columns;
    if (!imatrix.covariances.empty()) o.covariances = &imatrix.covariances;
  }
  std::string source_types;
  for (const auto& t : source.tensors()) {
    if (is_split_projection(t.name) && source_types.find(gguf::tensor_type_name(t.type)) == std::string::npos)
      source_types += (source_types.empty() ? "" : ",") + gguf::tensor_type_name(t.type);
  }
  ProgressBar bar("eval");
  auto report = evaluate_quality(loaded->model, tokens, o, [&](int64_t d, int64_t t) { bar.update(double(d), double(t)); });
  if (!report) return report_error(report.status().message());
  const bool quantised_source = source_types.find("F32") == std::string::npos &&
                                source_types.find("F16") == std::string::npos && source_types.find("BF16") == std::string::npos;
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["text"] = a.text;
    j["ctx"] = a.ctx;
    j["group"] = a.group;
    j["imatrix"] = a.imatrix.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.imatrix);
    j["draft_bpw"] = a.draft_bpw > 0 ? nlohmann::json(a.draft_bpw) : nlohmann::json(nullptr);
    if (!report->draft_bits.empty()) j["draft_bits"] = report->draft_bits;
    j["source_types"] = source_types;
    j["reference"] = quantised_source ? "dequantised source weights" : "f32 source weights";
    j["tokens"] = report->tokens;
    j["windows"] = report->windows;
    j["f32_perplexity"] = report->f32_perplexity;
    for (const auto& r : report->rows) {
      j["schemes"].push_back({{"scheme", r.scheme}, {"vram_bits_per_weight", r.vram_bits_per_weight},
                              {"ram_bits_per_weight", r.ram_bits_per_weight}, {"perplexity", r.perplexity},
                              {"kl_mean", r.kl_mean}, {"kl_p99", r.kl_p99}, {"top1_agreement", r.top1_agreement}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model %s, text %s: %lld predictions in %s, group %d%s\n", a.model.c_str(), a.text.c_str(),
              (long long)report->tokens, windowing(a, report->windows).c_str(), a.group,
              a.imatrix.empty() ? "" : (", imatrix " + a.imatrix).c_str());
  if (quantised_source) {
    std::printf("note: source projections are %s; the reference is the dequantised source\n", source_types.c_str());
  }
  if (!report->draft_bits.empty()) std::printf("bit-split schemes: %s\n", report->draft_bits.c_str());
  std::printf("reference perplexity (f32): %.4f\n\n", report->f32_perplexity);
  std::printf("| scheme    | VRAM bits/w | RAM bits/w | perplexity | KL mean   | KL p99    | top-1 agree |\n");
  std::printf("|-----------|-------------|------------|------------|-----------|-----------|-------------|\n");
  for (const auto& r : report->rows) {
    std::printf("| %-9s | %11.3f | %10.3f | %10.4f | %9.6f | %9.6f | %10.2f%% |\n", r.scheme.c_str(),
                r.vram_bits_per_weight, r.ram_bits_per_weight, r.perplexity, r.kl_mean, r.kl_p99,
                100 * r.top1_agreement);
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Compare quantisation schemes with the f32 model on a text");
  cmd->add_option("model", a->model, "Original model (.gguf, or a Hugging Face folder)")->required()->check(CLI::ExistingPath);
  cmd->add_option("--text", a->text, "Text file to evaluate on")->required()->check(CLI::ExistingFile);
  cmd->add_option("--ctx", a->ctx, "Tokens per window (the first is BOS)")->capture_default_str()->check(whole_in(2, 1 << 20));
  cmd->add_option("--group", a->group, "Group size of the bit-split and min/max schemes")
      ->capture_default_str()->check(CLI::IsMember({32, 64, 128}));
  cmd->add_option("--max-tokens", a->max_tokens, "Stop after this many predictions (0 = whole text)")
      ->capture_default_str()->check(whole_at_least(0));
  cmd->add_flag("--llama-windows", a->llama_windows,
                "Cut the text as llama-perplexity does (chunks of --ctx, BOS first, only each chunk's second half "
                "scored; --max-tokens N takes N / (ctx/2) chunks), so KL compares with its --kl-divergence at "
                "-c CTX --chunks N/(CTX/2)");
  cmd->add_option("--imatrix", a->imatrix, "Importance matrix for the bit-split schemes (with covariances: drafts fitted with error feedback, as "
                 "convert does; the /w rows keep the ordinary fit)")->check(CLI::ExistingFile);
  cmd->add_option("--draft-bpw", a->draft_bpw,
                  "Give the bit-split schemes' drafts per-tensor bits within this budget, as `convert --draft-bpw` does")
      ->check(real_above(0.0))->type_name("BITS");
  cmd->add_option("--scheme", a->schemes, "Only these schemes (repeatable): draft(R8), draft(R6), D+R6, D+R8, D+R6/a8, "
                                          "D+R8/a8, D+R6/a16, D+R8/a16 (the last four only when named), D+R6/w, "
                                          "D+R8/w, Q8_0, Q8_0/a8, minmax2, minmax4");
  cmd->add_option("--base", a->base,
                  "Evaluate MODEL as a BitDelta variant of this base: delta rows in every tier against the f32 "
                  "fine-tuned model, beside MODEL converted directly")
      ->check(CLI::ExistingFile);
  cmd->add_option("--distill-text", a->distill, "With --base: also rows with scales distilled on this text (use a "
                                                "text other than --text)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--reference", a->reference,
                  "Score MODEL itself against this model of the same vocabulary: KL(REFERENCE || MODEL), "
                  "top-1 agreement, perplexities (e.g. a merge against each fine-tune it merged, or a converted "
                  "file's target, with --target-activations, against its source)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--lora", a->lora,
                  "With --reference: score MODEL with this LoRA adapter applied (FILE or FILE:SCALE), e.g. against "
                  "the adapter merged into the weights by `bitsplit merge`")
      ->type_name("FILE[:SCALE]");
  cmd->add_option("--pass", a->pass,
                  "With --reference and a converted MODEL: score its target (D + R, with --target-activations), its "
                  "draft (D alone, as speculative decoding drafts with it) or both, one row each")
      ->check(CLI::IsMember({"target", "draft", "both"}));
  add_target_activations_option(cmd, &a->target_activations);
  cmd->add_flag("--json", a->json, "Print JSON instead of a table");
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code] { *exit_code = eval(*a); });
}

}  // namespace bitsplit::cli
