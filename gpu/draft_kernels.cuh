// The draft model's device kernels: the 2-bit matmul (bit-exact with cpu::draft_matmul_ref)
// and the ops around it (embedding gather, RMSNorm, activation quantisation, bias, RoPE, K/V
// writes, tree-masked attention, SwiGLU, residual add, top-k of the logits).
//
// Written in a small subset of CUDA (1-D grids, __syncthreads, __shared__ arrays, no warp
// intrinsics) so that the same source also compiles as plain C++ under the CPU emulation in
// tests/gpu/cuda_emulation.h: the kernels' logic (indexing, reductions, synchronisation) is tested
// against the CPU reference in every CI run, without a GPU (tests/gpu/draft_kernels_emulated_test.cpp).
// Each kernel states its launch shape; those with block reductions need exactly kBlock threads.
#pragma once

#include "bitsplit/attention_exp.h"
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// BS_LAUNCH for kernels without __syncthreads, BS_LAUNCH_SYNC for those with (the emulation
// runs the former's threads one after another and the latter's concurrently).
#define BS_LAUNCH(kernel, blocks, threads, stream, ...) \
  kernel<<<unsigned(blocks), unsigned(threads), 0, (stream)>>>(__VA_ARGS__)
#define BS_LAUNCH_SYNC BS_LAUNCH
// A kernel with __syncthreads and `shared_bytes` of dynamic shared memory (BS_DYNAMIC_SHARED).
#define BS_LAUNCH_SHARED(kernel, blocks, threads, shared_bytes, stream, ...) \
  kernel<<<unsigned(blocks), unsigned(threads), size_t(shared_bytes), (stream)>>>(__VA_ARGS__)
#define BS_DYNAMIC_SHARED(type, name) \
  extern __shared__ __align__(16) unsigned char bs_dynamic_shared[]; \
  type* name = reinterpret_cast<type*>(bs_dynamic_shared)
#define BS_KERNEL static __global__  // each .cu that includes this gets its own copy
#define BS_DEVICE __device__ __forceinline__
#define BS_HOST_DEVICE __host__ __device__ inline
#define BS_SHARED __shared__
#define BS_RESTRICT __restrict__
#define BS_FMA(a, b, c) __fmaf_rn(a, b, c)
#define BS_MUL(a, b) __fmul_rn(a, b)  // never contracted into an FMA
#define BS_I2F(i) __int2float_rn(i)
#define BS_HALF(h) __half2float(__ushort_as_half(h))
// Mid-pass copies (a mixture of experts' routing): to the host waits for the stream; to the
// device from pageable memory, which the call has staged when it returns.
#define BS_COPY_TO_HOST(dst, src, bytes, stream) \
  (cudaMemcpyAsync((dst), (src), (bytes), cudaMemcpyDeviceToHost, (stream)), cudaStreamSynchronize(stream))
#define BS_COPY_TO_DEVICE(dst, src, bytes, stream) \
  cudaMemcpyAsync((dst), (src), (bytes), cudaMemcpyHostToDevice, (stream))
#elif defined(BITSPLIT_CUDA_EMULATION)
// tests/gpu/cuda_emulation.h defines threadIdx, blockIdx, blockDim, __syncthreads and
// bs_emulated_half_to_float before including this file.
#define BS_LAUNCH(kernel, blocks, threads, stream, ...) \
  emulate_launch_serial(unsigned(blocks), unsigned(threads), [&] { kernel(__VA_ARGS__); })
#define BS_LAUNCH_SYNC(kernel, blocks, threads, stream, ...) \
  emulate_launch(unsigned(blocks), unsigned(threads), [&] { kernel(__VA_ARGS__); })
#define BS_LAUNCH_SHARED(kernel, blocks, threads, shared_bytes, stream, ...) \
  emulate_launch(unsigned(blocks), unsigned(threads), [&] { kernel(__VA_ARGS__); }, size_t(shared_bytes))
#define BS_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(emulated_dynamic_shared.data())
#define BS_KERNEL inline
#define BS_DEVICE inline
#define BS_HOST_DEVICE inline
#define BS_SHARED static
#define BS_RESTRICT
#define BS_FMA(a, b, c) std::fma(float(a), float(b), float(c))
#define BS_MUL(a, b) (float(a) * float(b))
#define BS_I2F(i) float(i)
#define BS_HALF(h) bs_emulated_half_to_float(h)
#define BS_COPY_TO_HOST(dst, src, bytes, stream) std::memcpy((dst), (src), (bytes))
#define BS_COPY_TO_DEVICE(dst, src, bytes, stream) std::memcpy((dst), (src), (bytes))
#else
#error "gpu/draft_kernels.cuh is compiled by nvcc or under tests/gpu/cuda_emulation.h"
#endif

namespace bitsplit::gpu::kernels {

#if defined(__CUDACC__)
using Stream = cudaStream_t;
#else
using Stream = int;
#endif

// Threads of every block-reduction kernel (a power of two). The emulation runs the same code
// with 16 (its block threads are OS threads, and 128 of them meeting at every barrier would
// make the CI tests slow); nothing in the kernels depends on the value but the shared arrays.
#if defined(BITSPLIT_CUDA_EMULATION)
constexpr int kBlock = 16;
#else
constexpr int kBlock = 128;
#endif
constexpr int kMatmulThreads = 64;
constexpr int kMaxTopK = 32;   // top_k_rows' k
constexpr float kTinyAmax = 0x1p-120f;  // cpu/plane_kernels.h: groups below quantise to zero

struct SumOp {
  template <typename T>
  BS_DEVICE T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  BS_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Tree reduction of one value per thread over a kBlock-thread block; every thread gets the
// result. `scratch` is a kBlock-element __shared__ array; it is free again on return.
template <typename T, typename Op>
BS_DEVICE T block_reduce(T v, T* scratch, Op op) {
  const int t = int(threadIdx.x);
  scratch[t] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (t < s) scratch[t] = op(scratch[t], scratch[t + s]);
    __syncthreads();
  }
  const T r = scratch[0];
  __syncthreads();
  return r;
}

// cpu::dot_f32's order: 8 interleaved partial sums (lane i % 8), then the same fixed tree.
BS_DEVICE float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) acc[i % 8] += BS_MUL(a[i], b[i]);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// cpu/plane_kernels.h's round_half_away.
BS_DEVICE float round_half_away(float v) {
  const float t = truncf(v);
  return fabsf(v - t) >= 0.5f ? t + copysignf(1.0f, v) : t;
}

// ---------------------------------------------------------------------------------------
// Code j of a group's `bits`-bit codes in the file layout (docs/FORMAT.md "Bit-split planes": bit
// planes of 4, 2 and 1 bits, lowest first; in a k-bit plane of P bytes, byte i holds the weights
// i + t * P at bit t * k): 2 = [2], 3 = [2][1], 4 = [4].
BS_DEVICE int32_t draft_code(const uint8_t* g, int group, int bits, int j) {
  if (bits == 4) return int32_t(g[j % (group / 2)] >> (4 * (j / (group / 2)))) & 15;
  const int32_t lo = int32_t(g[j % (group / 4)] >> (2 * (j / (group / 4)))) & 3;
  if (bits == 2) return lo;
  return lo | (int32_t(g[group / 4 + j % (group / 8)] >> (j / (group / 8))) & 1) << 2;
}

// The draft plane (2, 3 or 4 bits) times int8 activations, exactly cpu::draft_matmul_ref: per group an
// exact integer dot product, then inner = fma(s, float(Sq), m * float(Sx)) and
// acc = fma(s_x, inner, acc) in group order. With a BitDelta sign plane (FORMAT.md "Kernel
// arithmetic" step 5) the signs are read in the same pass: Ss = Σq − 2·Σ_{bit set} q per group,
// dacc = fma(float(Ss), s_x, dacc) in group order, y = fma(alpha, dacc, acc).
// Launch: one block per output row, kMatmulThreads threads; thread n computes activation rows
// n, n + blockDim, ..., so each output element is accumulated by one thread in the reference's
// order. Sign rows are padded to whole groups (group / 8 bytes each, zero past `in`).
BS_KERNEL void draft_matmul(const uint8_t* BS_RESTRICT codes, const uint16_t* BS_RESTRICT scales,
                            const uint16_t* BS_RESTRICT offsets, int64_t out, int64_t groups, int group, int bits,
                            const int8_t* BS_RESTRICT q, const float* BS_RESTRICT sx, const int32_t* BS_RESTRICT sum,
                            int64_t rows, int64_t padded, const uint8_t* BS_RESTRICT signs,
                            const float* BS_RESTRICT alpha, bool alpha_per_row, float* BS_RESTRICT y) {
  const int64_t o = blockIdx.x;
  const int plane_bytes = group / 4, group_bytes = group * bits / 8;
  const uint8_t* orow = codes + o * groups * group_bytes;
  const uint8_t* srow = signs ? signs + o * groups * (group / 8) : nullptr;
  for (int64_t n = threadIdx.x; n < rows; n += blockDim.x) {
    const int8_t* qn = q + n * padded;
    float acc = 0.0f, dacc = 0.0f;
    for (int64_t k = 0; k < groups; ++k) {
      const uint8_t* g = orow + k * group_bytes;
      const int8_t* qg = qn + k * group;
      int32_t sq = 0;
      if (bits == 2) {
        for (int j = 0; j < plane_bytes; ++j) {
          const uint32_t b = g[j];
          // Byte j holds the weights j + t * plane_bytes at bits 2t.
          sq += int32_t(b & 3u) * int32_t(qg[j]) + int32_t((b >> 2) & 3u) * int32_t(qg[j + plane_bytes]) +
                int32_t((b >> 4) & 3u) * int32_t(qg[j + 2 * plane_bytes]) +
                int32_t((b >> 6) & 3u) * int32_t(qg[j + 3 * plane_bytes]);
        }
      } else {
        for (int j = 0; j < group; ++j) sq += draft_code(g, group, bits, j) * int32_t(qg[j]);
      }
      const float s = BS_HALF(scales[o * groups + k]);
      const float m = BS_HALF(offsets[o * groups + k]);
      const float fsx = BS_I2F(sum[n * groups + k]);
      const float inner = BS_FMA(s, BS_I2F(sq), BS_MUL(m, fsx));
      acc = BS_FMA(sx[n * groups + k], inner, acc);
      if (srow) {
        const uint8_t* sg = srow + k * (group / 8);
        int32_t neg = 0;
        for (int j = 0; j < group; ++j) neg += ((sg[j >> 3] >> (j & 7)) & 1) ? int32_t(qg[j]) : 0;
        const int32_t ss = sum[n * groups + k] - 2 * neg;
        dacc = BS_FMA(BS_I2F(ss), sx[n * groups + k], dacc);
      }
    }
    y[n * out + o] = srow ? BS_FMA(alpha[alpha_per_row ? o : 0], dacc, acc) : acc;
  }
}

// 16-byte load of a uint4 (the address is 16-byte aligned).
BS_DEVICE uint4 load16(const void* p) {
#if defined(__CUDACC__)
  return *static_cast<const uint4*>(p);
#else
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
#endif
}

BS_DEVICE uint32_t word(const uint4& v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

// Output rows per block of draft_matmul_g64 (one warp of kLanes threads each) and its dynamic
// shared memory. The emulation uses 8-lane "warps" (its threads are OS threads); the kernel
// does not depend on the width (no warp intrinsics).
#if defined(BITSPLIT_CUDA_EMULATION)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 32;
#endif
constexpr int kG64Warps = 4;
constexpr int kG64Threads = kLanes * kG64Warps;
// Activation rows per pass: a warp's partial results (float inner + int Ss per group and row)
// use at most 8 KiB; 0 when a row has too many groups for the kernel (the plain kernel runs).
BS_HOST_DEVICE int g64_rows_per_pass(int64_t groups) {
  const int64_t cap = kLanes < 16 ? kLanes : 16, r = 1024 / groups;
  return r <= 0 ? 0 : int(r < cap ? r : cap);
}
inline size_t g64_shared_bytes(int64_t groups) { return size_t(kG64Warps) * size_t(g64_rows_per_pass(groups)) * size_t(groups) * 8; }

// draft_matmul for group 64 (a group's codes are 16 bytes, its activations 64, its signs 8):
// the same results bit for bit, with the plane read once per call in 16-byte loads and the
// integer dot products in dp4a. Each warp owns one output row: its lanes take the groups
// (lane, lane + kLanes, ...), compute every activation row's exact integer dot product (Sq and
// the sign sum Ss; integer sums do not depend on order) and inner = fma(s, Sq, m·Sx) into
// shared memory; then lane r runs activation row r's float chain acc = fma(s_x, inner, acc)
// over the groups in order, exactly as the reference.
// Launch: ceil(out / kG64Warps) blocks, kG64Threads threads, g64_shared_bytes(groups) bytes;
// needs g64_rows_per_pass(groups) > 0.
BS_KERNEL void draft_matmul_g64(const uint8_t* BS_RESTRICT codes, const uint16_t* BS_RESTRICT scales,
                                const uint16_t* BS_RESTRICT offsets, int64_t out, int64_t groups,
                                const int8_t* BS_RESTRICT q, const float* BS_RESTRICT sx,
                                const int32_t* BS_RESTRICT sum, int64_t rows, int64_t padded,
                                const uint8_t* BS_RESTRICT signs, const float* BS_RESTRICT alpha, bool alpha_per_row,
                                float* BS_RESTRICT y) {
  BS_DYNAMIC_SHARED(float, shared);
  const int warp = int(threadIdx.x) / kLanes, lane = int(threadIdx.x) % kLanes;
  const int chunk = g64_rows_per_pass(groups);
  float* inner = shared + size_t(warp) * size_t(chunk) * size_t(groups) * 2;
  int32_t* ss = reinterpret_cast<int32_t*>(inner + size_t(chunk) * size_t(groups));
  const int64_t o = int64_t(blockIdx.x) * kG64Warps + warp;
  const bool active = o < out;
  for (int64_t n0 = 0; n0 < rows; n0 += chunk) {  // the same trip count in every thread
    const int64_t nn = rows - n0 < chunk ? rows - n0 : chunk;
    for (int64_t k = lane; active && k < groups; k += kLanes) {
      const uint4 c = load16(codes + (o * groups + k) * 16);
      const float s = BS_HALF(scales[o * groups + k]);
      const float m = BS_HALF(offsets[o * groups + k]);
      uint4 sg{0, 0, 0, 0};
      if (signs) {
        const uint8_t* sp = signs + (o * groups + k) * 8;
        sg.x = uint32_t(sp[0]) | uint32_t(sp[1]) << 8 | uint32_t(sp[2]) << 16 | uint32_t(sp[3]) << 24;
        sg.y = uint32_t(sp[4]) | uint32_t(sp[5]) << 8 | uint32_t(sp[6]) << 16 | uint32_t(sp[7]) << 24;
      }
      for (int64_t r = 0; r < nn; ++r) {
        const int8_t* qg = q + (n0 + r) * padded + k * 64;
        int32_t sq = 0, neg = 0;
        for (int t = 0; t < 4; ++t) {  // activations 16t .. 16t + 15 meet bits 2t of code bytes 0 .. 15
          const uint4 qv = load16(qg + 16 * t);
          for (int w = 0; w < 4; ++w) {
            sq = __dp4a(int((word(c, w) >> (2 * t)) & 0x03030303u), int(word(qv, w)), sq);
            if (signs) {
              // Signs of activations 16t + 4w .. + 3: a nibble of sign byte 2t + w / 2, as 0/1 bytes.
              const uint32_t byte = ((t < 2 ? sg.x : sg.y) >> (8 * ((2 * t + w / 2) % 4))) & 0xffu;
              const uint32_t nib = (byte >> (4 * (w % 2))) & 0xfu;
              neg = __dp4a(int((nib * 0x00204081u) & 0x01010101u), int(word(qv, w)), neg);
            }
          }
        }
        const int32_t sxs = sum[(n0 + r) * groups + k];
        inner[r * groups + k] = BS_FMA(s, BS_I2F(sq), BS_MUL(m, BS_I2F(sxs)));
        ss[r * groups + k] = sxs - 2 * neg;
      }
    }
    __syncthreads();
    if (active && lane < nn) {
      const int64_t n = n0 + lane;
      float acc = 0.0f, dacc = 0.0f;
      for (int64_t k = 0; k < groups; ++k) {
        const float sxk = sx[n * groups + k];
        acc = BS_FMA(sxk, inner[lane * groups + k], acc);
        if (signs) dacc = BS_FMA(BS_I2F(ss[lane * groups + k]), sxk, dacc);
      }
      y[n * out + o] = signs ? BS_FMA(alpha[alpha_per_row ? o : 0], dacc, acc) : acc;
    }
    __syncthreads();
  }
}

// x[r, :] = table[tokens[r], :], plus a variant's embedding delta when `signs` is set: value i
// of the token's sign row (row_bytes bytes, bit set = −1) times its α, added as the CPU pass
// adds quant::bitdelta_decode_row_ref's row. Launch: one block per row, any block size.
BS_KERNEL void embed_rows(const float* BS_RESTRICT table, const int32_t* BS_RESTRICT tokens, int64_t width,
                          const uint8_t* BS_RESTRICT signs, const float* BS_RESTRICT alpha, bool alpha_per_row,
                          int64_t row_bytes, const float* BS_RESTRICT lora_up, const float* BS_RESTRICT lora_down,
                          int64_t lora_rank, float lora_scale, float scale, float* BS_RESTRICT x) {
  const int64_t r = blockIdx.x, token = tokens[r];
  const float* src = table + token * width;
  const uint8_t* srow = signs ? signs + token * row_bytes : nullptr;
  const float a = signs ? alpha[alpha_per_row ? token : 0] : 0.0f;
  const float* u = lora_up ? lora_up + token * lora_rank : nullptr;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float v = src[i];
    if (srow) v += ((srow[i >> 3] >> (i & 7)) & 1) ? -a : a;
    if (u) {  // a variant's LoRA row, as VariantLora::add_row: in order over k, then scaled
      float d = 0.0f;
      for (int64_t k = 0; k < lora_rank; ++k) d += BS_MUL(u[k], lora_down[k * width + i]);
      v += BS_MUL(lora_scale, d);
    }
    x[r * width + i] = scale == 1.0f ? v : BS_MUL(v, scale);  // gemma: × sqrt(n_embd)
  }
}

// A variant's LoRA change, the two products of VariantLora::apply (each element one dot8, as
// cpu::matmul_f32's dot_f32, plus its zero bias). t [rows x rank] = V·x: one thread per (r, k).
BS_KERNEL void lora_down_rows(const float* BS_RESTRICT down, const float* BS_RESTRICT x, int64_t rows, int64_t in,
                              int64_t rank, float* BS_RESTRICT t) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * rank) return;
  const int64_t r = i / rank, k = i % rank;
  t[i] = dot8(down + k * in, x + r * in, in) + 0.0f;
}
// y [rows x out] += scale · (U·t): one thread per (r, o).
BS_KERNEL void lora_up_add(const float* BS_RESTRICT up, const float* BS_RESTRICT t, int64_t rows, int64_t out,
                           int64_t rank, float scale, float* BS_RESTRICT y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * out) return;
  const int64_t r = i / out, o = i % out;
  const float u = dot8(up + o * rank, t + r * rank, rank) + 0.0f;
  y[i] = y[i] + BS_MUL(scale, u);
}

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ w, as cpu::rms_norm_f32 (sum of squares in double).
// In place (y == x) is allowed. Launch: one block per row of n values, kBlock threads.
BS_KERNEL void rms_norm_rows(const float* x, const float* BS_RESTRICT w, int64_t n, float eps, float* y) {
  BS_SHARED double scratch[kBlock];
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) s += double(xr[i]) * double(xr[i]);
  s = block_reduce(s, scratch, SumOp());
  const float scale = 1.0f / sqrtf(float(s / double(n)) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kBlock) yr[i] = BS_MUL(BS_MUL(xr[i], scale), w[i]);
}

// Per (row, group) int8 quantisation, exactly cpu::detail::quantize_group_ref: s_x = amax/127,
// q = clamp(round_half_away(x · 127/amax)), Σq; zeros past `in` and for groups below kTinyAmax.
// Launch: one thread per (row, group), any block size, rows · groups threads in all.
BS_KERNEL void quantize_rows(const float* BS_RESTRICT x, int64_t rows, int64_t in, int group, int64_t groups,
                             int64_t padded, int8_t* BS_RESTRICT q, float* BS_RESTRICT scale,
                             int32_t* BS_RESTRICT sum) {
  const int64_t task = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (task >= rows * groups) return;
  const int64_t r = task / groups, g = task % groups;
  const float* xg = x + r * in + g * group;
  const int64_t n = in - g * group < group ? in - g * group : group;
  int8_t* qg = q + r * padded + g * group;
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(xg[i]));
  int32_t s = 0;
  float sc = 0.0f;
  if (amax >= kTinyAmax) {
    sc = amax / 127.0f;
    const float inv = 127.0f / amax;
    for (int64_t i = 0; i < n; ++i) {
      const float v = fminf(fmaxf(round_half_away(BS_MUL(xg[i], inv)), -127.0f), 127.0f);
      qg[i] = int8_t(v);
      s += int32_t(v);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) qg[i] = 0;
  }
  for (int64_t i = n; i < group; ++i) qg[i] = 0;
  scale[task] = sc;
  sum[task] = s;
}

// y[r, i] += bias[i] for rows x n values. Launch: one thread per value, any block size.
BS_KERNEL void add_bias(float* BS_RESTRICT y, const float* BS_RESTRICT bias, int64_t rows, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * n) y[i] += bias[i % n];
}

// x[i] += y[i] (the residual stream). Launch: one thread per value.
BS_KERNEL void add_into(float* BS_RESTRICT x, const float* BS_RESTRICT y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

// x[i] = 0. Launch: one thread per value.
BS_KERNEL void fill_zero(float* BS_RESTRICT x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.0f;
}

// A mixture of experts: xe[j] = x[rows[j]] for the `count` rows routed to one expert.
// Launch: one thread per value.
BS_KERNEL void gather_rows(const float* BS_RESTRICT x, const int32_t* BS_RESTRICT rows, int64_t count, int64_t width,
                           float* BS_RESTRICT xe) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count * width) return;
  const int64_t j = i / width, d = i % width;
  xe[i] = x[int64_t(rows[j]) * width + d];
}

// out[rows[j]] += weights[j] · ye[j]: one expert's output added with each row's weight, as the
// CPU pass adds it (the rows are distinct). Launch: one thread per value.
BS_KERNEL void scatter_add_weighted(float* BS_RESTRICT out, const float* BS_RESTRICT ye, const int32_t* BS_RESTRICT rows,
                                    const float* BS_RESTRICT weights, int64_t count, int64_t width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count * width) return;
  const int64_t j = i / width, d = i % width;
  float* o = out + int64_t(rows[j]) * width + d;
  *o = *o + BS_MUL(weights[j], ye[i]);
}

// out[r] += sigmoid(g[r]) · ys[r] (qwen2moe's shared expert; g[r] = x[r] · its gate vector).
// Launch: one thread per value.
BS_KERNEL void add_sigmoid_gated(float* BS_RESTRICT out, const float* BS_RESTRICT ys, const float* BS_RESTRICT g,
                                 int64_t rows, int64_t width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * width) return;
  const float gate = 1.0f / (1.0f + expf(-g[i / width]));
  out[i] = out[i] + BS_MUL(gate, ys[i]);
}

// gate[i] = silu(gate[i]) · up[i] with silu(v) = v / (1 + e^-v) by silu_exp, as the CPU forward
// pass (bit for bit).
// Launch: one thread per value.
BS_KERNEL void silu_mul(float* BS_RESTRICT gate, const float* BS_RESTRICT up, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float v = gate[i];
    gate[i] = BS_MUL(silu_exp(v), up[i]);
  }
}

// gate[i] = gelu_tanh(gate[i]) · up[i], as cpu::gelu_tanh (gemma's GeGLU).
// Launch: one thread per element.
BS_KERNEL void gelu_mul(float* BS_RESTRICT gate, const float* BS_RESTRICT up, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float v = gate[i];
    const float g = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    gate[i] = BS_MUL(g, up[i]);
  }
}

// x[i] = c · tanh(x[i] / c), as cpu::softcap (gemma2's logits). Launch: one thread per element.
BS_KERNEL void softcap_in_place(float* BS_RESTRICT x, int64_t n, float c) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = BS_MUL(c, tanhf(x[i] / c));
}

// slot_pos[slots[r]] = positions[r]: the position of each slot's token, which sliding-window
// layers compare. Launch: one thread per row.
BS_KERNEL void write_positions(const int32_t* BS_RESTRICT slots, const int32_t* BS_RESTRICT positions, int64_t rows,
                               int32_t* BS_RESTRICT slot_pos) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) slot_pos[slots[r]] = positions[r];
}

// RoPE on rows x heads heads of head_dim values, as cpu::rope_f32: pair i of n_rot / 2 turns by
// theta = pos · freq_scale · base^(−2i / n_rot) (/ freq_factors[i]), cos and sin times mscale;
// adjacent pairs (llama) or halves (neox). Launch: one thread per pair, rows · heads · n_rot / 2
// threads.
BS_KERNEL void rope_rows(float* BS_RESTRICT x, int64_t rows, int64_t heads, int64_t head_dim, int64_t n_rot,
                         bool neox, const int32_t* BS_RESTRICT positions, float base, float freq_scale,
                         const float* BS_RESTRICT freq_factors, float mscale) {
  const int64_t half = n_rot / 2;
  const int64_t task = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (task >= rows * heads * half) return;
  const int64_t i = task % half, rh = task / half, r = rh / heads;
  float theta = BS_MUL(BS_MUL(float(positions[r]), freq_scale), powf(base, -2.0f * float(i) / float(n_rot)));
  if (freq_factors) theta /= freq_factors[i];
  const float c = BS_MUL(cosf(theta), mscale), s = BS_MUL(sinf(theta), mscale);
  float* head = x + rh * head_dim;
  const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = head[a], x1 = head[b];
  head[a] = BS_MUL(x0, c) - BS_MUL(x1, s);
  head[b] = BS_MUL(x0, s) + BS_MUL(x1, c);
}

// Writes row r of k and v ([rows x kv_dim]) to cache slot slots[r] of one layer's caches
// ([n_slots x kv_dim]). Launch: one thread per value.
BS_KERNEL void write_kv(const float* BS_RESTRICT k, const float* BS_RESTRICT v, const int32_t* BS_RESTRICT slots,
                        int64_t rows, int64_t kv_dim, float* BS_RESTRICT k_cache, float* BS_RESTRICT v_cache) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * kv_dim) return;
  const int64_t r = i / kv_dim, d = i % kv_dim, at = int64_t(slots[r]) * kv_dim + d;
  k_cache[at] = k[i];
  v_cache[at] = v[i];
}

// Attention of q's rows over one layer's cache with the batch's mask ([rows x kv_len], 1 =
// visible; in a sliding-window layer (window > 0) only slots with row_pos[r] - slot_pos[j] <
// window), grouped-query heads, as the CPU forward pass: scores = q·k · scale (soft-capped when
// softcap > 0) where visible,
// softmax (max subtracted, attention_exp, sum in double, multiplied by float(1 / sum)), out = Σ p_j v_j over
// visible j in slot order. `scores` is scratch of rows · heads · kv_len floats.
// Launch: one block per (row, head) = rows · heads blocks, kBlock threads.
BS_KERNEL void attention_rows(const float* BS_RESTRICT q, const float* BS_RESTRICT k_cache,
                              const float* BS_RESTRICT v_cache, const uint8_t* BS_RESTRICT mask, int64_t kv_len,
                              int64_t heads, int64_t kv_heads, int64_t head_dim, float scale, float softcap,
                              const int32_t* BS_RESTRICT row_pos, const int32_t* BS_RESTRICT slot_pos, int64_t window,
                              float* scores, float* BS_RESTRICT out) {
  BS_SHARED float fscratch[kBlock];
  BS_SHARED double dscratch[kBlock];
  const int64_t task = blockIdx.x, r = task / heads, h = task % heads, kvh = h / (heads / kv_heads);
  const int64_t kv_dim = kv_heads * head_dim;
  const float* qh = q + task * head_dim;  // [rows x heads x head_dim]
  const uint8_t* m = mask + r * kv_len;
  const int64_t pos = window > 0 ? row_pos[r] : 0;
  // A sliding-window layer also hides slots whose token is window or more positions back.
  auto visible = [&](int64_t j) { return m[j] && (window == 0 || pos - slot_pos[j] < window); };
  float* sc = scores + task * kv_len;
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < kv_len; j += kBlock) {
    float s = -INFINITY;
    if (visible(j)) {
      s = BS_MUL(dot8(qh, k_cache + j * kv_dim + kvh * head_dim, head_dim), scale);
      if (softcap > 0.0f) s = BS_MUL(softcap, tanhf(s / softcap));
    }
    sc[j] = s;
    local_max = fmaxf(local_max, s);
  }
  const float mx = block_reduce(local_max, fscratch, MaxOp());
  double local_sum = 0.0;
  for (int64_t j = threadIdx.x; j < kv_len; j += kBlock) {
    const float e = attention_exp(sc[j] - mx);  // the CPU attention's exponential
    sc[j] = e;
    local_sum += e;
  }
  const double total = block_reduce(local_sum, dscratch, SumOp());
  const float inv = float(1.0 / total);
  for (int64_t j = threadIdx.x; j < kv_len; j += kBlock) sc[j] = BS_MUL(sc[j], inv);
  __syncthreads();  // every probability is written before any thread reads them all
  float* o = out + task * head_dim;
  for (int64_t d = threadIdx.x; d < head_dim; d += kBlock) {
    float acc = 0.0f;
    for (int64_t j = 0; j < kv_len; ++j) {
      if (visible(j)) acc = BS_FMA(sc[j], v_cache[j * kv_dim + kvh * head_dim + d], acc);
    }
    o[d] = acc;
  }
}

// The k largest logits of each row (largest first, ties to the smaller token id) with their
// log-softmax values; k <= kMaxTopK and k <= n_vocab. Launch: one block per row, kBlock threads.
BS_KERNEL void top_k_rows(const float* BS_RESTRICT logits, int64_t n_vocab, int k, int32_t* BS_RESTRICT tokens,
                          float* BS_RESTRICT log_probs) {
  BS_SHARED float fscratch[kBlock];
  BS_SHARED double dscratch[kBlock];
  BS_SHARED int64_t iscratch[kBlock];
  const int64_t row = blockIdx.x;
  const float* l = logits + row * n_vocab;
  const int t = int(threadIdx.x);
  float local_max = -INFINITY;
  for (int64_t i = t; i < n_vocab; i += kBlock) local_max = fmaxf(local_max, l[i]);
  const float mx = block_reduce(local_max, fscratch, MaxOp());
  double local_sum = 0.0;
  for (int64_t i = t; i < n_vocab; i += kBlock) local_sum += double(expf(l[i] - mx));
  const double total = block_reduce(local_sum, dscratch, SumOp());
  const float lse = mx + float(log(total));
  // Round c picks the best (value, id) strictly after round c - 1's in the order.
  float prev_v = INFINITY;
  int64_t prev_i = -1;
  for (int c = 0; c < k; ++c) {
    float best_v = -INFINITY;
    int64_t best_i = -1;
    for (int64_t i = t; i < n_vocab; i += kBlock) {
      const float v = l[i];
      const bool after = v < prev_v || (v == prev_v && i > prev_i);
      if (after && (best_i < 0 || v > best_v)) {  // i grows, so ties keep the smaller id
        best_v = v;
        best_i = i;
      }
    }
    fscratch[t] = best_v;
    iscratch[t] = best_i;
    __syncthreads();
    for (int s = kBlock / 2; s > 0; s >>= 1) {
      if (t < s) {
        const float ov = fscratch[t + s];
        const int64_t oi = iscratch[t + s];
        const bool take = oi >= 0 && (iscratch[t] < 0 || ov > fscratch[t] || (ov == fscratch[t] && oi < iscratch[t]));
        if (take) {
          fscratch[t] = ov;
          iscratch[t] = oi;
        }
      }
      __syncthreads();
    }
    prev_v = fscratch[0];
    prev_i = iscratch[0];
    if (t == 0) {
      tokens[row * k + c] = int32_t(prev_i);
      log_probs[row * k + c] = prev_i >= 0 ? prev_v - lse : -INFINITY;
    }
    __syncthreads();
  }
}

}  // namespace bitsplit::gpu::kernels
