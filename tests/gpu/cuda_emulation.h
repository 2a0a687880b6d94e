// Runs the CUDA kernels of gpu/draft_kernels.cuh on the CPU, so their logic is tested in every
// CI run (there is no GPU in CI). Each block's threads are real std::threads sharing the
// block's __shared__ arrays (function statics: blocks run one after another) and meeting at a
// std::barrier for __syncthreads(), so a missing barrier or a wrong index shows up as a wrong
// result here. Arithmetic is the host's; the device's libm (expf, powf, ...) may differ by an
// ulp, which the GPU tests (label `gpu`) cover on real hardware.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "bitsplit/quant.h"

struct EmulatedDim3 {
  unsigned x = 1, y = 1, z = 1;
};

inline thread_local EmulatedDim3 threadIdx;
inline thread_local EmulatedDim3 blockIdx;
inline EmulatedDim3 blockDim;
inline EmulatedDim3 gridDim;
inline thread_local std::barrier<>* emulated_block_barrier = nullptr;

inline void __syncthreads() {
  if (!emulated_block_barrier) {
    std::fprintf(stderr, "cuda_emulation: __syncthreads() in a kernel launched with BS_LAUNCH (use BS_LAUNCH_SYNC)\n");
    std::abort();
  }
  emulated_block_barrier->arrive_and_wait();
}

struct uint4 {
  unsigned x, y, z, w;
};
// Four signed byte products summed into c (CUDA's __dp4a(int, int, int)).
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return c;
}
// The dynamic shared memory of the running launch (blocks run one after another).
inline std::vector<unsigned char> emulated_dynamic_shared;

inline float bs_emulated_half_to_float(uint16_t h) { return bitsplit::quant::fp16_to_fp32(h); }

// The threads of one emulated block: `n` workers kept alive between launches (creating
// threads per block would dominate the tests' time), meeting at three barriers: start of a
// block, __syncthreads() inside it, end of it. The launching thread joins start and end.
class EmulatedBlockPool {
 public:
  explicit EmulatedBlockPool(unsigned n)
      : n_(n), start_(std::ptrdiff_t(n) + 1), done_(std::ptrdiff_t(n) + 1), sync_(std::ptrdiff_t(n)) {
    for (unsigned t = 0; t < n; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ~EmulatedBlockPool() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& w : workers_) w.join();
  }
  unsigned size() const { return n_; }
  template <typename Body>
  void run(unsigned blocks, Body& body) {
    body_ = [&body] { body(); };
    for (unsigned b = 0; b < blocks; ++b) {
      block_ = b;
      start_.arrive_and_wait();
      done_.arrive_and_wait();
    }
  }

 private:
  void work(unsigned t) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      blockIdx = {block_, 1, 1};
      threadIdx = {t, 1, 1};
      emulated_block_barrier = &sync_;
      body_();
      done_.arrive_and_wait();
    }
  }
  unsigned n_;
  std::barrier<> start_, done_, sync_;
  std::vector<std::thread> workers_;
  std::function<void()> body_;
  unsigned block_ = 0;
  bool stop_ = false;  // written before the start barrier the workers then pass
};

// kernel<<<blocks, threads>>>(...) for a kernel with __syncthreads: the block's threads run
// concurrently (a pool of that many threads); blocks run one after another.
template <typename Body>
void emulate_launch(unsigned blocks, unsigned threads, Body body, size_t shared_bytes = 0) {
  emulated_dynamic_shared.assign(shared_bytes, 0xcd);  // garbage, as on a GPU
  static std::unique_ptr<EmulatedBlockPool> pool;
  if (!pool || pool->size() != threads) pool = std::make_unique<EmulatedBlockPool>(threads);
  gridDim = {blocks, 1, 1};
  blockDim = {threads, 1, 1};
  pool->run(blocks, body);
}

// A kernel without __syncthreads: its threads run one after another on the calling thread.
template <typename Body>
void emulate_launch_serial(unsigned blocks, unsigned threads, Body body) {
  gridDim = {blocks, 1, 1};
  blockDim = {threads, 1, 1};
  emulated_block_barrier = nullptr;  // __syncthreads() here is a bug: BS_LAUNCH_SYNC is needed
  for (unsigned b = 0; b < blocks; ++b) {
    for (unsigned t = 0; t < threads; ++t) {
      blockIdx = {b, 1, 1};
      threadIdx = {t, 1, 1};
      body();
    }
  }
}

#define BITSPLIT_CUDA_EMULATION 1
#include "../../gpu/draft_forward.cuh"
