// Where the planes are computed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bitsplit/cpu.h"
#include "bitsplit/device_draft.h"
#include "bitsplit/gpu.h"
#include "bitsplit/planes.h"
#include "bitsplit/status.h"

namespace bitsplit {

// Where a model's planes are computed: D·X on the backend (the CPU's plane kernels, or a GPU
// with the planes in VRAM), R·X always on the CPU, and, where the backend offers it, the whole
// draft forward pass on its device. The model layer hands it planes and descriptions, never
// the Model itself. Implementations must produce exactly the CPU kernels' results
// (docs/FORMAT.md, "Kernel arithmetic"), so the target's logits do not depend on where D·X ran.
class Backend : public std::enable_shared_from_this<Backend> {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Makes a plane resident (a GPU backend uploads it once, at load time).
  virtual Status prepare(const SplitProjection& planes) {
    (void)planes;
    return Status::ok();
  }
  // Makes a variant's sign plane for `planes` resident next to D for as long as the returned
  // handle (or a copy of it) lives; null when the backend keeps nothing (the CPU fuses the
  // signs from host memory). A variant keeps its handles while anyone uses it, so a variant
  // evicted from a cache mid-generation stays resident until that generation ends.
  virtual Result<std::shared_ptr<const void>> make_signs_resident(const SplitProjection& planes,
                                                                  const cpu::SignPlaneView& signs) {
    (void)planes;
    (void)signs;
    return std::shared_ptr<const void>();
  }
  // y[rows x out] = D · X for the quantised activations; with `delta`, (D + α ⊙ S) · X for a
  // BitDelta variant (docs/FORMAT.md, "Kernel arithmetic").
  virtual Status draft_matmul(const SplitProjection& planes, const cpu::QuantizedActivations& x, float* y,
                              const cpu::SignPlaneView* delta = nullptr) = 0;
  // The target's D·X (+ signs) into y on the backend while `residual_work` (the CPU's R·X)
  // runs on the calling thread; returns when both are done. A GPU backend overlaps them (the
  // copies and its kernel run while the CPU streams R); the default runs one after the other.
  virtual Status target_matmul(const SplitProjection& planes, const cpu::QuantizedActivations& x, float* y,
                               const cpu::SignPlaneView* delta, const std::function<void()>& residual_work) {
    BITSPLIT_RETURN_IF_ERROR(draft_matmul(planes, x, y, delta));
    residual_work();
    return Status::ok();
  }
  // Whether the backend reads the draft plane's file layout after load (a GPU backend's CPU
  // fallback does); if not, Model::load frees it once the CPU's packed copy exists.
  virtual bool reads_file_layout() const { return true; }
  // Where the draft planes went (a GPU backend under a VRAM budget); "" when there is nothing to say.
  virtual std::string placement() const { return ""; }
  virtual DeviceTransfers transfers() const { return {}; }
  // The whole draft forward pass (not just D·X) on the backend's device, with a K/V cache of
  // n_slots slots there (device_draft.h). `describe` gives the draft's description
  // (draft_description.h in engine/model/ builds it from a model and a variant); it is called only when the
  // backend can run a device draft at all. With `reuse_key` the device draft is kept and handed
  // out again for the same key while idle (the base's; null for a variant's). An error says why
  // the backend cannot (the CPU backend runs the draft in forward_pass; a GPU backend whose
  // planes did not all fit in VRAM).
  using DescribeDraft = std::function<Result<gpu::DraftModelHost>()>;
  virtual Result<std::shared_ptr<DeviceDraft>> make_device_draft(const DescribeDraft& describe, int64_t n_slots,
                                                                  const void* reuse_key) {
    (void)describe;
    (void)n_slots;
    (void)reuse_key;
    return Status::error("the " + name() + " backend runs the draft's projections only");
  }
};

// The CPU backend, on the model's CpuContext.
std::shared_ptr<Backend> make_cpu_backend(std::shared_ptr<cpu::CpuContext> cpu);
// The CUDA backend on `device` (2-bit planes in VRAM; other widths run on the CPU). Planes go
// to VRAM in the order Model::load prepares them (layer order, vram_plan.h) while they fit in
// `vram_budget` (default: free memory minus a margin); the rest are drafted on the CPU.
Result<std::shared_ptr<Backend>> make_cuda_backend(std::shared_ptr<cpu::CpuContext> cpu, int device,
                                                   std::optional<uint64_t> vram_budget = std::nullopt);
// The one place the CPU/GPU choice is made: CUDA when this build has it, a device exists and
// BITSPLIT_DEVICE is not "cpu"; otherwise the CPU. `why` says which and why (one log line).
std::shared_ptr<Backend> choose_backend(std::shared_ptr<cpu::CpuContext> cpu, std::string* why,
                                        std::optional<uint64_t> vram_budget = std::nullopt);

}  // namespace bitsplit
