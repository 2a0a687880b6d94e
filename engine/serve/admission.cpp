// Slots, the queue and their metrics (admission.h).
#include "admission.h"

#include <algorithm>

namespace bitsplit::serve {

Admission::Admission(int slots, int queue, Metrics& metrics)
    : slots_(std::max(1, slots)), queue_(queue), metrics_(metrics), free_slots_(slots_) {}

std::shared_ptr<Admission::Slot> Admission::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  if (free_slots_ == 0 && waiting_ >= queue_) return nullptr;
  ++waiting_;
  metrics_.request_waiting(+1);
  freed_.wait(lock, [&] { return free_slots_ > 0; });
  --waiting_;
  --free_slots_;
  metrics_.request_waiting(-1);
  metrics_.request_running(+1);
  return std::shared_ptr<Slot>(new Slot(*this));
}

void Admission::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++free_slots_;
  }
  metrics_.request_running(-1);
  freed_.notify_one();
}

int Admission::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_ - free_slots_;
}

int Admission::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

int64_t Admission::kv_reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_reserved_;
}

void Admission::add_kv(int64_t tokens, int64_t context) {
  std::lock_guard<std::mutex> lock(mu_);
  kv_reserved_ += tokens;
  metrics_.set_kv_cache_usage(double(kv_reserved_) / (double(context) * double(slots_)));
}

Admission::Slot::~Slot() {
  release_kv();
  admission_.release();
}

void Admission::Slot::reserve_kv(int64_t tokens, int64_t context) {
  release_kv();
  kv_tokens_ = tokens;
  kv_context_ = context;
  admission_.add_kv(tokens, context);
}

void Admission::Slot::release_kv() {
  if (kv_context_ == 0) return;
  admission_.add_kv(-kv_tokens_, kv_context_);
  kv_tokens_ = kv_context_ = 0;
}

}  // namespace bitsplit::serve
