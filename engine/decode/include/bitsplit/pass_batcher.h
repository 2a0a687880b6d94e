// Concurrent generations on one model with their forward passes combined. Each generation's
// thread hands its pass to the batcher and waits; one waiting thread at a time (the leader) runs
// every pass handed in by then, as one forward_passes call per (model, pass kind), so the
// residual planes are streamed once for all of those sequences' rows (sequences on different
// variants included), and gives each its logits. Work that needs the model's compute but is not
// a forward pass (a device draft's level, its K/V uploads) runs through exclusive(), in turn with
// the passes. A sequence's logits are bit for bit those of its pass alone (forward_passes), so a
// generation's output does not depend on what else is decoding.
//
// The leader waits up to `gather` for the passes of every joined generation (a generation that
// is sampling or emitting a token hands its next pass in a moment later), so passes of
// generations in step combine; with one generation joined nothing waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "bitsplit/model.h"
#include "bitsplit/status.h"

namespace bitsplit {

class PassBatcher {
 public:
  struct Options {
    int64_t max_rows = 512;                        // rows per combined pass (more are split)
    std::chrono::microseconds gather{2000};        // the leader's wait for joined generations
  };
  struct Stats {
    int64_t passes = 0;      // forward_passes calls run
    int64_t sequences = 0;   // sequence passes in them
    int64_t rows = 0;        // their rows
    int64_t shared = 0;      // sequence passes that ran beside another sequence's
  };

  PassBatcher() : PassBatcher(Options{}) {}
  explicit PassBatcher(Options options) : options_(options) {}
  PassBatcher(const PassBatcher&) = delete;
  PassBatcher& operator=(const PassBatcher&) = delete;

  // A generation in progress (RAII): the leader waits for the passes of joined generations.
  class Membership {
   public:
    explicit Membership(PassBatcher* batcher);
    ~Membership();
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;

   private:
    PassBatcher* batcher_;
  };

  // forward_pass(model, cache, batch, nullptr, pass, variant), combined with the passes other
  // threads hand in meanwhile.
  Result<std::vector<float>> forward(const Model& model, KvCache& cache, const Batch& batch, Pass pass,
                                     const Variant* variant);
  // Runs `work` while no pass runs (in turn with them).
  Status exclusive(const std::function<Status()>& work);

  Stats stats() const;
  // Generations joined now.
  int64_t joined() const;

 private:
  struct Job;
  Status submit(Job& job);
  void execute(std::vector<Job*>& jobs);

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job*> pending_;
  bool leading_ = false;
  int64_t joined_ = 0;
  Stats stats_;
};

// forward_pass, through `batcher` when there is one.
Result<std::vector<float>> run_forward(PassBatcher* batcher, const Model& model, KvCache& cache, const Batch& batch,
                                       Pass pass, const Variant* variant);

}  // namespace bitsplit
