// A K-Merge pool: LoRA adapters of one base kept under a storage budget. An adapter that fits
// is admitted as it is; when it does not, it is compared with every member by the cosine
// similarity of their task vectors and merged into the most similar one by orthogonal-
// projection continual merging (OPCM); the merge replaces that member only if the merged
// adapter still serves every task it now holds — the mean KL from each task's own adapter to
// the merge, on that task's calibration text, at most a threshold. Otherwise the adapter is
// refused. The budget is never exceeded; every decision is reported.
//
// OPCM (Tang et al. 2025, "Merging Models on the Fly Without Retraining"), per matrix: with the
// member's merged task vector τ = U·diag(σ)·Vᵀ and the new task vector Δ, the part of Δ in the
// member's dominant directions is removed — P = Uᵀ·Δ·V with its diagonal (where σ > 0) and its leading
// r_α × r_α block zeroed (r_α: the fewest singular values whose sum exceeds α of the total) —
// and the rest, U·P·Vᵀ, is added to the member's unscaled sum S; the merge is S / λ with λ
// chosen so that ‖S / λ‖ is the mean norm of the task vectors merged so far. The merged task
// vector is stored as a LoRA pair of rank max(member's, new adapter's) (its truncated SVD).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bitsplit/lora_format.h"
#include "bitsplit/merge.h"
#include "bitsplit/model.h"
#include "bitsplit/status.h"
#include "bitsplit/variant.h"

namespace bitsplit {

// One matrix's change ΔW = U·V (U: out x rank, V: rank x in, row-major; the adapter's scale
// folded into U).
struct LowRankDelta {
  int64_t out = 0, in = 0, rank = 0;
  std::vector<float> up, down;
  std::vector<float> dense() const;  // [out x in]
};

// An adapter as the pool holds it: its low-rank changes by weight name.
struct PoolAdapter {
  std::string name;
  std::map<std::string, LowRankDelta> weights;
  // Stored bytes: the factors in f32.
  uint64_t bytes() const;
  // The variant of the base it stands for.
  Result<std::shared_ptr<const Variant>> variant(const Model& base) const;
};
// A LoRA file's factors at a user scale (scale · alpha / rank folded in).
Result<PoolAdapter> read_pool_adapter(const LoraFile& lora, float scale, std::string name);

// OPCM's projection of one matrix: Δ less its components in τ's dominant directions. With
// τ = U·diag(σ)·Vᵀ (thin SVD), P = Uᵀ·Δ·V loses its leading r × r block (r: the fewest
// singular values whose sum exceeds `alpha` of the total; 0 for τ = 0) and its diagonal where
// σ > 1e-5·σ₁ (the directions τ has); returns Δ − U·(the removed entries)·Vᵀ ([rows x cols], as Δ).
std::vector<float> opcm_project(const std::vector<float>& delta, const ThinSvd& tau, double alpha);

// cos(ΔA, ΔB) over all weights, the task vectors flattened (a weight only one of them changes
// counts in its norm only). 0 when either is zero.
double task_vector_cosine(const PoolAdapter& a, const PoolAdapter& b);

struct AdapterPoolOptions {
  uint64_t budget_bytes = 0;
  double kl_threshold = 0.05;  // mean KL (nats/token) each task may lose to the merge
  double alpha = 0.5;          // OPCM's share of the singular-value sum whose directions a merge keeps clear
  int32_t ctx = 128;           // calibration windows ([BOS] + ctx - 1 tokens)
  int64_t max_tokens = 512;    // calibration predictions per task
  int32_t bos = -1;
};

struct PoolDecision {
  enum class Kind { kAdmitted, kMerged, kRefused };
  Kind kind = Kind::kRefused;
  std::string name, member;  // the adapter; the member it was compared with (merged into)
  double cosine = 0;
  double worst_kl = 0;       // the largest of the tasks' KLs to the merge
  std::string worst_task;
  bool over_budget = false;  // refused because the merge would not fit (its quality was fine)
  uint64_t used_bytes = 0;   // after the decision
  std::string describe() const;  // one log line
};

class AdapterPool {
 public:
  // `base` is the model the adapters ride on (any form: f32 or bit-split; KLs are measured on
  // its default pass, the reference and the merge alike).
  AdapterPool(const Model& base, AdapterPoolOptions options);

  // Asks for `adapter` to be served. `calibration`: tokens of the task's own text (no BOS);
  // `reference`: the task's own adapter as first given (kept by the caller, e.g. re-read from
  // its file), for the quality checks of later merges. Errors: a name already in the pool, an
  // adapter larger than the whole budget, too few calibration tokens.
  Result<PoolDecision> request(PoolAdapter adapter, std::vector<int32_t> calibration,
                               std::function<Result<PoolAdapter>()> reference);

  uint64_t used_bytes() const { return used_; }
  const AdapterPoolOptions& options() const { return options_; }
  // Names served and, for each, the member (stored adapter) that serves it.
  std::map<std::string, std::string> served() const;
  size_t members() const { return members_.size(); }
  // The stored adapter serving `name`, or null.
  const PoolAdapter* adapter_of(const std::string& name) const;

 private:
  // Per weight: the OPCM scale λ of the stored merge and its constituents' norm statistics.
  struct WeightStats {
    double lambda = 1.0, norm_sum = 0.0;
    int64_t count = 0;
  };
  struct Member {
    std::vector<std::string> names;
    PoolAdapter adapter;
    std::map<std::string, WeightStats> stats;
  };
  struct Task {
    std::vector<int32_t> calibration;
    std::function<Result<PoolAdapter>()> reference;
  };
  Result<Member> opcm_merge(const Member& m, const PoolAdapter& a) const;
  Result<double> task_kl(const Task& task, const Variant& merged) const;

  const Model& base_;
  AdapterPoolOptions options_;
  std::vector<Member> members_;
  std::map<std::string, Task> tasks_;
  uint64_t used_ = 0;
};

}  // namespace bitsplit
