// The 2-bit draft plane times int8-quantised activations on the GPU, bit-exact with the CPU
// reference (cpu::draft_matmul_ref): per group an exact integer dot product, then
// inner = fma(s, float(Sq), m * float(Sx)) and acc = fma(s_x, inner, acc) in group order.
// One block per output row; one thread per activation row, so each output element is
// accumulated by one thread in the reference's order.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <map>

#include "bitsplit/gpu.h"
#include "cuda_util.h"

namespace bitsplit::gpu {
namespace {

constexpr int kThreads = 64;

__device__ __forceinline__ float half_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__global__ void draft_matmul_kernel(const uint8_t* __restrict__ codes, const uint16_t* __restrict__ scales,
                                    const uint16_t* __restrict__ offsets, int64_t out, int64_t groups, int group,
                                    const int8_t* __restrict__ q, const float* __restrict__ sx,
                                    const int32_t* __restrict__ sum, int64_t rows, int64_t padded,
                                    float* __restrict__ y) {
  const int64_t o = blockIdx.x;
  const int64_t row_bytes = groups * group / 4;  // 2-bit codes
  const uint8_t* orow = codes + o * row_bytes;
  const int plane_bytes = group / 4;
  for (int64_t n = threadIdx.x; n < rows; n += blockDim.x) {
    const int8_t* qn = q + n * padded;
    float acc = 0.0f;
    for (int64_t k = 0; k < groups; ++k) {
      const uint8_t* g = orow + k * plane_bytes;
      const int8_t* qg = qn + k * group;
      int32_t sq = 0;
      for (int j = 0; j < plane_bytes; ++j) {
        const uint32_t b = g[j];
        // Byte j holds the weights j + t * plane_bytes at bits 2t.
        sq += int32_t(b & 3u) * int32_t(qg[j]) + int32_t((b >> 2) & 3u) * int32_t(qg[j + plane_bytes]) +
              int32_t((b >> 4) & 3u) * int32_t(qg[j + 2 * plane_bytes]) +
              int32_t((b >> 6) & 3u) * int32_t(qg[j + 3 * plane_bytes]);
      }
      const float s = half_bits_to_float(scales[o * groups + k]);
      const float m = half_bits_to_float(offsets[o * groups + k]);
      const float fsx = __int2float_rn(sum[n * groups + k]);
      const float inner = __fmaf_rn(s, __int2float_rn(sq), __fmul_rn(m, fsx));
      acc = __fmaf_rn(sx[n * groups + k], inner, acc);
    }
    y[n * out + o] = acc;
  }
}

struct ResidentPlane {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<uint16_t> scales, offsets;
  int64_t out = 0, in = 0, groups = 0;
  int group = 0;
};

class CudaDraftMatmul final : public DraftMatmul {
 public:
  explicit CudaDraftMatmul(int device) : device_(device) {}

  Status upload(const void* key, const DraftPlaneHost& p) override {
    if (planes_.count(key)) return Status::ok();
    if (p.bits != 2) return Status::error("the GPU draft kernel supports 2-bit planes only (got " + std::to_string(p.bits) + ")");
    if (p.group % 4 != 0 || p.group <= 0) return Status::error("bad group size for the GPU draft kernel");
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    ResidentPlane r;
    r.out = p.out;
    r.in = p.in;
    r.group = p.group;
    r.groups = (p.in + p.group - 1) / p.group;
    const size_t code_bytes = size_t(p.out * r.groups * p.group / 4), n_scales = size_t(p.out * r.groups);
    BITSPLIT_RETURN_IF_ERROR(r.codes.allocate(code_bytes));
    BITSPLIT_RETURN_IF_ERROR(r.scales.allocate(n_scales));
    BITSPLIT_RETURN_IF_ERROR(r.offsets.allocate(n_scales));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(r.codes.get(), p.codes, code_bytes, cudaMemcpyHostToDevice), "upload codes"));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(r.scales.get(), p.scales, n_scales * 2, cudaMemcpyHostToDevice), "upload scales"));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(r.offsets.get(), p.offsets, n_scales * 2, cudaMemcpyHostToDevice), "upload offsets"));
    counters_.weight_bytes_to_device += code_bytes + 4 * n_scales;
    resident_ += code_bytes + 4 * n_scales;
    planes_.emplace(key, std::move(r));
    return Status::ok();
  }

  Status run(const void* key, const QuantizedRowsHost& x, float* y) override {
    auto it = planes_.find(key);
    if (it == planes_.end()) return Status::error("draft plane not resident on the GPU");
    const ResidentPlane& p = it->second;
    if (x.groups != p.groups || x.padded != p.groups * p.group) {
      return Status::error("activations quantised for another plane shape");
    }
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    const size_t q_bytes = size_t(x.rows * x.padded), s_count = size_t(x.rows * x.groups), y_count = size_t(x.rows * p.out);
    // Grow-only staging buffers on the device.
    if (dq_.size() < q_bytes) BITSPLIT_RETURN_IF_ERROR(dq_.allocate(q_bytes));
    if (dscale_.size() < s_count) BITSPLIT_RETURN_IF_ERROR(dscale_.allocate(s_count));
    if (dsum_.size() < s_count) BITSPLIT_RETURN_IF_ERROR(dsum_.allocate(s_count));
    if (dy_.size() < y_count) BITSPLIT_RETURN_IF_ERROR(dy_.allocate(y_count));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dq_.get(), x.q, q_bytes, cudaMemcpyHostToDevice), "copy activations"));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(dscale_.get(), x.scale, s_count * 4, cudaMemcpyHostToDevice), "copy scales"));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dsum_.get(), x.sum, s_count * 4, cudaMemcpyHostToDevice), "copy sums"));
    counters_.activation_bytes_to_device += q_bytes + 8 * s_count;
    if (p.out > 0x7fffffff) return Status::error("too many output rows for one launch");
    launch(p, x.rows);
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "draft_matmul_kernel launch"));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(y, dy_.get(), y_count * 4, cudaMemcpyDeviceToHost), "copy results"));
    counters_.result_bytes_to_host += y_count * 4;
    ++counters_.calls;
    return Status::ok();
  }

  Result<double> time_kernel(const void* key, int64_t rows, int iterations) override {
    auto it = planes_.find(key);
    if (it == planes_.end()) return Status::error("draft plane not resident on the GPU");
    const ResidentPlane& p = it->second;
    if (dq_.size() < size_t(rows * p.groups * p.group) || dy_.size() < size_t(rows * p.out)) {
      return Status::error("run() the plane with at least this many rows first");
    }
    BITSPLIT_ASSIGN_OR_RETURN(double ms, time_on_device(iterations, [&] { launch(p, rows); }));
    return ms / 1e3;
  }

  TransferCounters counters() const override { return counters_; }

 private:
  // The one launch of the kernel on the staged activations of `rows` rows.
  void launch(const ResidentPlane& p, int64_t rows) {
    draft_matmul_kernel<<<unsigned(p.out), kThreads>>>(p.codes.get(), p.scales.get(), p.offsets.get(), p.out, p.groups,
                                                         p.group, dq_.get(), dscale_.get(), dsum_.get(), rows,
                                                         p.groups * p.group, dy_.get());
  }

 public:
  uint64_t resident_bytes() const override { return resident_; }

 private:
  int device_;
  std::map<const void*, ResidentPlane> planes_;
  DeviceBuffer<int8_t> dq_;
  DeviceBuffer<float> dscale_, dy_;
  DeviceBuffer<int32_t> dsum_;
  TransferCounters counters_;
  uint64_t resident_ = 0;
};

}  // namespace

Result<std::unique_ptr<DraftMatmul>> DraftMatmul::create(int device) {
  if (device < 0 || device >= device_count()) {
    return Status::error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(device_count()) +
                         " found)");
  }
  return std::unique_ptr<DraftMatmul>(std::make_unique<CudaDraftMatmul>(device));
}

}  // namespace bitsplit::gpu

namespace bitsplit::gpu {

Result<double> measure_copy_bandwidth(uint64_t bytes, int iterations, int device) {
  BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  DeviceBuffer<uint8_t> a, b;
  BITSPLIT_RETURN_IF_ERROR(a.allocate(bytes));
  BITSPLIT_RETURN_IF_ERROR(b.allocate(bytes));
  cudaMemset(a.get(), 1, bytes);
  BITSPLIT_ASSIGN_OR_RETURN(double ms, time_on_device(iterations, [&] {
    cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice);
  }));
  return 2.0 * double(bytes) / (ms / 1e3);  // a copy reads and writes every byte
}

}  // namespace bitsplit::gpu
