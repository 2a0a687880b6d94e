// The server's pool of finished requests' KV caches (ServerOptions::prompt_cache), taken by the
// next requests whose prompts start the same way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "bitsplit/session.h"
#include "bitsplit/variant.h"

namespace bitsplit::serve {

// A request takes the kept cache whose tokens share the longest prefix with its prompt
// (reusable_prefix) among those made by the same tenant (the server's API key; server.h,
// "Tenants") under the same variant (or the base, for the base), and
// gives its own back when it ends. At most `capacity` caches are kept: a cache given back to a
// full pool pushes out the one given back longest ago. Caches of a variant that no longer exists
// (its registry evicted it and no request holds it) are dropped. The pool and the running
// requests hold at most capacity + slots caches. Thread-safe; a cache leaves the pool before it
// is freed (a cache can be hundreds of MB), so no lock is held while freeing.
class PromptCachePool {
 public:
  explicit PromptCachePool(int capacity) : capacity_(size_t(std::max(0, capacity))) {}
  PromptCachePool(const PromptCachePool&) = delete;
  PromptCachePool& operator=(const PromptCachePool&) = delete;

  // False: capacity 0, nothing is ever kept.
  bool enabled() const { return capacity_ > 0; }
  size_t capacity() const { return capacity_; }
  size_t size() const;

  // The kept cache of `tenant` sharing the longest prefix with `prompt` under `variant` (null: the
  // base), moved out of the pool; an empty Kept when none shares a token.
  Session::Kept take(int tenant, const std::shared_ptr<const Variant>& variant, std::span<const int32_t> prompt);
  // Keeps `kept`, made by `tenant` under `variant`; a cache without tokens (a failed generation)
  // is dropped.
  void give_back(int tenant, const std::shared_ptr<const Variant>& variant, Session::Kept kept);

 private:
  struct Entry {
    int tenant = 0;
    bool base = true;                      // made by the base model (no variant)
    std::weak_ptr<const Variant> variant;  // else by this one (expired: it is gone)
    Session::Kept kept;
    uint64_t given_back = 0;               // when, on clock_
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace bitsplit::serve
