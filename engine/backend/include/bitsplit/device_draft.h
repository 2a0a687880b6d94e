// The draft model run whole on a device: embedding, every layer, the head and the top-k of
// each row, with its own K/V cache in device memory (Backend::make_device_draft makes one).
// Speaks in plain arrays (no Model, KvCache or Batch: those live in the layer above); the
// decoding layer's device draft source (draft_source.h in engine/decode/) adapts it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bitsplit/gpu.h"
#include "bitsplit/status.h"

namespace bitsplit {

// Bytes moved to and from a device (all zero for the CPU).
struct DeviceTransfers {
  uint64_t weight_bytes = 0, activation_bytes = 0, result_bytes = 0, calls = 0;
  DeviceTransfers since(const DeviceTransfers& start) const {
    return {weight_bytes - start.weight_bytes, activation_bytes - start.activation_bytes,
            result_bytes - start.result_bytes, calls - start.calls};
  }
};

// k proposals per row, largest logit first: tokens and log-softmax values, [rows x k].
struct DraftTopK {
  int k = 0;
  std::vector<int32_t> tokens;
  std::vector<float> log_probs;
};

// One batch of draft rows: row r is tokens[r] at RoPE position positions[r], written to slot
// slots[r], attending to slots j < kv_len where mask[r * kv_len + j] != 0.
struct DraftRows {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  const uint8_t* mask = nullptr;
  int64_t rows = 0, kv_len = 0;
};

class DeviceDraft {
 public:
  static constexpr int kMaxTopK = gpu::DraftModel::kMaxTopK;  // forward()'s k at most
  virtual ~DeviceDraft() = default;
  virtual std::string name() const = 0;
  int64_t n_slots() const { return n_slots_; }
  // Copies `count` slots from first_slot on of one layer: k and v are [count x kv_dim] (host);
  // positions (count values, may be null) are the slots' token positions (sliding window).
  virtual Status upload_kv(int64_t layer, int64_t first_slot, int64_t count, const float* k, const float* v,
                           const int32_t* positions) = 0;
  // Runs the rows; the top k of every row (k <= kMaxTopK), and with `logits` non-null the
  // logits [rows x n_vocab] too (sampling needs the whole distribution).
  virtual Status forward(const DraftRows& rows, int k, DraftTopK& top, std::vector<float>* logits) = 0;
  virtual DeviceTransfers transfers() const = 0;

 protected:
  explicit DeviceDraft(int64_t n_slots) : n_slots_(n_slots) {}

 private:
  int64_t n_slots_;
};

// A DeviceDraft over a gpu::DraftModel (the CUDA backend's make_device_draft).
std::shared_ptr<DeviceDraft> wrap_device_draft(std::unique_ptr<gpu::DraftModel> model, std::string name,
                                               int64_t n_vocab, int64_t n_slots);

}  // namespace bitsplit
