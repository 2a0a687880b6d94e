// The CUDA backend: D·X on the GPU with the CPU kernels' exact arithmetic, planes resident in
// VRAM, only quantised activations and results crossing PCIe; the whole draft on the device.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "bitsplit/backend.h"
#include "bitsplit/device_draft.h"
#include "bitsplit/gpu.h"
#include "bitsplit/spec.h"
#include "bitsplit/vram_plan.h"

namespace bitsplit {
namespace {

// Rows of one draft batch: a tree level's frontier, at most the largest budget.
constexpr int64_t kMaxDraftRows = spec::kMaxBudget;

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<gpu::DraftMatmul> gpu, std::shared_ptr<cpu::CpuContext> cpu, int device,
                uint64_t budget)
      : gpu_(std::move(gpu)), cpu_(std::move(cpu)), device_(device), budget_(budget) {}

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  // Planes arrive in placement order (Model::load); they go to VRAM while the budget lasts,
  // and from the first that does not fit on, the CPU drafts them: vram_plan.h's plan_vram over
  // the planes seen so far decides (a few hundred planes, once, at load time). prepare() gets
  // no weight name, so a plane is named by its position and its shape. Planes of 2, 3 and 4 bits
  // all go (a mixed-precision draft, `convert --draft-bpw`).
  Status prepare(const SplitProjection& p) override {
    const uint64_t bytes = p.draft_codes.size() + 2 * (p.draft_scales.size() + p.draft_offsets.size());
    planes_.push_back({"plane " + std::to_string(planes_.size() + 1) + " in placement order (" + std::to_string(p.out) +
                           " x " + std::to_string(p.in) + ")",
                       bytes});
    if (plan_vram(planes_, budget_).host_planes > 0) return Status::ok();  // this plane or an earlier one did not fit
    return gpu_->upload(&p, p.draft());
  }

  std::string placement() const override { return plan_vram(planes_, budget_).summary(); }

  // D·X alone is the target's call with nothing for the CPU to do meanwhile.
  Status draft_matmul(const SplitProjection& p, const cpu::QuantizedActivations& x, float* y,
                      const cpu::SignPlaneView* delta) override {
    return target_matmul(p, x, y, delta, [] {});
  }

  Status target_matmul(const SplitProjection& p, const cpu::QuantizedActivations& x, float* y,
                       const cpu::SignPlaneView* delta, const std::function<void()>& residual_work) override {
    if (!gpu_->resident(&p)) {
      p.cpu_draft_matmul(*cpu_, x, y, delta);
      residual_work();
      return Status::ok();
    }
    // A variant's signs join D in the same kernel when they are resident (make_signs_resident,
    // held by the variant); otherwise the GPU computes D·X and the CPU adds the signs' term
    // afterwards, bit for bit the fused result (cpu::sign_delta_accumulate). Nothing is
    // uploaded here, so no sign plane outlives the variant that owns it.
    const bool fused = delta && gpu_->device_signs(delta->signs).signs != nullptr;
    BITSPLIT_RETURN_IF_ERROR(gpu_->start(&p, x.view(), fused ? delta->signs : nullptr));
    residual_work();  // R·X while the GPU copies, computes and copies back
    BITSPLIT_RETURN_IF_ERROR(gpu_->finish(y));
    if (delta && !fused) cpu::sign_delta_accumulate(*cpu_, *delta, x, y);
    return Status::ok();
  }

  // One handle per resident sign plane, shared by everyone who asks for it (the variant, a
  // variant's device draft); the signs leave VRAM when the last copy goes.
  Result<std::shared_ptr<const void>> make_signs_resident(const SplitProjection& p,
                                                          const cpu::SignPlaneView& d) override {
    if (!gpu_->resident(&p)) return std::shared_ptr<const void>();  // signs fused on the CPU
    std::lock_guard<std::mutex> lock(signs_mu_);
    std::weak_ptr<const void>& entry = signs_[d.signs];
    if (auto held = entry.lock()) return held;
    BITSPLIT_RETURN_IF_ERROR(
        gpu_->upload_signs(d.signs, d, p.group));
    // The handle keeps this backend alive until the signs are freed.
    auto self = std::static_pointer_cast<CudaBackend>(shared_from_this());
    std::shared_ptr<const void> handle(d.signs, [self](const void* key) { self->release_signs(key); });
    entry = handle;
    return handle;
  }

  // The whole draft on the device needs every plane in VRAM and room for the embedding, the
  // K/V cache and scratch in what the budget leaves; otherwise the error says what is missing
  // and speculative decoding keeps the per-projection path.
  Result<std::shared_ptr<DeviceDraft>> make_device_draft(const DescribeDraft& describe, int64_t n_slots,
                                                          const void* reuse_key) override {
    const VramPlan plan = plan_vram(planes_, budget_);
    if (plan.host_planes > 0) {
      return Status::error(std::to_string(plan.host_planes) + " draft planes are drafted on the CPU under the VRAM budget");
    }
    BITSPLIT_ASSIGN_OR_RETURN(const gpu::DraftModelHost m, describe());
    const ModelShape& s = m.shape;
    const DeviceDraftBytes extra = device_draft_bytes(s.n_layers, s.n_embd, s.n_heads, s.n_kv_heads, s.head_dim, s.n_ff,
                                                      s.n_vocab, n_slots, kMaxDraftRows,
                                                      {s.n_expert, s.n_expert_used, s.n_ff_exp, s.n_ff_shexp});
    if (plan.device_bytes + extra.total() > budget_) {
      return Status::error("the whole draft needs " + extra.summary() + " beside its planes (" +
                           format_bytes(plan.device_bytes) + "); the VRAM budget is " + format_bytes(budget_));
    }
    // The base's device draft is kept for the next generation on this model (its embedding
    // upload and allocations are the expensive part); it is handed out only when no one else
    // holds it, and dropped before anything else is built (its VRAM is not in the plan above).
    const bool idle = cached_ && cached_.use_count() == 1;
    if (idle && reuse_key && cached_key_ == reuse_key && cached_->n_slots() >= n_slots) return cached_;
    if (idle) cached_.reset();
    BITSPLIT_ASSIGN_OR_RETURN(auto model, gpu::DraftModel::create(*gpu_, m, n_slots, kMaxDraftRows));
    auto made = wrap_device_draft(std::move(model), name(), s.n_vocab, n_slots);
    if (reuse_key && !cached_) {
      cached_ = made;
      cached_key_ = reuse_key;
    }
    return made;
  }

  DeviceTransfers transfers() const override {
    const gpu::TransferCounters c = gpu_->counters();
    return {c.weight_bytes_to_device, c.activation_bytes_to_device, c.result_bytes_to_host, c.calls};
  }

 private:
  void release_signs(const void* key) {
    std::lock_guard<std::mutex> lock(signs_mu_);
    auto it = signs_.find(key);
    if (it == signs_.end() || !it->second.expired()) return;  // a newer handle holds them again
    signs_.erase(it);
    gpu_->release_signs(key);
  }

  std::unique_ptr<gpu::DraftMatmul> gpu_;
  std::shared_ptr<cpu::CpuContext> cpu_;
  int device_;
  uint64_t budget_;
  std::vector<DraftPlaneSize> planes_;  // every draft plane prepared, in order
  std::shared_ptr<DeviceDraft> cached_;  // the base's device draft, for the next generation
  const void* cached_key_ = nullptr;
  std::mutex signs_mu_;
  std::map<const void*, std::weak_ptr<const void>> signs_;  // resident sign planes by key
};

}  // namespace

Result<std::shared_ptr<Backend>> make_cuda_backend(std::shared_ptr<cpu::CpuContext> cpu, int device,
                                                   std::optional<uint64_t> vram_budget) {
  BITSPLIT_ASSIGN_OR_RETURN(auto gpu, gpu::DraftMatmul::create(device));
  uint64_t budget = 0;
  if (vram_budget) {
    budget = *vram_budget;
  } else {
    BITSPLIT_ASSIGN_OR_RETURN(budget, default_vram_budget(device));
  }
  return std::shared_ptr<Backend>(std::make_shared<CudaBackend>(std::move(gpu), std::move(cpu), device, budget));
}

std::shared_ptr<Backend> choose_backend(std::shared_ptr<cpu::CpuContext> cpu, std::string* why,
                                        std::optional<uint64_t> vram_budget) {
  const char* env = std::getenv("BITSPLIT_DEVICE");
  std::string reason;
  if (env && std::strcmp(env, "cpu") == 0) {
    reason = "BITSPLIT_DEVICE=cpu";
  } else if (!gpu::compiled_with_cuda()) {
    reason = "this build has no CUDA support";
  } else if (gpu::device_count() == 0) {
    reason = "no CUDA device found";
  } else {
    auto tier = make_cuda_backend(cpu, 0, vram_budget);
    if (tier) {
      auto desc = gpu::describe_device(0);
      if (why) *why = "backend: CUDA device 0" + (desc ? " (" + *desc + ")" : std::string());
      return *tier;
    }
    reason = tier.status().message();
  }
  if (why) *why = "backend: CPU (" + reason + ")";
  return make_cpu_backend(std::move(cpu));
}

}  // namespace bitsplit
