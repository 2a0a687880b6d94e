// `bitsplit delta`: stores a fine-tuned model as 1-bit sign planes relative to its base.
#include <cstdio>
#include <memory>

#include "bitsplit/delta_format.h"
#include "bitsplit/quality.h"
#include "bitsplit/variant.h"
#include "bitsplit/variant_build.h"
#include "commands.h"
#include "option_checks.h"
#include "output_path.h"
#include "progress.h"

namespace bitsplit::cli {
namespace {

struct DeltaArgs {
  std::string base, finetuned, out, alpha = "row", distill;
  int distill_ctx = 128, threads = 0, kl_sweeps = 2;
  int64_t kl_tokens = 256;
};

// Distilled scales for every sign plane: both models loaded in f32 and run over the text.
Result<std::map<std::string, std::vector<float>>> distilled_scales(const DeltaArgs& a, quant::DeltaAlpha mode,
                                                                   std::string* fit) {
  BITSPLIT_ASSIGN_OR_RETURN(LoadedModel base, load_model(a.base));
  BITSPLIT_ASSIGN_OR_RETURN(LoadedModel ft, load_model(a.finetuned));
  BITSPLIT_ASSIGN_OR_RETURN(std::string text, read_text_file(a.distill));
  const auto tokens = ft.tokenizer->encode(text, {.add_special = false});
  BITSPLIT_ASSIGN_OR_RETURN(DeltaParts parts, compute_delta(base.model, ft.model, mode));
  const int32_t ctx = int32_t(std::min<int64_t>(a.distill_ctx, ft.model.config().n_ctx_train));
  ProgressBar bar("distill");
  BITSPLIT_ASSIGN_OR_RETURN(DistillReport rep,
                            distill_delta_scales(base.model, ft.model, tokens, ctx, ft.tokenizer->vocab().bos, parts,
                                                 [&](int64_t d, int64_t t) { bar.update(double(d), double(t)); }));
  std::fprintf(stderr,
               "distill: %lld tokens of %s, %lld projections: relative output error of the delta %.4f -> %.4f "
               "(mean |delta| scales -> least-squares scales)\n",
               (long long)rep.tokens, a.distill.c_str(), (long long)rep.matrices, rep.rel_error_before, rep.rel_error_after);
  *fit = "least squares of the outputs on " + a.distill + " (" + std::to_string(rep.tokens) + " tokens)";
  if (a.kl_sweeps > 0) {
    ProgressBar kl_bar("distill KL");
    BITSPLIT_ASSIGN_OR_RETURN(KlDistillReport k, distill_delta_kl(base.model, ft.model, tokens, ctx, ft.tokenizer->vocab().bos,
                                                                  parts, a.kl_sweeps, a.kl_tokens, [&](int64_t d, int64_t t) {
                                                                    kl_bar.update(double(d), double(t));
                                                                  }));
    std::fprintf(stderr, "distill: then on the logit KL over %lld tokens (%lld evaluations, %lld matrix scales changed): "
                         "KL to the fine-tune %.6f -> %.6f\n",
                 (long long)k.tokens, (long long)k.evaluations, (long long)k.changed, k.kl_before, k.kl_after);
    *fit += ", then per-matrix multipliers on the logit KL (" + std::to_string(k.tokens) + " tokens)";
  }
  std::map<std::string, std::vector<float>> scales;
  for (auto& [name, s] : parts.signs) scales[name] = std::move(s.alpha);
  return scales;
}

int delta(const DeltaArgs& a) {
  if (Status st = check_output_path(a.out, {a.base, a.finetuned, a.distill}, "-o"); !st) return report_error(st.message());
  auto base = open_weights(a.base);
  if (!base) return report_error(base.status().message());
  auto ft = open_weights(a.finetuned);
  if (!ft) return report_error(ft.status().message());
  DeltaOptions options;
  options.alpha = a.alpha == "matrix" ? quant::DeltaAlpha::kMatrix : quant::DeltaAlpha::kRow;
  const auto threads = limit_threads(a.threads);
  std::map<std::string, std::vector<float>> scales;
  if (!a.distill.empty()) {
    auto d = distilled_scales(a, options.alpha, &options.alpha_fit);
    if (!d) return report_error(d.status().message());
    scales = std::move(*d);
    options.alpha_override = &scales;
  }
  std::fprintf(stderr, "delta: %s -> %s\n", a.base.c_str(), a.finetuned.c_str());
  DeltaReport report;
  if (Status st = make_delta(**base, **ft, a.out, options, &report); !st) return report_error(st.message());
  std::fprintf(stderr,
               "wrote %s: %.2f MiB in %.1f s; %lld sign planes (%lld weights, alpha per %s), %lld tensors in full, "
               "%lld identical tensors omitted\n",
               a.out.c_str(), double(report.output_bytes) / (1 << 20), report.seconds, (long long)report.sign_tensors,
               (long long)report.sign_weights, a.alpha.c_str(), (long long)report.full_tensors,
               (long long)report.omitted_tensors);
  std::fprintf(stderr, "base sha256: %s\nfine-tuned sha256: %s\n", report.base_sha256.c_str(),
               report.finetuned_sha256.c_str());
  return 0;
}

}  // namespace

void add_delta_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<DeltaArgs>();
  CLI::App* cmd = app.add_subcommand("delta", "Store a fine-tuned model as 1-bit sign planes + scales relative to its base (BitDelta)");
  cmd->add_option("--base", a->base, "Base model (.gguf, or a Hugging Face folder)")->required()->check(CLI::ExistingPath);
  cmd->add_option("--finetuned", a->finetuned,
                  "Fine-tuned model (.gguf or a Hugging Face folder, same architecture as the base)")
      ->required()->check(CLI::ExistingPath);
  cmd->add_option("-o,--output", a->out, "Output delta file (.delta.gguf; written under a temporary name)")->required();
  cmd->add_option("--alpha", a->alpha, "Scale granularity: one per output row, or one per matrix")
      ->capture_default_str()->check(CLI::IsMember({"row", "matrix"}));
  cmd->add_option("--distill", a->distill,
                  "Fit the scales on this text: least squares of each projection's outputs on the fine-tuned "
                  "model's activations (loads both models in f32)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--distill-kl-sweeps", a->kl_sweeps,
                  "With --distill: passes of the end-to-end refinement on the logit KL after the layer-wise fit (0: none)")
      ->capture_default_str()
      ->check(whole_in(0, 8));
  cmd->add_option("--distill-kl-tokens", a->kl_tokens, "Tokens of the --distill text used by the KL refinement")
      ->capture_default_str()
      ->check(whole_in(2, int64_t(1) << 30));
  cmd->add_option("--distill-ctx", a->distill_ctx, "Tokens per window for --distill")->capture_default_str()->check(whole_in(2, 1 << 20));
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code] { *exit_code = delta(*a); });
}

}  // namespace bitsplit::cli
