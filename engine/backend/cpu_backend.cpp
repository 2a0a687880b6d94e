// The CPU backend: D·X with the plane kernels on the model's CpuContext.
#include "bitsplit/backend.h"

namespace bitsplit {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<cpu::CpuContext> cpu) : cpu_(std::move(cpu)) {}
  std::string name() const override { return "cpu"; }
  bool reads_file_layout() const override { return false; }  // drafts from the packed planes
  Status draft_matmul(const SplitProjection& planes, const cpu::QuantizedActivations& x, float* y,
                      const cpu::SignPlaneView* delta) override {
    planes.cpu_draft_matmul(*cpu_, x, y, delta);
    return Status::ok();
  }

 private:
  std::shared_ptr<cpu::CpuContext> cpu_;
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend(std::shared_ptr<cpu::CpuContext> cpu) {
  return std::make_shared<CpuBackend>(std::move(cpu));
}

}  // namespace bitsplit
