// `bitsplit convert` (source GGUF -> D + R planes in a bit-split GGUF, docs/FORMAT.md) and
// `bitsplit quantize` (the Q8_0 baseline): streaming writers over a WeightSource.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bitsplit/calibration.h"
#include "bitsplit/imatrix.h"
#include "bitsplit/quant.h"
#include "bitsplit/split_format.h"
#include "bitsplit/split_gguf.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

struct ConvertOptions {
  quant::SplitParams split;
  const ImportanceMatrix* imatrix = nullptr;
  std::string imatrix_path;  // recorded in the metadata
  // The importance file's input covariances (`imatrix --covariance`): when a projection's input
  // has one, its draft is fitted with error feedback (split_projection_gptq).
  const InputCovariances* covariances = nullptr;
  // With a limit: the output is a split set OUT-00001-of-0000N.gguf ... (OUT: out_path without
  // its .gguf), cut by these limits (split_gguf.h); without: one file at out_path.
  SplitLimits output_split;
  // > 0: each projection gets its own draft bits (2, 3 or 4; split.draft_bits is ignored) so the
  // draft's VRAM bits per weight stay within this budget (quant.h, "draft precision under a budget").
  double draft_bpw = 0.0;
  // The file format version to write: 3 (the default; the residual in the kernels' packed layout,
  // used from the memory map) or 2 (the residual as codes and scales, for older builds).
  uint32_t format_version = kSplitFormatVersion;
  // Calibrate the draft layer by layer on this text (calibration.h): every projection's draft is
  // fitted with error feedback against its input's second moments, computed block by block as
  // the writer reaches the block (the output's tensors are then written block by block). Unset:
  // no calibration (the fit of each weight alone; today's bytes). Ignored, with a note in the
  // report, where feedback does not apply (a 6-bit residual: quant::uses_error_feedback) or the
  // importance file brings its own covariances.
  std::optional<CalibrationOptions> calibration;
  // Told the calibration's tokens and memory plan before any block runs; an error it returns
  // stops the conversion (a front end prints the plan here).
  std::function<Status(const CalibrationTokens&, const CalibrationPlan&)> on_calibration_plan;
  // The most memory the calibration may plan for (0: the machine's available memory); a plan
  // over it is refused before anything is read.
  uint64_t memory_limit = 0;
  // Plan only: the model's shape, the calibration's tokens and memory plan (told as above, never
  // refused: ConvertReport::calibration_memory_available says what it would be checked against)
  // and the output's tensors and size, without reading a weight or writing a file. The size
  // counts each projection's draft at the budget (draft_bpw) when there is one.
  bool dry_run = false;
};

struct ConvertProgress {
  size_t tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;  // source tensor bytes
  std::string current;                       // tensor being converted
  bool measuring = false;                    // the draft budget's error measurement (before writing)
  // Set (total > 0) on the calibration's reports alone: blocks calibrated so far (the head last).
  int64_t calibration_blocks_done = 0, calibration_blocks_total = 0;
};

struct ConvertReport {
  uint64_t source_bytes = 0, output_bytes = 0;
  uint64_t largest_tensor_f32_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  int64_t split_weights = 0;  // weights in split projections
  std::map<std::string, int64_t> source_types;  // type name -> weights, over split projections
  std::string source_sha256;
  std::vector<std::string> output_paths;  // the file, or the parts of a split set
  double seconds = 0.0;
  double measure_seconds = 0.0;                  // of which measuring the draft budget's errors
  std::optional<quant::DraftAllocation> draft;   // with ConvertOptions::draft_bpw
  // The calibration, when one ran: its text and plan, and the draft's output error on it per
  // projection kind ("attn_q", "ffn_down", "output"): sum over sampled rows of (w - d)ᵀ H (w - d)
  // and of wᵀ H w, whose ratio is the draft's relative squared output error on those inputs.
  std::optional<CalibrationTokens> calibration;
  CalibrationPlan calibration_plan;
  std::string calibration_skipped;  // why a requested calibration did not run (empty: it ran, or none was asked)
  std::map<std::string, std::pair<double, double>> draft_output_error;
  // The memory a calibration plan is checked against (ConvertOptions::memory_limit, or what the
  // machine has available); 0: unknown.
  uint64_t calibration_memory_available = 0;
  // Of output_bytes: the draft planes (the GPU's share) and the residual planes (the host's).
  uint64_t draft_bytes = 0, residual_bytes = 0;
};

// Converts `source` into a bit-split GGUF at out_path (written under a temporary name and
// renamed at the end). Streams tensor by tensor; rows are quantised in parallel.
Status convert_model(const WeightSource& source, const std::string& out_path, const ConvertOptions& options,
                     const std::function<void(const ConvertProgress&)>& on_progress, ConvertReport* report);

// Rewrites a bit-split model of format 1 or 2 as format 3 (docs/FORMAT.md): the same planes,
// each residual packed into the kernels' layout, every other tensor and key as it was; no fit.
// `report` gets the sizes, the time, the outputs and the source's hash. Errors: not a bit-split
// model, already format 3, residual planes that disagree with the metadata.
Status upgrade_split_model(const WeightSource& source, const std::string& out_path, const SplitLimits& output_split,
                           const std::function<void(size_t done, size_t total)>& on_progress, ConvertReport* report);

// `bitsplit quantize`: a plain Q8_0 model, the llama.cpp-style baseline we measure against.
// Projections whose rows are a multiple of 32 become Q8_0 (quant::quantize_q8_0_ref, as
// llama.cpp's quantize does); everything else is copied as f32. Streams tensor by tensor.
Status quantize_model_q8_0(const WeightSource& source, const std::string& out_path,
                           const std::function<void(size_t done, size_t total)>& on_progress, uint64_t* output_bytes);

}  // namespace bitsplit

