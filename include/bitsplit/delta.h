// BitDelta variants: `bitsplit delta` (a fine-tuned model stored as 1-bit sign planes plus
// scales relative to its base), reading delta files back and checking them against a base,
// and a byte-budgeted cache of loaded variants.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

inline constexpr uint32_t kDeltaFormatVersion = 1;
inline constexpr const char* kDeltaFileType = "bitsplit.delta";

// Tensor names of a sign-plane delta for the weight `name` ("blk.3.ffn_up.weight" ->
// "blk.3.ffn_up.delta_signs" / ".delta_alpha").
std::string delta_signs_name(const std::string& weight_name);
std::string delta_alpha_name(const std::string& weight_name);

struct DeltaOptions {
  quant::DeltaAlpha alpha = quant::DeltaAlpha::kRow;
  // Scales to store instead of mean |Δ| (by weight name; from distill_delta_scales), and how
  // they were fitted (recorded as bitsplit.delta.alpha_fit).
  const std::map<std::string, std::vector<float>>* alpha_override = nullptr;
  std::string alpha_fit;
};

struct DeltaReport {
  int64_t sign_tensors = 0, full_tensors = 0, omitted_tensors = 0;
  int64_t sign_weights = 0;  // weights covered by sign planes
  uint64_t output_bytes = 0;  // tensor data written
  std::string base_sha256, finetuned_sha256;
  double seconds = 0.0;
};

// Writes the delta of `finetuned` against `base` to out_path (temporary name, renamed at the
// end), tensor by tensor. Projections (is_split_projection) and token_embd become sign planes
// when their shapes match; other tensors that differ are stored in full as f32; identical
// tensors are omitted. Errors name the tensor and both files.
Status make_delta(const WeightSource& base, const WeightSource& finetuned, const std::string& out_path,
                  const DeltaOptions& options, DeltaReport* report);

// One weight's entry in a delta file.
struct DeltaTensor {
  enum class Kind { kSigns, kFull };
  Kind kind = Kind::kSigns;
  std::string weight;             // "blk.0.attn_q.weight"
  int64_t out = 0, row_bytes = 0;  // kSigns: rows and sign bytes per row (in comes from the base)
  const gguf::TensorInfo* signs = nullptr;  // kSigns
  const gguf::TensorInfo* alpha = nullptr;  // kSigns: [out] or [1]
  const gguf::TensorInfo* full = nullptr;   // kFull
};

// An opened, validated delta file (tensor data stay mapped).
struct DeltaFile {
  std::string path;
  std::unique_ptr<gguf::File> file;
  quant::DeltaAlpha alpha = quant::DeltaAlpha::kRow;
  std::string base_sha256, finetuned_sha256, name;
  std::map<std::string, DeltaTensor> tensors;  // by weight name
  const DeltaTensor* find(const std::string& weight) const;
};

Result<DeltaFile> open_delta(const std::string& path);
// The delta's base identity against `base` (an original GGUF, or a converted bit-split file
// whose bitsplit.source_sha256 names its original). The error names both hashes.
Status check_delta_base(const DeltaFile& delta, const WeightSource& base);

// Δ̂ applied to one base matrix [out x in] (row-major): w + α ⊙ sign. Reference path.
std::vector<float> apply_sign_delta_ref(const std::vector<float>& base_w, int64_t out, int64_t in,
                                        const uint8_t* signs, const float* alpha, bool alpha_per_row);
// The fine-tuned approximation of the base tensor `weight`: base + Δ̂ for sign planes, the
// stored tensor for full entries, the base tensor where the delta has nothing.
Result<std::vector<float>> apply_delta_f32(const DeltaFile& delta, const WeightSource& base, const std::string& weight);
// The same for a base tensor already in f32 (as a Model holds it), shape [out x in].
Result<std::vector<float>> apply_delta_f32(const DeltaFile& delta, const std::string& weight,
                                           const std::vector<float>& base_w, int64_t out, int64_t in);

// ---- Variant cache ----
//
// Loaded variants under a byte budget. Each variant has an exponentially decayed request
// rate (decay measured in requests to the cache, so behaviour is deterministic); eviction
// takes the unpinned resident variant with the lowest rate, ties going to the least recently
// used. The `pinned` variants with the highest rates are never evicted. A miss loads through
// the loader outside the lock; concurrent requests for a variant being loaded wait for that
// one load.

enum class EvictionPolicy { kRateWeightedLru, kLru };

struct VariantCacheOptions {
  uint64_t budget_bytes = 0;
  size_t pinned = 0;                 // hottest variants never evicted
  double rate_half_life = 64.0;      // requests after which a variant's rate halves
  EvictionPolicy policy = EvictionPolicy::kRateWeightedLru;
};

struct VariantCacheStats {
  uint64_t requests = 0, hits = 0, loads = 0, coalesced = 0, evictions = 0, load_failures = 0;
  uint64_t bytes_used = 0;
  size_t resident = 0;
  double cold_load_seconds_total = 0, cold_load_seconds_max = 0, cold_load_seconds_last = 0;
};

// The type-erased core; use VariantCache<T>.
class VariantCacheCore {
 public:
  struct Loaded {
    std::shared_ptr<const void> value;
    uint64_t bytes = 0;
  };
  using Loader = std::function<Result<Loaded>(const std::string& key)>;

  VariantCacheCore(VariantCacheOptions options, Loader loader);
  Result<std::shared_ptr<const void>> get(const std::string& key);
  VariantCacheStats stats() const;
  bool resident(const std::string& key) const;
  std::vector<std::string> pinned_keys() const;

 private:
  // One load in flight; requests that arrive meanwhile wait on it and share its outcome.
  struct Pending {
    bool done = false;
    std::shared_ptr<const void> value;
    Status failure;
  };
  struct Entry {
    std::shared_ptr<const void> value;  // null while loading
    uint64_t bytes = 0;
    std::shared_ptr<Pending> pending;
    uint64_t last_use = 0;
  };
  struct Rate {
    double value = 0;
    uint64_t at = 0;  // request tick of the last update
  };
  double rate_now(const std::string& key) const;  // needs mu_
  std::vector<std::string> pinned_locked() const;  // needs mu_
  Status make_room(const std::string& key, uint64_t bytes);  // needs mu_

  VariantCacheOptions options_;
  Loader loader_;
  mutable std::mutex mu_;
  std::condition_variable loaded_;
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, Rate> rates_;  // every key ever requested
  uint64_t tick_ = 0;
  VariantCacheStats stats_;
};

template <typename T>
class VariantCache {
 public:
  struct Loaded {
    std::shared_ptr<const T> value;
    uint64_t bytes = 0;
  };
  using Loader = std::function<Result<Loaded>(const std::string& key)>;

  VariantCache(VariantCacheOptions options, Loader loader)
      : core_(options, [loader = std::move(loader)](const std::string& key) -> Result<VariantCacheCore::Loaded> {
          BITSPLIT_ASSIGN_OR_RETURN(Loaded l, loader(key));
          return VariantCacheCore::Loaded{std::static_pointer_cast<const void>(l.value), l.bytes};
        }) {}
  Result<std::shared_ptr<const T>> get(const std::string& key) {
    BITSPLIT_ASSIGN_OR_RETURN(auto v, core_.get(key));
    return std::static_pointer_cast<const T>(v);
  }
  VariantCacheStats stats() const { return core_.stats(); }
  bool resident(const std::string& key) const { return core_.resident(key); }
  std::vector<std::string> pinned_keys() const { return core_.pinned_keys(); }

 private:
  VariantCacheCore core_;
};

}  // namespace bitsplit
