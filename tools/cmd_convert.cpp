// `bitsplit convert` and `bitsplit imatrix`: make a bit-split model, and the importance
// statistics that can steer it.
#include <cstdio>
#include <memory>
#include <optional>

#include "bitsplit/convert.h"
#include "bitsplit/quality.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/vram_plan.h"
#include "commands.h"
#include "option_checks.h"
#include "output_path.h"
#include "progress.h"

namespace bitsplit::cli {
namespace {

// The draft budget of a default (calibrated) conversion, in VRAM bits per weight.
constexpr double kDefaultCalibratedDraftBpw = 3.5;

struct ConvertArgs {
  std::string in, out, imatrix;
  int group = 64, residual = 8, draft_bits = 2, threads = 0;
  bool draft_bits_given = false;
  double draft_bpw = 0.0;
  std::string fit = "optimized";
  std::string split_max_size;
  uint64_t split_max_tensors = 0;
  uint32_t format_version = kSplitFormatVersion;
  std::string calibration;  // a text file; empty: the built-in text
  bool no_calibration = false;
  int64_t calibration_tokens = CalibrationOptions{}.max_tokens;
  bool dry_run = false;
};

// --split-max-size / --split-max-tensors as limits on the output's parts (none: one file).
Result<SplitLimits> output_limits(const ConvertArgs& a) {
  SplitLimits limits;
  if (!a.split_max_size.empty()) {
    auto b = parse_byte_size(a.split_max_size);
    if (!b) return Status::error("--split-max-size: " + b.status().message());
    if (*b == 0) return Status::error("--split-max-size: a part must hold some bytes");
    limits.max_bytes = *b;
  }
  limits.max_tensors = a.split_max_tensors;
  return limits;
}

// A bit-split file of an older format: rewritten as the current one (same planes), nothing fitted.
int upgrade(const WeightSource& source, const ConvertArgs& a, uint32_t version) {
  if (a.group != 64 || a.residual != 8 || a.draft_bits != 2 || a.draft_bpw > 0.0 || !a.imatrix.empty() ||
      a.fit != "optimized" || a.format_version != kSplitFormatVersion || !a.calibration.empty()) {
    return report_error(source.path() + " is bit-split format " + std::to_string(version) +
                        ": convert only rewrites it as format " + std::to_string(kSplitFormatVersion) +
                        " (the same planes); --group, --residual, --draft-bits, --draft-bpw, --imatrix, --fit and "
                        "--format-version apply to converting the original");
  }
  auto limits = output_limits(a);
  if (!limits) return report_error(limits.status().message());
  std::fprintf(stderr, "%s is bit-split format %u: rewriting it as format %u (the same planes, the residual in the "
               "kernels' layout; nothing is fitted)\n", source.path().c_str(), version, kSplitFormatVersion);
  ProgressBar bar("upgrade");
  ConvertReport report;
  const Status st = upgrade_split_model(source, a.out, *limits, [&](size_t done, size_t total) {
    bar.update(double(done), double(total));
  }, &report);
  if (!st) return report_error(st.message());
  std::fprintf(stderr, "wrote %s: %.2f MiB from %.2f MiB in %.1f s (%.0f MB/s written)\n",
               report.output_paths.size() > 1 ? (report.output_paths.front() + " ..").c_str() : a.out.c_str(),
               double(report.output_bytes) / (1 << 20), double(report.source_bytes) / (1 << 20), report.seconds,
               report.seconds > 0 ? double(report.output_bytes) / 1e6 / report.seconds : 0.0);
  return 0;
}

// The draft's relative output error on the calibration text, per projection kind and overall.
void print_draft_output_error(const ConvertReport& report) {
  if (report.draft_output_error.empty()) return;
  double err = 0.0, ref = 0.0;
  std::string parts;
  for (const auto& [kind, e] : report.draft_output_error) {
    err += e.first;
    ref += e.second;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.4f", parts.empty() ? "" : ", ", kind.c_str(), e.second > 0 ? e.first / e.second : 0.0);
    parts += buf;
  }
  std::fprintf(stderr, "draft: relative squared output error on the calibration text %.4f (%s)\n",
               ref > 0 ? err / ref : 0.0, parts.c_str());
}

// The default calibration (or --calibration FILE), and its plan printed before it starts.
void calibrate(const ConvertArgs& a, ConvertOptions& options) {
  CalibrationOptions calibration;
  calibration.path = a.calibration;
  calibration.max_tokens = a.calibration_tokens;
  options.calibration = calibration;
  options.on_calibration_plan = [](const CalibrationTokens& t, const CalibrationPlan& p) {
    std::fprintf(stderr,
                 "calibration: %s text (sha256 %.12s…), %lld tokens in %zu sequences from %lld segments%s\n"
                 "calibration plan: peak ~%.0f MiB = block weights %.0f + token stream %.0f + activations %.0f + "
                 "moments %.0f + fits in flight %.0f MiB (docs/FORMAT.md)\n",
                 t.name.c_str(), t.sha256.c_str(), (long long)t.tokens, t.sequences.size(), (long long)t.segments,
                 t.chat_segments == 0 ? ""
                 : t.chat_template    ? " (chat turns rendered with the model's template)"
                                      : " (the model has no chat template: chat turns as plain lines)",
                 double(p.total()) / (1 << 20), double(p.block_weights) / (1 << 20), double(p.stream) / (1 << 20),
                 double(p.activations) / (1 << 20), double(p.moments) / (1 << 20), double(p.fits) / (1 << 20));
    return Status::ok();
  };
}

// --dry-run: what the conversion would need and write, from the plan alone.
int print_dry_run(const ConvertArgs& a, const ConvertReport& r) {
  auto gib = [](uint64_t b) { return double(b) / double(uint64_t{1} << 30); };
  std::string types;
  for (const auto& [type, n] : r.source_types) types += (types.empty() ? "" : ", ") + type;
  std::fprintf(stderr, "dry run of %s: nothing read or written\n", a.in.c_str());
  std::fprintf(stderr, "  source: %.2f GiB of tensors; %.2f B weights in split projections (%s)\n",
               gib(r.source_bytes), double(r.split_weights) / 1e9, types.c_str());
  std::fprintf(stderr, "  output: ~%.2f GiB = draft planes %.2f GiB (the GPU's share) + residual planes %.2f GiB (RAM) "
               "+ %.2f GiB of other tensors\n", gib(r.output_bytes), gib(r.draft_bytes), gib(r.residual_bytes),
               gib(r.output_bytes - r.draft_bytes - r.residual_bytes));
  std::fprintf(stderr, "  largest tensor in f32: %.2f GiB (each fit in flight holds ~7 bytes per weight)\n",
               gib(r.largest_tensor_f32_bytes));
  if (!r.calibration_skipped.empty()) std::fprintf(stderr, "  not calibrated: %s\n", r.calibration_skipped.c_str());
  if (r.calibration) {
    const uint64_t need = r.calibration_plan.total(), have = r.calibration_memory_available;
    std::fprintf(stderr, "  calibration: peak ~%.2f GiB of %.2f GiB available: %s\n", gib(need), gib(have),
                 have == 0 || need <= have ? "fits"
                                           : "would be refused (fewer --calibration-tokens, more memory, or "
                                             "--no-calibration)");
  }
  return 0;
}

int convert(const ConvertArgs& a) {
  if (a.out.empty() && !a.dry_run) {
    return report_error("convert: the output is required (convert SOURCE OUTPUT.gguf; or --dry-run to plan only)");
  }
  if (Status st = check_output_path(a.out.empty() ? "-" : a.out, {a.in, a.imatrix, a.calibration}, "output");
      !a.out.empty() && !st) {
    return report_error(st.message());
  }
  const auto threads = limit_threads(a.threads);
  auto source = open_weights(a.in);
  if (!source) return report_error(source.status().message());
  if (auto split = read_split_format((*source)->metadata()); split && split->has_value() && !(*split)->packed_residual()) {
    return upgrade(**source, a, (*split)->version);
  }
  auto limits = output_limits(a);
  if (!limits) return report_error(limits.status().message());
  ConvertOptions options;
  options.output_split = *limits;
  options.split.group = a.group;
  options.split.residual_bits = a.residual;
  options.split.draft_bits = a.draft_bits;
  options.split.fit = a.fit == "minmax" ? quant::DraftFit::kMinMax : quant::DraftFit::kOptimized;
  options.draft_bpw = a.draft_bpw;
  // The default draft: calibrated, under the default budget (docs/QUALITY.md, "The draft's
  // budget with calibration"); --no-calibration or --draft-bits keep the uniform draft.
  if (!a.no_calibration && !a.draft_bits_given && a.draft_bpw == 0.0 && quant::uses_error_feedback(options.split)) {
    options.draft_bpw = kDefaultCalibratedDraftBpw;
  }
  options.format_version = a.format_version;
  ImatrixFile imatrix;
  if (!a.imatrix.empty()) {
    auto m = read_imatrix_file(a.imatrix);
    if (!m) return report_error(m.status().message());
    imatrix = std::move(*m);
    options.imatrix = &imatrix.columns;
    options.imatrix_path = a.imatrix;
    if (!imatrix.covariances.empty()) {
      options.covariances = &imatrix.covariances;
      if (quant::uses_error_feedback(options.split)) {
        std::fprintf(stderr, "draft: fitted with error feedback (GPTQ) from the input covariances of %zu projections\n",
                     imatrix.covariances.size());
      } else {
        std::fprintf(stderr, "note: the importance file's covariances are not used with a %d-bit residual (its draft "
                             "is fitted for draft + residual; docs/QUALITY.md)\n", options.split.residual_bits);
      }
    }
  }
  if (!a.no_calibration) calibrate(a, options);
  options.dry_run = a.dry_run;
  ProgressBar measure_bar("measure draft errors"), bar("convert");
  ConvertReport report;
  int64_t calibrated = 0, blocks = 0;
  const Status st = convert_model(**source, a.out, options, [&](const ConvertProgress& p) {
    if (p.calibration_blocks_total > 0) {
      calibrated = p.calibration_blocks_done, blocks = p.calibration_blocks_total;
      return;
    }
    const std::string label = blocks > 0 ? p.current + " [calibrated " + std::to_string(calibrated) + "/" +
                                               std::to_string(blocks) + " blocks]"
                                         : p.current;
    (p.measuring ? measure_bar : bar).update(double(p.tensors_done), double(p.tensors_total), double(p.bytes_done), label);
  }, &report);
  if (!st) return report_error(st.message());
  if (a.dry_run) return print_dry_run(a, report);
  if (!report.calibration_skipped.empty()) std::fprintf(stderr, "note: not calibrated: %s\n", report.calibration_skipped.c_str());
  print_draft_output_error(report);
  std::string types;
  for (const auto& [type, n] : report.source_types) types += (types.empty() ? "" : ", ") + type;
  const std::string written = report.output_paths.size() > 1
                                  ? report.output_paths.front() + " .. " + report.output_paths.back() + " (" +
                                        std::to_string(report.output_paths.size()) + " parts; run the first)"
                                  : a.out;
  std::string draft = std::to_string(a.draft_bits) + "-bit draft";
  if (report.draft) draft = describe_draft_bits(report.draft->bits, report.draft->bits_per_weight);
  std::fprintf(stderr, "wrote %s: %.2f MiB from %.2f MiB in %.1f s (group %d, %s, %d-bit residual)\n",
               written.c_str(), double(report.output_bytes) / (1 << 20), double(report.source_bytes) / (1 << 20),
               report.seconds, a.group, draft.c_str(), a.residual);
  if (report.seconds > 0.0) {
    // The split projections in f32 (what the fit reads), whatever the source file's own types.
    std::fprintf(stderr, "speed: %.0f MB/s of f32 projections, %.0f MB/s written\n",
                 double(report.split_weights) * 4.0 / 1e6 / report.seconds, double(report.output_bytes) / 1e6 / report.seconds);
  }
  if (report.draft) std::fprintf(stderr, "draft budget: measuring the errors took %.1f s\n", report.measure_seconds);
  std::fprintf(stderr, "split projections: %lld weights, source types: %s\n", (long long)report.split_weights,
               types.c_str());
  if (types.find("F32") == std::string::npos && types.find("F16") == std::string::npos &&
      types.find("BF16") == std::string::npos) {
    std::fprintf(stderr, "note: the source weights are quantised (%s); D + R reproduces the dequantised source "
                 "weights, and `bitsplit eval` compares against those\n", types.c_str());
  }
  std::fprintf(stderr, "peak memory (RSS): %.1f MiB; largest tensor in f32: %.1f MiB\n",
               double(report.peak_rss_bytes) / (1 << 20), double(report.largest_tensor_f32_bytes) / (1 << 20));
  std::fprintf(stderr, "source sha256: %s\n", report.source_sha256.c_str());
  return 0;
}

struct ImatrixArgs {
  std::string model, text, out;
  int ctx = 128;
  int threads = 0;
  bool covariance = false;
};

int imatrix(const ImatrixArgs& a) {
  if (Status st = check_output_path(a.out, {a.model, a.text}, "-o"); !st) return report_error(st.message());
  const auto threads = limit_threads(a.threads);
  auto loaded = load_model(a.model);
  if (!loaded) return report_error(loaded.status().message());
  auto text = read_text_file(a.text);
  if (!text) return report_error(text.status().message());
  const auto tokens = loaded->tokenizer->encode(*text, {.add_special = false});
  ProgressBar bar("imatrix");
  int64_t n_tokens = 0;
  InputCovariances covariances;
  auto m = collect_imatrix(loaded->model, tokens, a.ctx, loaded->tokenizer->vocab().bos,
                           [&](int64_t done, int64_t total) { bar.update(double(done), double(total)); }, &n_tokens,
                           a.covariance ? &covariances : nullptr);
  if (!m) return report_error(m.status().message());
  if (Status st = write_imatrix(*m, a.covariance ? &covariances : nullptr, n_tokens, a.text, a.out); !st) {
    return report_error(st.message());
  }
  std::fprintf(stderr, "wrote %s: %zu weights%s, %lld tokens\n", a.out.c_str(), m->size(),
               a.covariance ? " with their input covariances" : "", (long long)n_tokens);
  return 0;
}

struct QuantizeArgs {
  std::string in, out, type = "q8_0";
};

int quantize(const QuantizeArgs& a) {
  if (Status st = check_output_path(a.out, {a.in}, "output"); !st) return report_error(st.message());
  auto source = open_weights(a.in);
  if (!source) return report_error(source.status().message());
  ProgressBar bar("quantize");
  uint64_t bytes = 0;
  Status st = quantize_model_q8_0(**source, a.out, [&](size_t d, size_t t) { bar.update(double(d), double(t)); }, &bytes);
  if (!st) return report_error(st.message());
  std::fprintf(stderr, "wrote %s: %.1f MiB, projections Q8_0 (run it with `bitsplit run`: the Q8_0 kernel, the "
               "llama.cpp-style baseline)\n", a.out.c_str(), double(bytes) / (1 << 20));
  return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Split a model into a 2-bit draft plane and a 6/8-bit residual plane "
                                                "(a bit-split file of an older format: rewrite it in the current one)");
  cmd->add_option("input", a->in, "Source model (.gguf: F32/F16/BF16 or Q4_0..Q8_0, Q2_K..Q6_K; or a Hugging Face folder: "
                                  "config.json, BF16/F16/F32 safetensors, tokenizer.json)")
      ->required()->check(CLI::ExistingPath);
  cmd->add_option("output", a->out, "Output .gguf (written under a temporary name, renamed when complete)");
  cmd->add_flag("--dry-run", a->dry_run,
                "Print the plan (the calibration's memory, the output's size: draft and residual planes) and stop: "
                "no weight is read, nothing is written");
  cmd->add_option("--group", a->group, "Weights per group along the input dimension")
      ->capture_default_str()->check(CLI::IsMember({32, 64, 128}));
  cmd->add_option("--residual", a->residual, "Residual plane bits")->capture_default_str()->check(CLI::IsMember({6, 8}));
  auto* bits = cmd->add_option_function<int>("--draft-bits", [a](int b) { a->draft_bits = b, a->draft_bits_given = true; },
                                              "Draft plane bits of every projection (default: a calibrated mix within "
                                              "--draft-bpw " + std::to_string(kDefaultCalibratedDraftBpw).substr(0, 3) +
                                              "; with --no-calibration, 2)")
                   ->check(CLI::IsMember({2, 3, 4}));
  cmd->add_option("--draft-bpw", a->draft_bpw,
                  "Draft budget in VRAM bits per weight (codes, scales and offsets): each projection gets 2, 3 or 4 "
                  "bits where they cut the draft's error most (2.5 = all 2-bit at group 64, 4.5 = all 4-bit)")
      ->check(real_above(0.0))->excludes(bits)->type_name("BITS");
  cmd->add_option("--fit", a->fit, "Draft scale/offset fit")->capture_default_str()
      ->check(CLI::IsMember({"optimized", "minmax"}));
  cmd->add_option("--imatrix", a->imatrix, "Importance matrix from `bitsplit imatrix` (with --covariance: the draft is fitted with error feedback)")->check(CLI::ExistingFile);
  cmd->add_option("--split-max-size", a->split_max_size,
                  "Write a split set OUTPUT-00001-of-0000N.gguf ... (llama.cpp's gguf-split naming) with at most this "
                  "much tensor data per part (e.g. 4G); a larger tensor gets a part of its own")
      ->type_name("SIZE");
  cmd->add_option("--split-max-tensors", a->split_max_tensors, "Write a split set with at most this many tensors per part")
      ->check(whole_in(1, 1 << 30));
  cmd->add_option("--format-version", a->format_version,
                  "Bit-split file format to write: 3 stores the residual in the CPU kernels' layout, used from the file "
                  "without a copy; 2 for builds that predate it")
      ->capture_default_str()->check(CLI::IsMember({2, 3}));
  auto* calibration = cmd->add_option("--calibration", a->calibration,
                  "Calibrate the draft on this text (UTF-8; or .jsonl segments as engine/convert/calibration/ has "
                  "them) instead of the built-in mix of prose, code, chat and non-English text")
      ->check(CLI::ExistingFile)->type_name("FILE");
  cmd->add_flag("--no-calibration", a->no_calibration,
                "Fit each weight alone (fast; the draft's quality as before calibration existed)")
      ->excludes(calibration);
  cmd->add_option("--calibration-tokens", a->calibration_tokens,
                  "Calibration tokens, spread evenly over the text's segments (time and memory grow with them)")
      ->capture_default_str()->check(whole_in(kMinCalibrationTokens, 1 << 20));
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code] { *exit_code = convert(*a); });

  auto b = std::make_shared<ImatrixArgs>();
  CLI::App* im = app.add_subcommand("imatrix", "Collect per-column importance (mean squared activation) over a text");
  im->add_option("model", b->model, "Model (.gguf)")->required()->check(CLI::ExistingFile);
  im->add_option("--text", b->text, "Text file")->required()->check(CLI::ExistingFile);
  im->add_option("-o,--output", b->out, "Output file (.gguf)")->required();
  im->add_option("--ctx", b->ctx, "Tokens per window")->capture_default_str()->check(whole_in(2, 1 << 20));
  im->add_option("-t,--threads", b->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  im->add_flag("--covariance", b->covariance,
               "Also store each projection input's covariance (in^2 floats per input; ~2.4 GB for a 0.5B model): "
               "convert and eval then fit the draft with error feedback (GPTQ)");
  im->callback([b, exit_code] { *exit_code = imatrix(*b); });

  auto q = std::make_shared<QuantizeArgs>();
  CLI::App* qc = app.add_subcommand("quantize", "Write a plain Q8_0 model (the baseline speculative decoding is compared with)");
  qc->add_option("input", q->in, "Source model (.gguf)")->required()->check(CLI::ExistingFile);
  qc->add_option("output", q->out, "Output .gguf")->required();
  qc->add_option("--type", q->type, "Target type")->capture_default_str()->check(CLI::IsMember({"q8_0"}));
  qc->callback([q, exit_code] { *exit_code = quantize(*q); });
}

}  // namespace bitsplit::cli
