// Where a speculative check's draft passes run: on the host, through the model's forward pass
// (its projections on the model's backend, K/V in the shared cache), or whole on a device
// (the backend's DeviceDraft, with its own K/V cache there, kept in step with the target's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bitsplit/device_draft.h"
#include "bitsplit/model.h"
#include "bitsplit/status.h"

namespace bitsplit {

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Where the pass runs, for the run summary: "host", "device (cuda:0)".
  virtual std::string where() const = 0;
  // The largest k for which level() can return each row's top k alone (0: logits only).
  virtual int max_top_k() const { return 0; }
  // One tree level's rows. With `top` (k <= max_top_k()), each row's top k; otherwise the
  // logits [rows x n_vocab] into `logits`.
  virtual Status level(const Batch& rows, int k, DraftTopK* top, std::vector<float>* logits) = 0;
  // The target has committed cache slots [from, to) of `cache` (after the prefill and after
  // every check): a device copy takes them; the host reads the shared cache directly.
  virtual Status committed(const KvCache& cache, int64_t from, int64_t to) {
    (void)cache;
    (void)from;
    (void)to;
    return Status::ok();
  }
  // Bytes this source moved to and from a device since it was made (zero on the host).
  virtual DeviceTransfers transfers() const { return {}; }
};

class PassBatcher;

// The draft model D (with the variant's signs) through forward_pass on `cache`, the target's;
// with a batcher, its passes join other generations' (pass_batcher.h).
std::unique_ptr<DraftSource> make_host_draft(const Model& draft, KvCache& cache, const Variant* variant,
                                             PassBatcher* batcher = nullptr);

// The whole draft on the draft model's backend device with a K/V cache of n_slots slots, or an
// error saying why not (the CPU backend; planes that did not fit in VRAM; a variant replacing
// more than norms and biases): the caller then drafts on the host. With a batcher, its device
// work (making it, each level, each K/V upload) takes turns with other generations' passes.
// `context`: the sequence's KvCache::context() (a LongRoPE model's draft turns by the factor set
// it picks, as the target does).
Result<std::unique_ptr<DraftSource>> make_device_draft(const Model& draft, int64_t n_slots, int64_t context,
                                                       const Variant* variant, PassBatcher* batcher = nullptr);

}  // namespace bitsplit
