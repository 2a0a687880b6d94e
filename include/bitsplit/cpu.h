// cpu/: CPU compute kernels. For now the f32 reference ops the reference forward pass is built
// from; SIMD kernels for the packed planes join them with the same scalar-reference-beside-
// kernel rule. Every op here is batch invariant: a row's result never depends on the batch.
#pragma once

#include <cstdint>
#include <span>

namespace bitsplit::cpu {

// Dot product with a fixed summation order (8 interleaved partial sums, then a fixed tree),
// so the result is the same wherever and with whatever else it is computed.
float dot_f32(const float* a, const float* b, int64_t n);

// Y[r, o] = sum_i W[o, i] * X[r, i] (+ bias[o]): X is [rows x in], W is [out x in] row-major,
// Y is [rows x out]. Parallel over output columns with oneTBB; each element is one dot_f32.
void matmul_f32(std::span<const float> x, int64_t rows, int64_t in, std::span<const float> w,
                int64_t out, std::span<const float> bias, std::span<float> y);

// y = x / sqrt(mean(x^2) + eps) * weight, over each row of length n (sum of squares in double).
void rms_norm_f32(const float* x, const float* weight, int64_t n, float eps, float* y);

// In-place softmax over n values (max-subtracted; sum in double).
void softmax_f32(float* x, int64_t n);

inline float silu(float x) { return x / (1.0f + __builtin_expf(-x)); }

enum class RopeOrder {
  kNormal,  // rotates adjacent pairs (x[2i], x[2i+1])   — llama
  kNeox,    // rotates halves (x[i], x[i + n/2])           — qwen2, qwen3, gpt-neox
};

// Rotates the first n_rot dims of one head vector of length head_dim at position `pos`.
// theta_i = pos / scale * base^(-2i/n_rot) / freq_factor[i] (freq_factors may be empty).
void rope_f32(float* head, int64_t n_rot, RopeOrder order, float pos, float base, float freq_scale,
              std::span<const float> freq_factors);

}  // namespace bitsplit::cpu
