// Loaded variants under a byte budget (the VariantRegistry's cache).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit {

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
  // Drops a resident entry (its holders keep their copies); a load in flight is left alone.
  void drop(const std::string& key);
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
  void drop(const std::string& key) { core_.drop(key); }
  std::vector<std::string> pinned_keys() const { return core_.pinned_keys(); }

 private:
  VariantCacheCore core_;
};

}  // namespace bitsplit
