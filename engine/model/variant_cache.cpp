// The variant cache: loaded variants under a byte budget, evicted by decayed request rate
// (then recency), the hottest pinned, loads coalesced per key.
#include <algorithm>
#include <cmath>

#include "bitsplit/variant_cache.h"

namespace bitsplit {

VariantCacheCore::VariantCacheCore(VariantCacheOptions options, Loader loader)
    : options_(options), loader_(std::move(loader)) {
  BITSPLIT_CHECK(loader_ != nullptr, "variant cache needs a loader");
  BITSPLIT_CHECK(options_.rate_half_life > 0);
}

double VariantCacheCore::rate_now(const std::string& key) const {
  auto it = rates_.find(key);
  if (it == rates_.end()) return 0.0;
  return it->second.value * std::exp2(-double(tick_ - it->second.at) / options_.rate_half_life);
}

std::vector<std::string> VariantCacheCore::pinned_locked() const {
  if (options_.pinned == 0 || options_.policy == EvictionPolicy::kLru) return {};
  struct Hot {
    double rate;
    uint64_t last_use;
    const std::string* key;
  };
  std::vector<Hot> hot;
  for (const auto& [key, e] : entries_)
    if (e.value) hot.push_back({rate_now(key), e.last_use, &key});
  const size_t n = std::min(options_.pinned, hot.size());
  std::partial_sort(hot.begin(), hot.begin() + ptrdiff_t(n), hot.end(), [](const Hot& a, const Hot& b) {
    return a.rate != b.rate ? a.rate > b.rate : a.last_use > b.last_use;
  });
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(*hot[i].key);
  return keys;
}

Status VariantCacheCore::make_room(const std::string& key, uint64_t bytes) {
  const std::vector<std::string> pinned = pinned_locked();
  while (stats_.bytes_used + bytes > options_.budget_bytes) {
    const std::string* victim = nullptr;
    double victim_rate = 0;
    uint64_t victim_use = 0;
    for (const auto& [k, e] : entries_) {
      if (!e.value || k == key || std::find(pinned.begin(), pinned.end(), k) != pinned.end()) continue;
      const double rate = options_.policy == EvictionPolicy::kLru ? 0.0 : rate_now(k);
      if (!victim || rate < victim_rate || (rate == victim_rate && e.last_use < victim_use)) {
        victim = &k;
        victim_rate = rate;
        victim_use = e.last_use;
      }
    }
    if (!victim) {
      return Status::error("variant '" + key + "' (" + std::to_string(bytes) + " bytes) does not fit: " +
                           std::to_string(stats_.bytes_used) + " of the " + std::to_string(options_.budget_bytes) +
                           "-byte budget are held by pinned variants or loads in flight");
    }
    stats_.bytes_used -= entries_[*victim].bytes;
    entries_.erase(*victim);
    ++stats_.evictions;
  }
  return Status::ok();
}

Result<std::shared_ptr<const void>> VariantCacheCore::get(const std::string& key) {
  std::unique_lock lock(mu_);
  ++tick_;
  ++stats_.requests;
  Rate& r = rates_[key];
  r.value = r.value * std::exp2(-double(tick_ - r.at) / options_.rate_half_life) + 1.0;
  r.at = tick_;

  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.last_use = tick_;
    if (it->second.value) {
      ++stats_.hits;
      return it->second.value;
    }
    // Another request is loading it: wait for that load instead of starting a second one.
    ++stats_.coalesced;
    const std::shared_ptr<Pending> pending = it->second.pending;
    loaded_.wait(lock, [&] { return pending->done; });
    if (!pending->failure.is_ok()) return pending->failure;
    return pending->value;
  }

  auto pending = std::make_shared<Pending>();
  Entry& placeholder = entries_[key];
  placeholder.pending = pending;
  placeholder.last_use = tick_;
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  Result<Loaded> loaded = loader_(key);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lock.lock();

  ++stats_.loads;
  stats_.cold_load_seconds_total += seconds;
  stats_.cold_load_seconds_max = std::max(stats_.cold_load_seconds_max, seconds);
  stats_.cold_load_seconds_last = seconds;
  Status failure;
  if (!loaded) {
    failure = loaded.status().with_context("loading variant '" + key + "'");
  } else if (!loaded->value) {
    failure = Status::error("loading variant '" + key + "': the loader returned nothing");
  } else if (loaded->bytes > options_.budget_bytes) {
    failure = Status::error("variant '" + key + "' needs " + std::to_string(loaded->bytes) +
                            " bytes, more than the cache's whole budget of " + std::to_string(options_.budget_bytes));
  } else {
    failure = make_room(key, loaded->bytes);
  }
  pending->done = true;
  if (!failure.is_ok()) {
    ++stats_.load_failures;
    pending->failure = failure;
    entries_.erase(key);
    loaded_.notify_all();
    return failure;
  }
  Entry& e = entries_[key];
  e.value = pending->value = loaded->value;
  e.bytes = loaded->bytes;
  e.pending.reset();
  stats_.bytes_used += e.bytes;
  loaded_.notify_all();
  return e.value;
}

VariantCacheStats VariantCacheCore::stats() const {
  std::lock_guard lock(mu_);
  VariantCacheStats s = stats_;
  s.resident = 0;
  for (const auto& [k, e] : entries_) s.resident += e.value ? 1 : 0;
  return s;
}

void VariantCacheCore::drop(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || !it->second.value) return;  // absent, or a load in flight keeps its entry
  stats_.bytes_used -= it->second.bytes;
  entries_.erase(it);
}

bool VariantCacheCore::resident(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.value != nullptr;
}

std::vector<std::string> VariantCacheCore::pinned_keys() const {
  std::lock_guard lock(mu_);
  return pinned_locked();
}

}  // namespace bitsplit
