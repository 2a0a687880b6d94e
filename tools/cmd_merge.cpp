// `bitsplit merge`: two or more fine-tunes of one base (models, BitDelta deltas, LoRA
// adapters) merged into one model, or into a BitDelta delta of the base.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "bitsplit/delta_format.h"
#include "bitsplit/merge.h"
#include "commands.h"
#include "option_checks.h"
#include "output_path.h"
#include "progress.h"

namespace bitsplit::cli {
namespace {

struct MergeArgs {
  std::string base, out, method = "monosoup", name, outtype = "f32";
  std::vector<std::string> inputs;
  int64_t rank = 16;
  double lambda = 1.0;
  bool as_delta = false;
  int threads = 0;
};

int merge(const MergeArgs& a) {
  std::vector<std::string> read = a.inputs;
  read.push_back(a.base);
  if (Status st = check_output_path(a.out, read, "-o"); !st) return report_error(st.message());
  auto method = parse_merge_method(a.method);
  if (!method) return report_error("--method: " + method.status().message());
  auto base = open_weights(a.base);
  if (!base) return report_error(base.status().message());
  const auto threads = limit_threads(a.threads);
  MergeOptions o;
  o.method = *method;
  o.rank = a.rank;
  o.lambda = float(a.lambda);
  o.f16 = a.outtype == "f16" && !a.as_delta;
  o.name = a.name;
  // A delta is made from the merged model, written first under a temporary name beside the output.
  const std::string model_out = a.as_delta ? a.out + ".merged-model.tmp" : a.out;
  std::fprintf(stderr, "merge: %zu fine-tunes of %s by %s%s\n", a.inputs.size(), a.base.c_str(), a.method.c_str(),
               o.method == MergeMethod::kMonoSoup         ? (" (rank " + std::to_string(a.rank) + ")").c_str()
               : o.method == MergeMethod::kTaskArithmetic ? (" (lambda " + std::to_string(a.lambda) + ")").c_str()
                                                          : "");
  ProgressBar bar("merge");
  MergeReport rep;
  Status st = merge_models(**base, a.inputs, model_out, o, &rep, [&](const MergeProgress& p) {
    bar.update(double(p.tensors_done), double(p.tensors_total), -1, p.current);
  });
  if (!st) return report_error(st.message());
  std::fprintf(stderr, "merged %lld tensors (%lld changed) in %.1f s", (long long)rep.tensors, (long long)rep.changed, rep.seconds);
  if (rep.svd_matrices > 0) {
    std::fprintf(stderr, "; %lld task-vector matrices cut to rank %lld keep %.1f %% of their energy on average (least %.1f %%)",
                 (long long)rep.svd_matrices, (long long)a.rank, 100 * rep.mean_energy_kept, 100 * rep.min_energy_kept);
  }
  std::fprintf(stderr, "\n");
  if (!a.as_delta) {
    std::fprintf(stderr, "wrote %s: %.2f MiB\n", a.out.c_str(), double(rep.output_bytes) / (1 << 20));
    return 0;
  }
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  } cleanup{model_out};
  auto merged = open_weights(model_out);
  if (!merged) return report_error(merged.status().message());
  DeltaReport d;
  if (Status s = make_delta(**base, **merged, a.out, {}, &d); !s) return report_error(s.message());
  std::fprintf(stderr, "wrote %s: a BitDelta of the merge, %.2f MiB (%lld sign planes, %lld tensors in full)\n",
               a.out.c_str(), double(d.output_bytes) / (1 << 20), (long long)d.sign_tensors, (long long)d.full_tensors);
  return 0;
}

}  // namespace

void add_merge_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<MergeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "merge", "Merge fine-tunes of one base (models, BitDelta deltas or LoRA adapters) into one model (one alone: applied)");
  cmd->add_option("inputs", a->inputs, "Fine-tunes of the base: models (.gguf), deltas (.delta.gguf) or LoRA adapters")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--base", a->base, "The base model they were fine-tuned from (.gguf)")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", a->out, "Output file (written under a temporary name)")->required();
  cmd->add_option("--method", a->method,
                  "average: the mean of the fine-tunes; task-arithmetic: base + lambda * the sum of their changes; "
                  "monosoup: base + the mean of their changes, each cut to its best rank-r approximation (SVD)")
      ->capture_default_str();
  cmd->add_option("--rank", a->rank, "monosoup: rank r of each change (at most the smallest matrix side)")
      ->capture_default_str()->check(whole_in(1, 1 << 20));
  cmd->add_option("--lambda", a->lambda, "task-arithmetic: the weight of the summed changes")
      ->capture_default_str()->check(real_in(-1e6, 1e6));
  cmd->add_flag("--as-delta", a->as_delta, "Write the merge as a BitDelta delta of the base (serve it with --delta) instead of a model");
  cmd->add_option("--outtype", a->outtype, "Type of the merged matrices (vectors stay f32)")
      ->capture_default_str()->check(CLI::IsMember({"f32", "f16"}));
  cmd->add_option("--name", a->name, "general.name of the output (default: \"merge of\" the inputs)");
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code] { *exit_code = merge(*a); });
}

}  // namespace bitsplit::cli
