// The server's admission of generation requests (server.h, "Scheduling"): the slots requests
// decode in, the queue of those waiting for one, and what /metrics says about both.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "bitsplit/metrics.h"

namespace bitsplit::serve {

// At most `slots` requests decode at once and at most `queue` more wait for a slot; a request
// beyond that is refused at once (the server answers 503), never queued. Keeps the counts
// /metrics reports: requests waiting and running, and the KV-cache usage (the KV slots the
// running requests reserved, of the contexts of all the slots). Thread-safe.
class Admission {
 public:
  // A slot held by one request; released, waking a waiting request, when the last copy goes (a
  // streamed response holds it until its last chunk is written).
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    // Counts `tokens` KV slots (the request's prompt + max_tokens) as reserved, of `context`
    // per decoding slot, until release_kv() or the slot's release.
    void reserve_kv(int64_t tokens, int64_t context);
    void release_kv();

   private:
    friend class Admission;
    explicit Slot(Admission& admission) : admission_(admission) {}
    Admission& admission_;
    int64_t kv_tokens_ = 0, kv_context_ = 0;
  };

  // `metrics` must outlive the admission.
  Admission(int slots, int queue, Metrics& metrics);
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // A slot, waiting in the queue until one is free; null (refused) when every slot is taken and
  // the queue is full.
  std::shared_ptr<Slot> acquire();

  int slots() const { return slots_; }
  int queue() const { return queue_; }
  int running() const;
  int waiting() const;
  int64_t kv_reserved() const;  // KV slots the running requests reserved

 private:
  void release();
  void add_kv(int64_t tokens, int64_t context);

  const int slots_, queue_;
  Metrics& metrics_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  int free_slots_;
  int waiting_ = 0;
  int64_t kv_reserved_ = 0;
};

}  // namespace bitsplit::serve
