// The host and device draft sources.
#include "bitsplit/draft_source.h"

#include "bitsplit/draft_description.h"
#include "bitsplit/variant.h"

namespace bitsplit {
namespace {

class HostDraft final : public DraftSource {
 public:
  HostDraft(const Model& draft, KvCache& cache, const Variant* variant) : draft_(draft), cache_(cache), variant_(variant) {}
  std::string where() const override { return "host"; }
  Status level(const Batch& rows, int k, DraftTopK* top, std::vector<float>* logits) override {
    (void)k;
    if (top) return Status::error("the host draft returns logits only");
    BITSPLIT_ASSIGN_OR_RETURN(*logits, forward_pass(draft_, cache_, rows, nullptr, Pass::kDraft, variant_));
    return Status::ok();
  }

 private:
  const Model& draft_;
  KvCache& cache_;
  const Variant* variant_;
};

class DeviceDraftSource final : public DraftSource {
 public:
  DeviceDraftSource(std::vector<std::shared_ptr<const void>> signs, std::shared_ptr<DeviceDraft> device)
      : signs_(std::move(signs)), device_(std::move(device)), start_(device_->transfers()) {}  // may be reused
  std::string where() const override { return "device (" + device_->name() + ")"; }
  int max_top_k() const override { return DeviceDraft::kMaxTopK; }

  Status level(const Batch& b, int k, DraftTopK* top, std::vector<float>* logits) override {
    const DraftRows rows = draft_rows(b);
    if (top) return device_->forward(rows, k, *top, nullptr);
    DraftTopK none;
    return device_->forward(rows, 0, none, logits);
  }

  Status committed(const KvCache& cache, int64_t from, int64_t to) override {
    if (from < 0 || to < from || to > std::min(cache.n_slots(), device_->n_slots())) {
      return Status::error("device draft: cannot copy cache slots " + std::to_string(from) + ".." + std::to_string(to));
    }
    for (int64_t l = 0; l < cache.n_layers(); ++l) {
      BITSPLIT_RETURN_IF_ERROR(device_->upload_kv(l, from, to - from, cache.k(l, from), cache.v(l, from),
                                                         cache.positions_from(from)));
    }
    return Status::ok();
  }

  DeviceTransfers transfers() const override { return device_->transfers().since(start_); }

 private:
  std::vector<std::shared_ptr<const void>> signs_;  // the variant's signs stay in VRAM while the device draft lives
  std::shared_ptr<DeviceDraft> device_;
  DeviceTransfers start_;
};

}  // namespace

std::unique_ptr<DraftSource> make_host_draft(const Model& draft, KvCache& cache, const Variant* variant) {
  return std::make_unique<HostDraft>(draft, cache, variant);
}

Result<std::unique_ptr<DraftSource>> make_device_draft(const Model& draft, int64_t n_slots, const Variant* variant) {
  if (!draft.has_planes()) return Status::error("the draft has no bit-split planes");
  // A variant's sign planes are made resident (or found resident) first, held for as long as
  // the device draft that fuses them.
  std::vector<std::shared_ptr<const void>> signs;
  if (variant) {
    BITSPLIT_ASSIGN_OR_RETURN(signs, make_resident(draft, *variant));
  }
  // The base's device draft is kept by the backend for the next generation on this model.
  BITSPLIT_ASSIGN_OR_RETURN(
      auto device, draft.backend().make_device_draft([&] { return describe_device_draft(draft, variant); }, n_slots,
                                                     variant ? nullptr : &draft));
  return std::unique_ptr<DraftSource>(std::make_unique<DeviceDraftSource>(std::move(signs), std::move(device)));
}

}  // namespace bitsplit
