// The KV cache (explicit slots) and token batches with arbitrary attention masks.
#include <algorithm>

#include "bitsplit/model.h"

namespace bitsplit {

KvCache::KvCache(const ModelConfig& config, int64_t n_slots)
    : n_layers_(config.n_layers), n_slots_(n_slots), kv_dim_(config.kv_dim()), context_(n_slots),
      k_(size_t(config.n_layers * n_slots * config.kv_dim()), 0.0f),
      v_(size_t(config.n_layers * n_slots * config.kv_dim()), 0.0f), pos_(size_t(n_slots), 0) {}

KvCache KvCache::copy() const {
  KvCache c;
  c.n_layers_ = n_layers_;
  c.n_slots_ = n_slots_;
  c.kv_dim_ = kv_dim_;
  c.context_ = context_;
  c.k_ = k_;
  c.v_ = v_;
  c.pos_ = pos_;
  return c;
}

void KvCache::move_slot(int64_t from, int64_t to) {
  BITSPLIT_CHECK(from >= 0 && from < n_slots_ && to >= 0 && to < n_slots_);
  if (from == to) return;
  pos_[size_t(to)] = pos_[size_t(from)];
  for (int64_t l = 0; l < n_layers_; ++l) {
    std::copy(k(l, from), k(l, from) + kv_dim_, k(l, to));
    std::copy(v(l, from), v(l, from) + kv_dim_, v(l, to));
  }
}

void KvCache::copy_prefix(const KvCache& other, int64_t slots) {
  BITSPLIT_CHECK(other.n_layers_ == n_layers_ && other.kv_dim_ == kv_dim_ && slots >= 0 && slots <= other.n_slots_ &&
                     slots <= n_slots_,
                 "KV cache prefix copy between caches of different shapes");
  std::copy(other.pos_.begin(), other.pos_.begin() + slots, pos_.begin());
  for (int64_t l = 0; l < n_layers_; ++l) {
    std::copy(other.k(l, 0), other.k(l, 0) + slots * kv_dim_, k(l, 0));
    std::copy(other.v(l, 0), other.v(l, 0) + slots * kv_dim_, v(l, 0));
  }
}

Batch Batch::causal(std::span<const int32_t> tokens, int32_t start, bool all_logits) {
  Batch b;
  const int64_t n = int64_t(tokens.size());
  b.tokens.assign(tokens.begin(), tokens.end());
  b.kv_len = start + n;
  b.mask.assign(size_t(n * b.kv_len), 0);
  b.want_logits.assign(size_t(n), all_logits ? 1 : 0);
  if (n > 0) b.want_logits.back() = 1;
  for (int64_t i = 0; i < n; ++i) {
    b.positions.push_back(int32_t(start + i));
    b.slots.push_back(int32_t(start + i));
    for (int64_t j = 0; j <= start + i; ++j) b.mask[size_t(i * b.kv_len + j)] = 1;
  }
  return b;
}

Status Batch::validate(const ModelConfig& config, const KvCache& cache) const {
  const int64_t n = size();
  if (n == 0) return Status::error("batch is empty");
  if (int64_t(positions.size()) != n || int64_t(slots.size()) != n || int64_t(want_logits.size()) != n) {
    return Status::error("batch: tokens, positions, slots and want_logits must have the same length");
  }
  if (kv_len <= 0 || kv_len > cache.n_slots()) {
    return Status::error("batch: kv_len " + std::to_string(kv_len) + " is outside the cache (" +
                         std::to_string(cache.n_slots()) + " slots)");
  }
  if (int64_t(mask.size()) != n * kv_len) return Status::error("batch: mask must hold tokens x kv_len entries");
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= config.n_vocab) {
      return Status::error("token id " + std::to_string(tokens[size_t(i)]) + " is outside the vocabulary (0.." +
                           std::to_string(config.n_vocab - 1) + ")");
    }
    if (positions[size_t(i)] < 0) return Status::error("batch: negative position");
    if (slots[size_t(i)] < 0 || slots[size_t(i)] >= kv_len) {
      return Status::error("batch: slot " + std::to_string(slots[size_t(i)]) + " is outside [0, kv_len)");
    }
    bool any = false;
    for (int64_t j = 0; j < kv_len && !any; ++j) any = mask[size_t(i * kv_len + j)] != 0;
    if (!any) return Status::error("batch: token " + std::to_string(i) + " may attend to nothing");
  }
  return Status::ok();
}

}  // namespace bitsplit
