// `bitsplit merge`: several fine-tunes of one base (full models, BitDelta deltas or LoRA
// adapters) merged into one model, tensor by tensor, by their task vectors Δ_i = W_i − W_base:
//   average          W = W_base + (1/k)·Σ Δ_i          (the mean of the fine-tunes)
//   task-arithmetic  W = W_base + λ·Σ Δ_i
//   monosoup         W = W_base + (1/k)·Σ τ_i, τ_i the rank-r truncated SVD U_r·diag(S_r)·V_rᵀ of
//                    Δ_i for every matrix (vectors such as norms are averaged as they are)
// Also the building blocks the K-Merge pool uses: task vectors read from any kind of input,
// and the truncated SVD (LAPACK's gesdd through LAPACKE).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

enum class MergeMethod { kAverage, kTaskArithmetic, kMonoSoup };
// "average", "task-arithmetic", "monosoup"; an error lists them.
Result<MergeMethod> parse_merge_method(std::string_view name);
const char* merge_method_name(MergeMethod method);

// One fine-tune seen as its change to the base, tensor by tensor.
class TaskVector {
 public:
  virtual ~TaskVector() = default;
  // Opens a full fine-tuned model, a BitDelta delta or a LoRA adapter and checks it against
  // `base` (architecture, shapes, the delta's base hash). Errors name the file.
  static Result<std::unique_ptr<TaskVector>> open(const std::string& path, const WeightSource& base);
  // Δ for the base tensor `t` ([rows x cols] as the base stores it); empty when this input does
  // not change it.
  virtual Result<std::vector<float>> delta(const gguf::TensorInfo& t, const std::vector<float>& base_w) const = 0;
  const std::string& path() const { return path_; }
  // "model", "BitDelta", "LoRA".
  virtual const char* kind() const = 0;
  // A hash of the input file (to refuse merging a file with itself).
  const std::string& sha256() const { return sha256_; }

 protected:
  std::string path_, sha256_;
};

// A thin SVD m = U·diag(S)·Vt of an [rows x cols] row-major matrix, k = min(rows, cols):
// U [rows x k], S [k] descending, Vt [k x cols], all row-major (LAPACK sgesdd).
struct ThinSvd {
  int64_t rows = 0, cols = 0, k = 0;
  std::vector<float> u, s, vt;
};
Result<ThinSvd> thin_svd(const std::vector<float>& m, int64_t rows, int64_t cols);

// The best rank-r approximation of m ([rows x cols], row-major) in the Frobenius norm:
// U_r·diag(S_r)·V_rᵀ from a thin SVD. `energy_kept` (optional): Σ_{k<r} s_k² / Σ s_k² (1 for a
// zero matrix). An error for rank < 1 or rank > min(rows, cols), or when LAPACK fails.
Result<std::vector<float>> truncated_svd(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t rank,
                                         double* energy_kept = nullptr);

struct MergeOptions {
  MergeMethod method = MergeMethod::kMonoSoup;
  int64_t rank = 16;          // monosoup
  float lambda = 1.0f;        // task-arithmetic
  bool f16 = false;           // matrices written as F16 (vectors stay F32)
  std::string name;           // general.name of the output (default: "merge of ...")
};

struct MergeProgress {
  int64_t tensors_done = 0, tensors_total = 0;
  std::string current;
};

struct MergeReport {
  int64_t tensors = 0, changed = 0, svd_matrices = 0;
  double mean_energy_kept = 1.0;  // monosoup: mean over the (input, matrix) pairs
  double min_energy_kept = 1.0;
  uint64_t output_bytes = 0;
  double seconds = 0;
};

// Writes the merged model to out_path (temporary name, renamed at the end): the base's
// metadata and tokenizer with every tensor merged (one input: that fine-tune applied, cut to
// rank r by monosoup; e.g. a LoRA materialised). Errors: no inputs, an input that is the base
// or repeats another, an input for another model, a rank larger than a
// matrix, a non-finite λ.
Status merge_models(const WeightSource& base, const std::vector<std::string>& inputs, const std::string& out_path,
                    const MergeOptions& options, MergeReport* report,
                    const std::function<void(const MergeProgress&)>& on_progress = nullptr);

}  // namespace bitsplit
