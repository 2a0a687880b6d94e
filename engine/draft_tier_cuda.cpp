// The CUDA draft tier: D·X on the GPU with the CPU kernels' exact arithmetic, planes resident
// in VRAM, only quantised activations and results crossing PCIe.
#include <cstdlib>
#include <cstring>

#include "bitsplit/gpu.h"
#include "bitsplit/model.h"

namespace bitsplit {
namespace {

class CudaDraftTier final : public DraftTier {
 public:
  CudaDraftTier(std::unique_ptr<gpu::DraftMatmul> gpu, std::shared_ptr<cpu::CpuContext> cpu, int device)
      : gpu_(std::move(gpu)), cpu_(std::move(cpu)), device_(device) {}

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  Status prepare(const SplitProjection& p) override {
    if (p.draft_bits != 2) return Status::ok();  // computed on the CPU
    return gpu_->upload(&p, {p.draft_codes.data(), p.draft_scales.data(), p.draft_offsets.data(), p.out, p.in, p.group,
                             p.draft_bits});
  }

  Status draft_matmul(const SplitProjection& p, const cpu::QuantizedActivations& x, float* y,
                      const cpu::SignPlaneView* delta) override {
    if (p.draft_bits != 2) {
      cpu::draft_matmul(*cpu_, p.draft(), x, y, delta);
      return Status::ok();
    }
    const gpu::QuantizedRowsHost rows{x.q.data(), x.scale.data(), x.sum.data(), x.rows, x.padded, x.groups};
    if (!delta) return gpu_->run(&p, rows, y);
    // A variant's signs join D in the same kernel; they are uploaded when the variant is
    // prepared (prepare_delta), or here on first use.
    BITSPLIT_RETURN_IF_ERROR(prepare_delta(p, *delta));
    return gpu_->run(&p, rows, y, delta->signs);
  }

  Status prepare_delta(const SplitProjection& p, const cpu::SignPlaneView& d) override {
    if (p.draft_bits != 2) return Status::ok();  // that draft runs on the CPU, signs fused there
    return gpu_->upload_signs(d.signs, {d.signs, d.alpha, d.out, d.in, d.row_bytes, d.alpha_per_row}, p.group);
  }

  Transfers transfers() const override {
    const gpu::TransferCounters c = gpu_->counters();
    return {c.weight_bytes_to_device, c.activation_bytes_to_device, c.result_bytes_to_host, c.calls};
  }

 private:
  std::unique_ptr<gpu::DraftMatmul> gpu_;
  std::shared_ptr<cpu::CpuContext> cpu_;
  int device_;
};

}  // namespace

Result<std::shared_ptr<DraftTier>> make_cuda_draft_tier(std::shared_ptr<cpu::CpuContext> cpu, int device) {
  BITSPLIT_ASSIGN_OR_RETURN(auto gpu, gpu::DraftMatmul::create(device));
  return std::shared_ptr<DraftTier>(std::make_shared<CudaDraftTier>(std::move(gpu), std::move(cpu), device));
}

std::shared_ptr<DraftTier> choose_draft_tier(std::shared_ptr<cpu::CpuContext> cpu, std::string* why) {
  const char* env = std::getenv("BITSPLIT_DEVICE");
  std::string reason;
  if (env && std::strcmp(env, "cpu") == 0) {
    reason = "BITSPLIT_DEVICE=cpu";
  } else if (!gpu::compiled_with_cuda()) {
    reason = "this build has no CUDA support";
  } else if (gpu::device_count() == 0) {
    reason = "no CUDA device found";
  } else {
    auto tier = make_cuda_draft_tier(cpu, 0);
    if (tier) {
      auto desc = gpu::describe_device(0);
      if (why) *why = "draft tier: CUDA device 0" + (desc ? " (" + *desc + ")" : std::string());
      return *tier;
    }
    reason = tier.status().message();
  }
  if (why) *why = "draft tier: CPU (" + reason + ")";
  return make_cpu_draft_tier(std::move(cpu));
}

}  // namespace bitsplit
