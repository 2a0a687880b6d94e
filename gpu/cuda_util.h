// Internal CUDA helpers: error-to-Status conversion and an RAII device buffer.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "bitsplit/status.h"

namespace bitsplit::gpu {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status::error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) {
    o.ptr_ = nullptr;
    o.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }

  Status allocate(size_t count) {
    reset();
    if (count == 0) return Status::ok();
    cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T));
    if (e != cudaSuccess) {
      ptr_ = nullptr;
      return Status::error("cannot allocate " + std::to_string(count * sizeof(T)) + " bytes of GPU memory: " +
                           cudaGetErrorString(e));
    }
    count_ = count;
    return Status::ok();
  }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Page-locked host memory for per-call copies (true asynchronous DMA transfers), grow-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Makes room for `bytes` (keeps the buffer when it is large enough; contents are not kept).
  Status reserve(size_t bytes) {
    if (bytes <= size_) return Status::ok();
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    if (cudaError_t e = cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault); e != cudaSuccess) {
      ptr_ = nullptr;
      return Status::error("cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory: " +
                           cudaGetErrorString(e));
    }
    size_ = bytes;
    return Status::ok();
  }
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// Times `body` (called `iterations` times) on the device with RAII-held CUDA events;
// milliseconds per iteration.
template <typename Body>
Result<double> time_on_device(int iterations, Body body) {
  struct Event {
    cudaEvent_t e = nullptr;
    Event() { cudaEventCreate(&e); }
    ~Event() {
      if (e) cudaEventDestroy(e);
    }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
  } start, stop;
  cudaEventRecord(start.e);
  for (int i = 0; i < iterations; ++i) body();
  cudaEventRecord(stop.e);
  cudaEventSynchronize(stop.e);
  float ms = 0;
  cudaEventElapsedTime(&ms, start.e, stop.e);
  BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "timed device work"));
  return double(ms) / iterations;
}

}  // namespace bitsplit::gpu
