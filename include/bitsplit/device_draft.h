// The draft model run whole on a device: embedding, every layer, the head and the top-k of
// each row, with its own K/V cache in device memory. Speculative decoding uses it when the
// draft tier offers one (DraftTier::make_device_draft): per draft level only the batch goes in
// and k (token, log-probability) pairs per row come out; after each check the newly committed
// target K/V go in (sync_cache). The target's verification is unchanged, so output is the same
// as with the CPU draft; only what is drafted (and so the speed) may differ.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bitsplit/gpu.h"
#include "bitsplit/model.h"

namespace bitsplit {

class Variant;

// k proposals per row, largest logit first: tokens and log-softmax values, [rows x k].
struct DraftTopK {
  int k = 0;
  std::vector<int32_t> tokens;
  std::vector<float> log_probs;
};

class DeviceDraft {
 public:
  static constexpr int kMaxTopK = gpu::DraftModel::kMaxTopK;  // forward()'s k at most
  virtual ~DeviceDraft() = default;
  virtual std::string name() const = 0;
  // Copies slots [from, to) of every layer of `cache` (the target's committed K/V) to the device.
  virtual Status sync_cache(const KvCache& cache, int64_t from, int64_t to) = 0;
  // Runs the batch; the top k of every row (k <= kMaxTopK), and with `logits` non-null the logits
  // [rows x n_vocab] too (sampling needs the whole distribution).
  virtual Status forward(const Batch& batch, int k, DraftTopK& top, std::vector<float>* logits) = 0;
  virtual DraftTier::Transfers transfers() const = 0;
};

// What the device needs of a draft model: every projection and the head as a 2-bit plane in the
// file layout (keyed by its SplitProjection, as the CUDA tier uploads them), f32 embedding,
// norms and biases. An error names the first thing missing (a projection held in f32, a plane
// of another width, the draft's file layout released, mixed group sizes). With a variant, its
// sign planes join the planes (keyed by their data, as the CUDA tier's prepare_delta keys them)
// and its norms and biases replace the base's; a variant replacing anything else in full is an
// error (it then drafts on the host path).
Result<gpu::DraftModelHost> describe_device_draft(const Model& draft, const Variant* variant = nullptr);

// A DeviceDraft over a gpu::DraftModel (the CUDA tier's make_device_draft).
std::shared_ptr<DeviceDraft> wrap_device_draft(std::unique_ptr<gpu::DraftModel> model, std::string name,
                                               const ModelConfig& config, int64_t n_slots);

}  // namespace bitsplit
