// RMSNorm kernel: one block per row, warp-shuffle reduction of the sum of squares.
#include <cuda_runtime.h>

#include <cstdint>

#include "bitsplit/gpu.h"
#include "cuda_util.h"

namespace bitsplit::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t n, float eps,
                                float* __restrict__ y) {
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += xr[i] * xr[i];
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sums[0] = sum;
  }
  __syncthreads();
  const float scale = rsqrtf(warp_sums[0] / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

}  // namespace

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
  rms_norm_kernel<<<unsigned(rows), kThreads>>>(dx.get(), dw.get(), n, eps, dy.get());
  BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "rms_norm_kernel launch"));
  return cuda_status(cudaMemcpy(y, dy.get(), count * sizeof(float), cudaMemcpyDeviceToHost), "copy y");
}

}  // namespace bitsplit::gpu
