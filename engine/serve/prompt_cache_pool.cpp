// Kept KV caches, taken by the longest shared prefix (prompt_cache_pool.h).
#include "prompt_cache_pool.h"

#include <algorithm>
#include <optional>

namespace bitsplit::serve {

size_t PromptCachePool::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

Session::Kept PromptCachePool::take(int tenant, const std::shared_ptr<const Variant>& variant,
                                    std::span<const int32_t> prompt) {
  std::vector<Entry> gone;  // freed after the lock
  std::lock_guard<std::mutex> lock(mu_);
  // Caches of variants that no longer exist can never be taken.
  for (size_t i = entries_.size(); i-- > 0;) {
    if (!entries_[i].base && entries_[i].variant.expired()) {
      gone.push_back(std::move(entries_[i]));
      entries_.erase(entries_.begin() + int64_t(i));
    }
  }
  size_t pick = 0;
  int64_t best = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const bool same = e.tenant == tenant && (variant ? !e.base && e.variant.lock() == variant : e.base);
    const int64_t shared = same ? reusable_prefix(e.kept.tokens, prompt) : 0;
    if (shared > best) best = shared, pick = i;
  }
  if (best == 0) return {};
  Session::Kept k = std::move(entries_[pick].kept);
  entries_.erase(entries_.begin() + int64_t(pick));
  return k;
}

void PromptCachePool::give_back(int tenant, const std::shared_ptr<const Variant>& variant, Session::Kept kept) {
  if (!kept.cache || kept.tokens.empty()) return;  // (a failed generation keeps no tokens)
  std::optional<Entry> gone;  // freed after the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return;
  if (entries_.size() >= capacity_) {  // the one given back longest ago goes
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.given_back < b.given_back; });
    gone.emplace(std::move(*oldest));
    entries_.erase(oldest);
  }
  entries_.push_back({tenant, variant == nullptr, variant, std::move(kept), ++clock_});
}

}  // namespace bitsplit::serve
