// `bitsplit delta`: stores a fine-tuned model as 1-bit sign planes relative to its base.
#include <cstdio>
#include <memory>

#include "bitsplit/delta.h"
#include "commands.h"

namespace bitsplit::cli {
namespace {

struct DeltaArgs {
  std::string base, finetuned, out, alpha = "row";
};

int delta(const DeltaArgs& a) {
  auto base = open_weights(a.base);
  if (!base) return report_error(base.status().message());
  auto ft = open_weights(a.finetuned);
  if (!ft) return report_error(ft.status().message());
  DeltaOptions options;
  options.alpha = a.alpha == "matrix" ? quant::DeltaAlpha::kMatrix : quant::DeltaAlpha::kRow;
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
  cmd->add_option("--base", a->base, "Base model (.gguf)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--finetuned", a->finetuned, "Fine-tuned model (.gguf, same architecture as the base)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", a->out, "Output delta file (.delta.gguf; written under a temporary name)")->required();
  cmd->add_option("--alpha", a->alpha, "Scale granularity: one per output row, or one per matrix")
      ->capture_default_str()->check(CLI::IsMember({"row", "matrix"}));
  cmd->callback([a, exit_code] { *exit_code = delta(*a); });
}

}  // namespace bitsplit::cli
