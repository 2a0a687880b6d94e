// `bitsplit run`: load a model, tokenize the prompt, stream generated text, report speed.
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>

#include "bitsplit/generation_args.h"
#include "bitsplit/interrupt.h"
#include "bitsplit/memory_plan.h"
#include "bitsplit/session.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "bitsplit/vram_plan.h"
#include "commands.h"
#include "option_checks.h"
#include "variant_options.h"

namespace bitsplit::cli {
namespace {

struct RunOptions {
  std::string model;
  bool mlock = false;
  bool no_mmap = false;
  TargetActivations target_activations = TargetActivations::kDraftRemainder;
  std::string prompt;
  std::string prompt_file;
  int32_t n_predict = 128;
  GenerationArgs generation;  // sampling, seed, depth, tree top-k, lookup, base draft: bound to their options
  int threads = 0;
  bool parse_special = false;
  bool no_bos = false;
  bool ignore_eos = false;
  bool no_spec = false;
  bool draft_only = false;
  std::string budget = "auto";
  std::string draft_shape = "tree";
  bool draft_shape_given = false;  // --draft on the command line: auto budgets keep to that shape
  std::string vram_budget;
  cli::VariantSpecs variant_specs;  // --delta, --lora
  std::string variant;
  bool host_draft = false;
};

void print_acceptance(const spec::AcceptanceStats& a) {
  std::fprintf(stderr, "speculative: %lld checks, %.2f accepted drafted tokens per check (%.2f tokens per check), "
               "%lld drafted nodes\n", (long long)a.checks, a.accepted_per_check(), a.tokens_per_check(),
               (long long)a.drafted);
  std::fprintf(stderr, "  draft %.3f ms/check, verify %.3f ms/check\n",
               a.checks ? 1e3 * a.draft_seconds / double(a.checks) : 0.0,
               a.checks ? 1e3 * a.verify_seconds / double(a.checks) : 0.0);
  std::fprintf(stderr, "  accepted per check:");
  for (size_t k = 0; k < a.histogram.size(); ++k) std::fprintf(stderr, " %zu:%lld", k, (long long)a.histogram[k]);
  std::fprintf(stderr, "\n");
  if (!a.drafted_at_depth.empty() && a.drafted_at_depth[0] > 0) {
    std::fprintf(stderr, "  accepted per depth (accepted/checks with a node there):");
    for (size_t d = 0; d < a.drafted_at_depth.size(); ++d) {
      std::fprintf(stderr, " %zu:%lld/%lld", d + 1, (long long)a.accepted_at_depth[d], (long long)a.drafted_at_depth[d]);
    }
    std::fprintf(stderr, "\n");
  }
  if (a.lookup_drafted > 0) {
    std::fprintf(stderr, "  context lookup: %lld accepted tokens of %lld drafted nodes\n", (long long)a.lookup_accepted,
                 (long long)a.lookup_drafted);
  }
}

// What the model will take in RAM, printed and checked before anything is allocated. The KV
// cache is sized for the run: at most prompt bytes + BOS/EOS tokens (no token is shorter than
// a byte) + n_predict + a full speculative budget.
Status check_memory_before_loading(const std::string& path, size_t prompt_bytes, int32_t n_predict) {
  BITSPLIT_ASSIGN_OR_RETURN(auto source, open_weights(path));
  BITSPLIT_ASSIGN_OR_RETURN(const ModelConfig config, read_model_config(*source));
  const int64_t slots = int64_t(prompt_bytes) + 2 + n_predict + spec::kMaxBudget + 1;
  BITSPLIT_ASSIGN_OR_RETURN(const MemoryPlan plan, plan_memory(*source, config, {.n_slots = slots}));
  BITSPLIT_ASSIGN_OR_RETURN(const SystemMemory machine, system_memory());
  std::fprintf(stderr, "memory: %s; machine: %s\n", plan.summary().c_str(), machine.summary().c_str());
  return check_memory(plan, machine);
}

// -p TEXT, or the file -f names (they exclude each other: CLI11 checks).
Result<std::string> read_prompt(const RunOptions& o) {
  if (o.prompt_file.empty()) return o.prompt;
  return read_text_file(o.prompt_file);
}

// The generation asked for: the options bound to GenerationArgs, --budget and --draft in the
// engine's terms and the flags that turn things off; generation_config checks them all.
Result<GenerationConfig> run_generation_config(const RunOptions& o) {
  GenerationArgs args = o.generation;
  auto budget = spec::parse_budget(o.budget);
  if (!budget) return budget.status().with_context("--budget");
  args.budget = *budget;
  args.shape = o.draft_shape == "chain" ? spec::DraftShape::kChain : spec::DraftShape::kTree;
  args.shape_given = o.draft_shape_given;
  args.speculative = !o.no_spec;
  args.device_draft = !o.host_draft;
  return generation_config(args);
}

// Registers --delta/--lora on the loaded base; the variant --variant names (null: the base).
Result<std::shared_ptr<const Variant>> chosen_variant(const RunOptions& o, VariantRegistry& variants,
                                                      const LoadedModel& loaded) {
  BITSPLIT_RETURN_IF_ERROR(register_variants(variants, o.variant_specs, loaded, log_line));
  if (!o.variant.empty()) return variants.get(o.variant);
  if (!o.variant_specs.empty()) {
    return Status::error("--delta/--lora register variants but none was chosen; add --variant NAME (or leave them out "
                         "to run the base)");
  }
  return std::shared_ptr<const Variant>();
}

Result<std::vector<int32_t>> encode_prompt(const RunOptions& o, const Tokenizer& tokenizer, const std::string& prompt) {
  EncodeOptions enc;
  enc.add_special = !o.no_bos;
  enc.parse_special = o.parse_special;
  std::vector<int32_t> ids = tokenizer.encode(prompt, enc);
  if (ids.empty()) {
    return Status::error(o.no_bos ? "the prompt is empty and --no-bos leaves no token to start from; pass -p TEXT"
                                  : "the prompt is empty and the model adds no BOS token; pass -p TEXT");
  }
  return ids;
}

// Echoes the prompt, then streams the generated text to stdout as it comes (whole UTF-8
// characters), until end-of-sequence (unless --ignore-eos), -n tokens or a signal.
Result<SessionResult> stream_generation(Session& session, const RunOptions& o, const std::string& prompt,
                                        const std::vector<int32_t>& prompt_ids, const Tokenizer& tokenizer,
                                        const SamplingParams& sampling) {
  const int32_t eos = o.ignore_eos ? -1 : tokenizer.vocab().eos;
  Sampler sampler(sampling);
  Utf8StreamDecoder stream;
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  auto on_token = [&](int32_t token) {
    if (token == eos) return true;
    const std::string text = stream.push(tokenizer.token_to_piece(token));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return CooperativeInterrupt::signal_received() == 0;
  };
  Result<SessionResult> generated = session.generate(prompt_ids, o.n_predict, eos, sampler, on_token);
  const std::string tail = stream.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return generated;
}

// The summary's "decoding:" line: which model made the tokens, and how.
const char* decoding_mode(const RunOptions& o, const Model& model, bool speculative) {
  if (o.draft_only) return "draft model D alone (--draft-only)";
  if (speculative) return "speculative (draft D, target D + R)";
  if (model.has_planes()) return "plain, target D + R (--no-spec)";
  if (model.has_q8_0()) {
    return "plain, Q8_0 projections on the Q8_0 kernel (not a bit-split model; `bitsplit convert` it for speculative "
           "decoding)";
  }
  return "plain (not a bit-split model; `bitsplit convert` it for speculative decoding)";
}

// Where the draft ran, and what a check moved to and from the device.
std::string draft_note(const SpeculativeResult& r) {
  std::string note = "draft pass: " + r.draft_pass;
  if (const auto& t = r.device_transfers; t.calls > 0 && r.acceptance.checks > 0) {
    const double checks = double(r.acceptance.checks);
    char buf[160];
    std::snprintf(buf, sizeof(buf), "; per check %.1f KiB to the device (batches, committed K/V), %.1f KiB back",
                  double(t.activation_bytes) / 1024.0 / checks, double(t.result_bytes) / 1024.0 / checks);
    note += buf;
  }
  return note;
}

// Where an online budget ended and how many checks each setting had.
std::string budget_note(const SpeculativeResult& r) {
  std::string used;
  for (const auto& [name, n] : r.checks_per_setting) used += " " + name + ":" + std::to_string(n);
  return "budget: auto, ended at " + r.final_setting + " (checks per setting:" + used + ")";
}

// The summary on stderr: speeds, how the tokens were made, the variant, acceptance, the seed.
void print_summary(const RunOptions& o, const Model& model, const Variant* variant, bool speculative,
                   const SessionResult& result, const GenerationConfig& config) {
  const GenerationStats& stats = result.generation;
  std::fprintf(stderr, "\nprompt: %lld tokens in %.3f s (%.1f tokens/s)\n", (long long)stats.prompt_tokens,
               stats.prompt_seconds, stats.prompt_tokens_per_second());
  std::fprintf(stderr, "generation: %lld tokens in %.3f s (%.1f tokens/s)%s\n", (long long)stats.generated_tokens,
               stats.generate_seconds, stats.generate_tokens_per_second(),
               stats.stopped_at_eos ? ", stopped at end-of-sequence" : "");
  std::fprintf(stderr, "decoding: %s\n", decoding_mode(o, model, speculative));
  if (variant) {
    // A pooled name may be served by a merged adapter of several (K-Merge): say which.
    const std::string served_by = variant->name() == o.variant ? "" : ", served by the merged adapter " + variant->name();
    std::fprintf(stderr, "variant: %s (%s%s, %.2f MiB on the shared base%s)\n", o.variant.c_str(),
                 variant->kind().c_str(), served_by.c_str(), double(variant->bytes()) / (1 << 20),
                 speculative && config.session.base_draft ? "; drafting with the plain base D" : "");
  }
  if (const auto& r = result.speculative) {
    print_acceptance(r->acceptance);
    std::fprintf(stderr, "  %s\n", draft_note(*r).c_str());
    if (!config.session.budget) std::fprintf(stderr, "  %s\n", budget_note(*r).c_str());
  }
  if (!config.sampling.greedy()) std::fprintf(stderr, "seed: %llu\n", (unsigned long long)config.sampling.seed);
}

int run(const RunOptions& o) {
  auto prompt = read_prompt(o);
  if (!prompt) return report_error(prompt.status().message());
  auto config = run_generation_config(o);
  if (!config) return report_error(config.status().message());
  const auto threads = limit_threads(o.threads);
  auto vram_budget = vram_budget_option(o.vram_budget);
  if (!vram_budget) return report_error(vram_budget.status().message());
  if (Status st = check_memory_before_loading(o.model, prompt->size(), o.n_predict); !st) return report_error(st.message());
  auto loaded = load_model(o.model,
                           {.draft_only = o.draft_only, .q8_0_kernels = true, .target_activations = o.target_activations,
                            .copy_residual = o.no_mmap},
                           *vram_budget);
  if (!loaded) return report_error(loaded.status().message());
  if (o.mlock) {
    if (int rc = lock_model_planes(loaded->model); rc != 0) return rc;
  }
  if (*vram_budget && !loaded->model.has_planes()) {
    return report_error("--vram-budget places a bit-split model's draft planes; " + o.model +
                        " is not a bit-split model (`bitsplit convert` it first)");
  }
  // Variants ride on the loaded base; the one asked for is loaded (and timed) through the cache.
  VariantRegistry variants(loaded->model, *loaded->source, {.budget_bytes = UINT64_MAX}, log_line);
  auto variant = chosen_variant(o, variants, *loaded);
  if (!variant) return report_error(variant.status().message());
  auto prompt_ids = encode_prompt(o, *loaded->tokenizer, *prompt);
  if (!prompt_ids) return report_error(prompt_ids.status().message());

  if (config->session.base_draft && !*variant) {
    return report_error("--base-draft needs --variant NAME (the base drafts itself)");
  }
  Session session(loaded->model, *variant, config->session);
  if (Status st = session.validate(); !st) return report_error(st.message());
  // Checked before the prompt is echoed, so an impossible request prints only its error.
  if (Status st = session.check_request(prompt_ids->size(), o.n_predict); !st) return report_error(st.message());
  // Ctrl-C (SIGINT) or SIGTERM: stop after the current token, print the text and the summary.
  CooperativeInterrupt interrupt;
  auto generated = stream_generation(session, o, *prompt, *prompt_ids, *loaded->tokenizer, config->sampling);
  if (!generated) return report_error(generated.status().message());
  // A bit-split model decodes speculatively unless asked not to; any other model plainly.
  print_summary(o, loaded->model, variant->get(), session.speculative(), *generated, *config);
  if (const int sig = CooperativeInterrupt::signal_received(); sig != 0) {
    std::fprintf(stderr, "stopped by %s after %lld tokens\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 (long long)generated->generation.generated_tokens);
    return 128 + sig;
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt (streams to stdout, speed to stderr)");
  cmd->add_option("-m,--model", o->model, "Model file (.gguf)")->required()->check(CLI::ExistingPath);
  auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file")->check(CLI::ExistingFile)->excludes(prompt);
  cmd->add_option("-n,--n-predict", o->n_predict, "Number of tokens to generate")->capture_default_str()->check(whole_in(0, 1 << 24));
  cmd->add_option("--temp", o->generation.sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str()->check(real_in(0.0, 100.0));
  cmd->add_option("--top-k", o->generation.sampling.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str()->check(whole_at_least(0));
  cmd->add_option("--top-p", o->generation.sampling.top_p, "Nucleus sampling threshold; 1 = off")->capture_default_str()->check(real_in(0.0, 1.0));
  cmd->add_option("--min-p", o->generation.sampling.min_p, "Drop tokens below min-p x the top probability; 0 = off")->capture_default_str()->check(real_in(0.0, 1.0));
  cmd->add_option("--repeat-penalty", o->generation.sampling.repeat_penalty, "Penalty for recently seen tokens; 1 = off")->capture_default_str()->check(real_above(0));
  cmd->add_option("--repeat-last-n", o->generation.sampling.repeat_last_n, "How many recent tokens the penalty looks at")->capture_default_str()->check(whole_at_least(0));
  cmd->add_option("-s,--seed", o->generation.seed, "Random seed (default: random, printed at the end)")->check(seed_number());
  cmd->add_option("-t,--threads", o->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->add_flag("--parse-special", o->parse_special, "Turn special-token text such as <s> in the prompt into those tokens");
  cmd->add_flag("--no-bos", o->no_bos, "Do not add the beginning-of-sequence token");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after the end-of-sequence token");
  add_plane_memory_flags(cmd, &o->mlock, &o->no_mmap);
  add_target_activations_option(cmd, &o->target_activations);
  auto* no_spec = cmd->add_flag("--no-spec", o->no_spec, "Decode the target D + R plainly (the reference for speculative decoding)");
  cmd->add_flag("--draft-only", o->draft_only, "Run the 2-bit draft model D alone")->excludes(no_spec);
  cmd->add_option("--budget", o->budget,
                  "Drafted nodes per check, 1.." + std::to_string(spec::kMaxBudget) +
                      ", or auto: plain decoding or a chain or tree budget, chosen online for the most tokens/s "
                      "(fix it for reproducible sampled output)")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        auto b = spec::parse_budget(v);
        return b ? "" : b.status().message();
      });
  auto* draft = cmd->add_option("--draft", o->draft_shape,
                                 "Draft shape: a dynamic tree or a chain of --budget tokens (with --budget auto, "
                                 "default: either, chosen online; given: that shape only)")
                    ->capture_default_str()->check(CLI::IsMember({"tree", "chain"}));
  cmd->add_option("--lookup", o->generation.lookup,
                  "Context lookup, greedy decoding: also propose up to N tokens that followed an earlier occurrence "
                  "of the text's last 3, 2 or 1 tokens, verified in the same pass (0 = off; default " +
                      std::to_string(kDefaultLookup) + " with --budget auto, off with a fixed --budget)")
      ->check(whole_in(0, spec::kMaxBudget));
  cmd->add_option("--depth", o->generation.depth, "Maximum tree depth")->capture_default_str()->check(whole_in(1, spec::kMaxBudget));
  cmd->add_option("--tree-top-k", o->generation.tree_top_k, "Children considered per node and nodes kept per level")
      ->capture_default_str()->check(whole_in(1, spec::kMaxBudget));
  cmd->add_option("--vram-budget", o->vram_budget,
                  "Bytes of VRAM for the draft planes (e.g. 6G; default: free memory minus max(1 GiB, 10%)). "
                  "Planes go to the GPU layer by layer while they fit; the rest are drafted on the CPU")
      ->type_name("SIZE");
  cli::add_variant_options(cmd, &o->variant_specs, "run it with --variant NAME");
  cmd->add_option("--variant", o->variant, "Run the registered variant NAME instead of the base");
  cmd->add_flag("--host-draft", o->host_draft,
                "With a GPU: run only the draft's projections on it and the rest of the draft on the CPU (the "
                "default runs the whole draft on the GPU when every draft plane is in VRAM)");
  cmd->add_flag("--base-draft", o->generation.base_draft,
                "With --variant: draft with the plain base D instead of the variant's D + signs (to compare acceptance)");
  cmd->callback([o, exit_code, draft] {
    o->draft_shape_given = draft->count() > 0;
    *exit_code = run(*o);
  });
}

}  // namespace bitsplit::cli
