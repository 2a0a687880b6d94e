// What a model will take in system RAM before it is loaded, against what the machine has: the
// residual planes, the draft planes the CPU keeps, the other weights as the loader holds them
// (f32, or Q8_0 blocks for the Q8_0 kernel), the KV cache and the logits scratch. `run` and
// `info` print it; `run` refuses, before allocating anything, a model that cannot fit instead
// of being killed by the OOM killer halfway through loading.
#pragma once

#include <cstdint>
#include <string>

#include "bitsplit/model.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

struct MemoryPlan {
  uint64_t residual = 0;  // residual planes R (and their scales)
  uint64_t draft = 0;     // draft planes D (and scales, offsets); a GPU holds a copy
  uint64_t weights = 0;   // every other weight as loaded: embedding, head, norms, plain projections
  uint64_t kv_cache = 0;  // K and V, f32, for n_slots positions
  uint64_t scratch = 0;   // logits of the widest verify pass
  int64_t n_slots = 0;     // per sequence
  int64_t sequences = 1;   // KV caches (a server's --parallel)
  uint64_t total() const { return residual + draft + weights + kv_cache + scratch; }
  // "1.42 GiB: residual 1.02 GiB, draft 0.31 GiB, other weights 80 MiB, KV cache (600 positions) 14 MiB, scratch 2 MiB"
  std::string summary() const;
  std::string terms() const;  // the summary without the total
};

struct MemoryPlanOptions {
  int64_t n_slots = 0;        // positions each KV cache holds (0: the model's training context)
  int64_t sequences = 1;      // KV caches (sequences decoding at once); the scratch grows with them too
  bool q8_0_kernels = true;   // Q8_0 projections of an original model stay Q8_0 (as `run` loads them)
  int64_t verify_rows = 65;   // logits rows of the widest pass (a full speculative budget + 1)
};

Result<MemoryPlan> plan_memory(const WeightSource& source, const ModelConfig& config, const MemoryPlanOptions& options);

// The machine's RAM: /proc/meminfo's MemTotal and MemAvailable, lowered to a cgroup's
// memory.max when the process runs under one (containers); NUMA nodes from hwloc.
// BITSPLIT_MEMORY_AVAILABLE (a byte size such as 512M) overrides `available`, for tests and
// for users who want a tighter limit.
struct SystemMemory {
  uint64_t total = 0;
  uint64_t available = 0;
  int numa_nodes = 1;
  std::string summary() const;  // "23.4 GiB available of 23.5 GiB, 1 NUMA node"
};
Result<SystemMemory> system_memory();

// An error naming what does not fit and by how much, when plan.total() > memory.available.
Status check_memory(const MemoryPlan& plan, const SystemMemory& memory);

}  // namespace bitsplit
