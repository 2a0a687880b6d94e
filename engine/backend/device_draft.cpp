// The DeviceDraft over gpu::DraftModel.
#include "bitsplit/device_draft.h"

namespace bitsplit {
namespace {

class CudaDeviceDraft final : public DeviceDraft {
 public:
  CudaDeviceDraft(std::unique_ptr<gpu::DraftModel> model, std::string name, int64_t n_vocab, int64_t n_slots)
      : DeviceDraft(n_slots), model_(std::move(model)), name_(std::move(name)), n_vocab_(n_vocab) {}

  std::string name() const override { return name_; }

  Status upload_kv(int64_t layer, int64_t first_slot, int64_t count, const float* k, const float* v,
                   const int32_t* positions) override {
    return model_->upload_kv(layer, first_slot, count, k, v, positions);
  }

  Status forward(const DraftRows& b, int k, DraftTopK& top, std::vector<float>* logits) override {
    const int64_t rows = b.rows;
    top.k = k;
    top.tokens.resize(size_t(rows * k));
    top.log_probs.resize(size_t(rows * k));
    if (logits) logits->resize(size_t(rows) * size_t(n_vocab_));
    return model_->forward(b.tokens, b.positions, b.slots, b.mask, rows, b.kv_len, k, top.tokens.data(), top.log_probs.data(), logits ? logits->data() : nullptr);
  }

  DeviceTransfers transfers() const override {
    const gpu::TransferCounters c = model_->counters();
    return {c.weight_bytes_to_device, c.activation_bytes_to_device, c.result_bytes_to_host, c.calls};
  }

 private:
  std::unique_ptr<gpu::DraftModel> model_;
  std::string name_;
  int64_t n_vocab_;
};

}  // namespace

std::shared_ptr<DeviceDraft> wrap_device_draft(std::unique_ptr<gpu::DraftModel> model, std::string name,
                                               int64_t n_vocab, int64_t n_slots) {
  return std::make_shared<CudaDeviceDraft>(std::move(model), std::move(name), n_vocab, n_slots);
}

}  // namespace bitsplit
