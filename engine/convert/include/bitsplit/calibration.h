// The draft's calibration inside `bitsplit convert`: a text (the built-in mix in
// engine/convert/calibration/, or the user's) run through the source model one block at a time,
// each block's projection inputs summed into second moments just before its projections are
// fitted with error feedback (quant::split_matrix_gptq), then dropped. No covariance file, and
// memory bounded by one block (docs/FORMAT.md, "Calibration layer by layer").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bitsplit/imatrix.h"
#include "bitsplit/model.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

struct CalibrationOptions {
  std::string path;              // the text file; empty: the built-in text
  int64_t max_tokens = 4096;     // tokens taken, spread evenly over the text's segments
  int32_t ctx = 512;             // tokens per sequence (each starts with BOS when the vocabulary adds one)
  // Columns per diagonal block of each input's second moments (a whole number of groups; 0:
  // whole matrices). Errors are fed back within a block (quant::split_matrix_gptq).
  int64_t covariance_block = 2048;
};

// Fewer tokens than this is refused: the moments would say little about the model's inputs.
inline constexpr int64_t kMinCalibrationTokens = 256;

// The calibration text as the model reads it.
struct CalibrationTokens {
  std::vector<std::vector<int32_t>> sequences;
  int64_t tokens = 0;
  std::string sha256;  // of the text file's bytes (the built-in file's without one)
  std::string name;    // the path, or "built-in"
  int64_t segments = 0, chat_segments = 0;
  bool chat_template = false;  // chat segments were rendered with the model's own template
};

// The built-in calibration text (engine/convert/calibration/calibration.jsonl, compiled in).
std::string_view builtin_calibration_text();

// Reads and tokenizes the calibration text with the source's tokenizer. A .jsonl file in the
// built-in format (one segment per line: {"text": ...} or chat {"turns": [{role, content}]}) has
// its chat turns rendered with the model's chat template when it has one ("role: content"
// lines otherwise); any other file is plain UTF-8 text. Segments are truncated evenly so the
// tokens fit max_tokens. Errors: an empty, binary (NUL bytes) or non-UTF-8 text, a malformed
// .jsonl line, fewer than kMinCalibrationTokens tokens.
Result<CalibrationTokens> calibration_tokens(const WeightSource& source, const CalibrationOptions& options);

// What a layer-by-layer calibration holds at its peak, in bytes (docs/FORMAT.md gives the formula).
struct CalibrationPlan {
  uint64_t block_weights = 0;  // one block's weights in f32 (the calibration's forward)
  uint64_t stream = 0;         // the residual stream of every calibration token
  uint64_t activations = 0;    // one sequence's activations inside a block, and its KV cache
  uint64_t moments = 0;        // two blocks' second moments (the block fitted and the one ahead)
  uint64_t fits = 0;           // the projections being fitted at once (weights, working copy, planes)
  uint64_t total() const { return block_weights + stream + activations + moments + fits; }
};
CalibrationPlan plan_calibration(const ModelConfig& config, int64_t tokens, int32_t ctx, int64_t covariance_block,
                                 int fits_in_flight);

// Second moments of each projection's input, computed block by block on demand: asking for a
// weight of block i runs the calibration tokens through block i (from the stream block i - 1
// left), and the moments of blocks before i - 1 are dropped. Blocks are asked for in order
// (convert's calibrated plan is block by block); asking for a dropped block is an error.
// Thread-safe: the fits ahead of the writer ask concurrently.
class LayerCalibration {
 public:
  static Result<std::unique_ptr<LayerCalibration>> start(const WeightSource& source, const ModelConfig& config,
                                                         CalibrationTokens tokens, const CalibrationOptions& options);
  // The second moments E[x xᵀ] of `weight`'s input ("blk.3.attn_k.weight" reads attn_q's;
  // "output.weight": the head's, after the last block), or null for a weight no moments are
  // kept for (a mixture of experts' experts). Errors: the source's, or a block already dropped.
  Result<std::shared_ptr<const Covariance>> covariance(const std::string& weight);
  // Called after each block (and the head) with (done, total): total = n_layers + 1.
  void on_block(std::function<void(int64_t done, int64_t total)> f) { on_block_ = std::move(f); }
  const CalibrationTokens& tokens() const { return tokens_; }
  int64_t covariance_block() const { return options_.covariance_block; }

 private:
  LayerCalibration(const WeightSource& source, const ModelConfig& config, CalibrationTokens tokens,
                   const CalibrationOptions& options)
      : source_(source), config_(config), tokens_(std::move(tokens)), options_(options) {}
  Status embed();
  Status run_block(int64_t layer);
  Status run_head();
  void accumulate(const std::string& weight, const float* x, int64_t rows, int64_t cols);
  void finish_block(int64_t layer);

  const WeightSource& source_;
  const ModelConfig config_;
  const CalibrationTokens tokens_;
  const CalibrationOptions options_;
  std::function<void(int64_t, int64_t)> on_block_;
  std::mutex mu_;
  int64_t next_ = 0;                         // the next block to run (n_layers: the head)
  std::vector<std::vector<float>> stream_;   // per sequence: the residual stream entering block next_
  std::optional<KvCache> cache_;             // sized for the longest sequence, made at the first block
  // The block being run: per weight, its input's width and the upper triangles summed.
  std::map<std::string, std::pair<int64_t, std::vector<float>>> sums_;
  std::map<int64_t, std::map<std::string, std::shared_ptr<const Covariance>>> done_;  // kept blocks
};

}  // namespace bitsplit
