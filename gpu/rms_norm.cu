// Host launcher of the RMSNorm kernel (kernels::rms_norm_rows: one block per row, the sum of
// squares in double as cpu::rms_norm_f32).
#include <cuda_runtime.h>

#include <cstdint>

#include "bitsplit/gpu.h"
#include "cuda_util.h"
#include "draft_kernels.cuh"

namespace bitsplit::gpu {

Status rms_norm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* y, int device) {
  if (rows <= 0 || n <= 0) return Status::error("gpu::rms_norm: rows and n must be positive");
  if (rows > 0x7fffffff) return Status::error("gpu::rms_norm: too many rows for one launch");
  BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  DeviceBuffer<float> dx, dw, dy;
  const size_t count = size_t(rows * n);
  BITSPLIT_RETURN_IF_ERROR(dx.allocate(count));
  BITSPLIT_RETURN_IF_ERROR(dw.allocate(size_t(n)));
  BITSPLIT_RETURN_IF_ERROR(dy.allocate(count));
  BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dx.get(), x, count * sizeof(float), cudaMemcpyHostToDevice), "copy x"));
  BITSPLIT_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(dw.get(), weight, size_t(n) * sizeof(float), cudaMemcpyHostToDevice), "copy weight"));
  kernels::rms_norm_rows<<<unsigned(rows), kernels::kBlock>>>(dx.get(), dw.get(), n, eps, dy.get());
  BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "rms_norm_rows launch"));
  return cuda_status(cudaMemcpy(y, dy.get(), count * sizeof(float), cudaMemcpyDeviceToHost), "copy y");
}

}  // namespace bitsplit::gpu
