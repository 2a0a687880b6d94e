// The host and device draft sources.
#include "bitsplit/draft_source.h"

#include "bitsplit/draft_description.h"
#include "bitsplit/pass_batcher.h"
#include "bitsplit/variant.h"

namespace bitsplit {
namespace {

class HostDraft final : public DraftSource {
 public:
  HostDraft(const Model& draft, KvCache& cache, const Variant* variant, PassBatcher* batcher)
      : draft_(draft), cache_(cache), variant_(variant), batcher_(batcher) {}
  std::string where() const override { return "host"; }
  Status level(const Batch& rows, int k, DraftTopK* top, std::vector<float>* logits) override {
    (void)k;
    if (top) return Status::error("the host draft returns logits only");
    BITSPLIT_ASSIGN_OR_RETURN(*logits, run_forward(batcher_, draft_, cache_, rows, Pass::kDraft, variant_));
    return Status::ok();
  }

 private:
  const Model& draft_;
  KvCache& cache_;
  const Variant* variant_;
  PassBatcher* batcher_;
};

// Device work takes its turn with other generations' passes (the backend is one device).
Status in_turn(PassBatcher* batcher, const std::function<Status()>& work) {
  return batcher ? batcher->exclusive(work) : work();
}

class DeviceDraftSource final : public DraftSource {
 public:
  DeviceDraftSource(std::vector<std::shared_ptr<const void>> signs, std::shared_ptr<DeviceDraft> device,
                    PassBatcher* batcher)
      : signs_(std::move(signs)), device_(std::move(device)), start_(device_->transfers()), batcher_(batcher) {}  // may be reused
  std::string where() const override { return "device (" + device_->name() + ")"; }
  int max_top_k() const override { return DeviceDraft::kMaxTopK; }

  Status level(const Batch& b, int k, DraftTopK* top, std::vector<float>* logits) override {
    return in_turn(batcher_, [&] {
      const DraftRows rows = draft_rows(b);
      if (top) return device_->forward(rows, k, *top, nullptr);
      DraftTopK none;
      return device_->forward(rows, 0, none, logits);
    });
  }

  Status committed(const KvCache& cache, int64_t from, int64_t to) override {
    return in_turn(batcher_, [&] { return upload(cache, from, to); });
  }

  DeviceTransfers transfers() const override { return device_->transfers().since(start_); }

 private:
  Status upload(const KvCache& cache, int64_t from, int64_t to) {
    if (from < 0 || to < from || to > std::min(cache.n_slots(), device_->n_slots())) {
      return Status::error("device draft: cannot copy cache slots " + std::to_string(from) + ".." + std::to_string(to));
    }
    for (int64_t l = 0; l < cache.n_layers(); ++l) {
      BITSPLIT_RETURN_IF_ERROR(device_->upload_kv(l, from, to - from, cache.k(l, from), cache.v(l, from),
                                                         cache.positions_from(from)));
    }
    return Status::ok();
  }

  std::vector<std::shared_ptr<const void>> signs_;  // the variant's signs stay in VRAM while the device draft lives
  std::shared_ptr<DeviceDraft> device_;
  DeviceTransfers start_;
  PassBatcher* batcher_;
};

}  // namespace

std::unique_ptr<DraftSource> make_host_draft(const Model& draft, KvCache& cache, const Variant* variant,
                                             PassBatcher* batcher) {
  return std::make_unique<HostDraft>(draft, cache, variant, batcher);
}

Result<std::unique_ptr<DraftSource>> make_device_draft(const Model& draft, int64_t n_slots, int64_t context,
                                                       const Variant* variant, PassBatcher* batcher) {
  if (!draft.has_planes()) return Status::error("the draft has no bit-split planes");
  // A variant's sign planes are made resident (or found resident) first, held for as long as
  // the device draft that fuses them. The base's device draft is kept by the backend for the
  // next generation on this model.
  std::vector<std::shared_ptr<const void>> signs;
  std::shared_ptr<DeviceDraft> device;
  BITSPLIT_RETURN_IF_ERROR(in_turn(batcher, [&]() -> Status {
    if (variant) {
      BITSPLIT_ASSIGN_OR_RETURN(signs, make_resident(draft, *variant));
    }
    // The base's draft is kept for reuse under a key per model and RoPE factor set: the address
    // of the set the context picks (a LongRoPE model's short and long drafts differ).
    const void* reuse_key = variant ? nullptr : static_cast<const void*>(&draft.rope_freq_factors(context));
    BITSPLIT_ASSIGN_OR_RETURN(device, draft.backend().make_device_draft(
                                          [&] { return describe_device_draft(draft, variant, context); }, n_slots,
                                          reuse_key));
    return Status::ok();
  }));
  return std::unique_ptr<DraftSource>(std::make_unique<DeviceDraftSource>(std::move(signs), std::move(device), batcher));
}

}  // namespace bitsplit
