// The 2-bit draft plane times int8-quantised activations on the GPU, bit-exact with the CPU
// reference (cpu::draft_matmul_ref); the kernel is kernels::draft_matmul (draft_kernels.cuh).
// This file keeps planes and variant sign planes resident and runs the kernel for the CPU's
// quantised activations (the per-projection path of the CUDA backend).
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <vector>

#include "bitsplit/gpu.h"
#include "cuda_util.h"
#include "draft_forward.cuh"

namespace bitsplit::gpu {
namespace {

struct ResidentSigns {
  DeviceBuffer<uint8_t> signs;  // out rows of groups * group / 8 bytes, zero past `in`
  DeviceBuffer<float> alpha;
  int64_t out = 0, in = 0, groups = 0;
  int group = 0;
  bool alpha_per_row = true;
};

struct ResidentPlane {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<uint16_t> scales, offsets;
  int64_t out = 0, in = 0, groups = 0;
  int group = 0, bits = 2;
};

class CudaDraftMatmul final : public DraftMatmul {
 public:
  explicit CudaDraftMatmul(int device) : device_(device) {}
  ~CudaDraftMatmul() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status upload(const void* key, const DraftPlaneView& p) override {
    if (auto it = planes_.find(key); it != planes_.end()) {
      const ResidentPlane& r = it->second;
      if (r.out != p.out || r.in != p.in || r.group != p.group || r.bits != p.bits) {
        return Status::error("another draft plane is already resident under this key");
      }
      return Status::ok();
    }
    if (p.bits != 2 && p.bits != 3 && p.bits != 4) {
      return Status::error("the GPU draft kernel takes 2-, 3- or 4-bit planes (got " + std::to_string(p.bits) + ")");
    }
    if (p.group % 8 != 0 || p.group <= 0) return Status::error("bad group size for the GPU draft kernel");
    // One block per output row (launch()).
    if (p.out <= 0 || p.out > 0x7fffffff) return Status::error("the GPU draft kernel needs 1 to 2^31 - 1 output rows");
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    ResidentPlane r;
    r.out = p.out;
    r.in = p.in;
    r.group = p.group;
    r.bits = p.bits;
    r.groups = (p.in + p.group - 1) / p.group;
    const size_t code_bytes = size_t(p.out * r.groups * p.group * p.bits / 8), n_scales = size_t(p.out * r.groups);
    BITSPLIT_RETURN_IF_ERROR(r.codes.allocate(code_bytes));
    BITSPLIT_RETURN_IF_ERROR(r.scales.allocate(n_scales));
    BITSPLIT_RETURN_IF_ERROR(r.offsets.allocate(n_scales));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(r.codes.get(), p.codes, code_bytes, cudaMemcpyHostToDevice), "upload codes"));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(r.scales.get(), p.scales, n_scales * 2, cudaMemcpyHostToDevice), "upload scales"));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(r.offsets.get(), p.offsets, n_scales * 2, cudaMemcpyHostToDevice), "upload offsets"));
    counters_.weight_bytes_to_device += code_bytes + 4 * n_scales;
    planes_.emplace(key, std::move(r));
    return Status::ok();
  }

  Status upload_signs(const void* key, const SignPlaneView& s, int group) override {
    if (auto it = signs_.find(key); it != signs_.end()) {
      const ResidentSigns& r = it->second;
      if (r.out != s.out || r.in != s.in || r.group != group || r.alpha_per_row != s.alpha_per_row) {
        return Status::error("another sign plane is already resident under this key");
      }
      return Status::ok();
    }
    if (group % 8 != 0 || group <= 0) return Status::error("sign planes need a group size that is a multiple of 8");
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    ResidentSigns r;
    r.out = s.out;
    r.in = s.in;
    r.group = group;
    r.groups = (s.in + group - 1) / group;
    r.alpha_per_row = s.alpha_per_row;
    const std::vector<uint8_t> host = kernels::pad_sign_rows(s, group);
    const size_t n_alpha = s.alpha_per_row ? size_t(s.out) : 1;
    BITSPLIT_RETURN_IF_ERROR(r.signs.allocate(host.size()));
    BITSPLIT_RETURN_IF_ERROR(r.alpha.allocate(n_alpha));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(r.signs.get(), host.data(), host.size(), cudaMemcpyHostToDevice), "upload signs"));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(r.alpha.get(), s.alpha, n_alpha * 4, cudaMemcpyHostToDevice), "upload sign scales"));
    counters_.weight_bytes_to_device += host.size() + 4 * n_alpha;
    signs_.emplace(key, std::move(r));
    return Status::ok();
  }

  bool resident(const void* key) const override { return planes_.count(key) != 0; }

  void release_signs(const void* key) override { signs_.erase(key); }

  // Stages the activations in pinned memory and queues copy in, kernel and copy out on the
  // stream; the caller is free until finish().
  Status start(const void* key, const QuantizedRowsView& x, const void* signs_key) override {
    if (pending_) return Status::error("DraftMatmul::start() while another call is pending (finish() it first)");
    auto it = planes_.find(key);
    if (it == planes_.end()) return Status::error("draft plane not resident on the GPU");
    const ResidentPlane& p = it->second;
    const ResidentSigns* sg = nullptr;
    if (signs_key) {
      auto si = signs_.find(signs_key);
      if (si == signs_.end()) return Status::error("sign plane not resident on the GPU");
      sg = &si->second;
      if (sg->out != p.out || sg->in != p.in || sg->group != p.group) {
        return Status::error("sign plane does not match the draft plane");
      }
    }
    if (x.groups != p.groups || x.padded != p.groups * p.group) {
      return Status::error("activations quantised for another plane shape");
    }
    if (x.rows <= 0) return Status::error("no activation rows");
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    if (!stream_) BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    const size_t q_bytes = size_t(x.rows * x.padded), s_count = size_t(x.rows * x.groups), y_count = size_t(x.rows * p.out);
    // Grow-only staging buffers: on the device, and pinned on the host (q | scales | sums in one copy).
    if (dq_.size() < q_bytes) BITSPLIT_RETURN_IF_ERROR(dq_.allocate(q_bytes));
    if (dscale_.size() < s_count) BITSPLIT_RETURN_IF_ERROR(dscale_.allocate(s_count));
    if (dsum_.size() < s_count) BITSPLIT_RETURN_IF_ERROR(dsum_.allocate(s_count));
    if (dy_.size() < y_count) BITSPLIT_RETURN_IF_ERROR(dy_.allocate(y_count));
    BITSPLIT_RETURN_IF_ERROR(pinned_in_.reserve(q_bytes + 8 * s_count));
    BITSPLIT_RETURN_IF_ERROR(pinned_out_.reserve(y_count * 4));
    uint8_t* in = pinned_in_.get();
    std::memcpy(in, x.q, q_bytes);
    std::memcpy(in + q_bytes, x.scale, s_count * 4);
    std::memcpy(in + q_bytes + 4 * s_count, x.sum, s_count * 4);
    auto queue = [&]() -> Status {
      BITSPLIT_RETURN_IF_ERROR(
          cuda_status(cudaMemcpyAsync(dq_.get(), in, q_bytes, cudaMemcpyHostToDevice, stream_), "copy activations"));
      BITSPLIT_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(dscale_.get(), in + q_bytes, s_count * 4, cudaMemcpyHostToDevice, stream_), "copy scales"));
      BITSPLIT_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(dsum_.get(), in + q_bytes + 4 * s_count, s_count * 4, cudaMemcpyHostToDevice, stream_),
          "copy sums"));
      launch(p, x.rows, sg, stream_);
      BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "draft_matmul launch"));
      return cuda_status(
          cudaMemcpyAsync(pinned_out_.get(), dy_.get(), y_count * 4, cudaMemcpyDeviceToHost, stream_), "copy results");
    };
    // Once work is queued, an error waits for it: the next start() reuses the pinned buffers.
    if (Status st = queue(); !st) {
      cudaStreamSynchronize(stream_);
      return st;
    }
    counters_.activation_bytes_to_device += q_bytes + 8 * s_count;
    pending_ = y_count;
    return Status::ok();
  }

  Status finish(float* y) override {
    if (!pending_) return Status::error("DraftMatmul::finish() without start()");
    const size_t y_count = pending_;
    pending_ = 0;
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "draft_matmul"));
    std::memcpy(y, pinned_out_.get(), y_count * 4);
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

  int device() const override { return device_; }

  DeviceSigns device_signs(const void* key) const override {
    auto it = signs_.find(key);
    if (it == signs_.end()) return {};
    const ResidentSigns& r = it->second;
    return {r.signs.get(), r.alpha.get(), r.alpha_per_row, r.out, r.in, r.group};
  }

  DevicePlane device_plane(const void* key) const override {
    auto it = planes_.find(key);
    if (it == planes_.end()) return {};
    const ResidentPlane& p = it->second;
    return {p.codes.get(), p.scales.get(), p.offsets.get(), p.out, p.in, p.group, p.bits};
  }

 private:
  // The one launch of the kernel on the staged activations of `rows` rows.
  void launch(const ResidentPlane& p, int64_t rows, const ResidentSigns* s = nullptr, cudaStream_t stream = nullptr) {
    if (p.bits == 2 && p.group == 64 && kernels::g64_rows_per_pass(p.groups) > 0) {  // 16-byte loads, dp4a: the same bits
      kernels::draft_matmul_g64<<<kernels::blocks_for(p.out, kernels::kG64Warps), kernels::kG64Threads,
                                  kernels::g64_shared_bytes(p.groups), stream>>>(
          p.codes.get(), p.scales.get(), p.offsets.get(), p.out, p.groups, dq_.get(), dscale_.get(), dsum_.get(), rows,
          p.groups * p.group, s ? s->signs.get() : nullptr, s ? s->alpha.get() : nullptr, s ? s->alpha_per_row : true,
          dy_.get());
      return;
    }
    kernels::draft_matmul<<<unsigned(p.out), kernels::kMatmulThreads, 0, stream>>>(
        p.codes.get(), p.scales.get(), p.offsets.get(), p.out, p.groups, p.group, p.bits, dq_.get(), dscale_.get(),
        dsum_.get(), rows, p.groups * p.group, s ? s->signs.get() : nullptr, s ? s->alpha.get() : nullptr,
        s ? s->alpha_per_row : true, dy_.get());
  }

  int device_;
  std::map<const void*, ResidentPlane> planes_;
  std::map<const void*, ResidentSigns> signs_;
  DeviceBuffer<int8_t> dq_;
  DeviceBuffer<float> dscale_, dy_;
  DeviceBuffer<int32_t> dsum_;
  TransferCounters counters_;
  cudaStream_t stream_ = nullptr;  // blocking: orders with the legacy default stream time_kernel uses
  PinnedBuffer pinned_in_, pinned_out_;
  size_t pending_ = 0;  // result values of a started call, 0 when none
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
