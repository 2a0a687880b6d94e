// f32 reference ops: readable, deterministic and batch invariant; the specification that
// later SIMD/CUDA kernels and the reference forward pass rely on.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/status.h"
#include "bitsplit/softmax_with.h"

namespace bitsplit::cpu {

float dot_f32_avx2(const float* a, const float* b, int64_t n);  // attention_avx2.cpp: the same bits
void dot_f32_rows_avx2(const float* x, const float* rows, int64_t stride, int64_t n, int64_t count, float* out);

float dot_f32(const float* a, const float* b, int64_t n) {
  static const bool avx2 = default_isa() != Isa::kScalar;
  if (avx2) return dot_f32_avx2(a, b, n);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  for (int k = 0; i < n; ++i, ++k) acc[k] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void dot_f32_rows(const float* x, const float* rows, int64_t stride, int64_t n, int64_t count, float* out) {
  static const bool avx2 = default_isa() != Isa::kScalar;
  if (avx2) return dot_f32_rows_avx2(x, rows, stride, n, count, out);
  for (int64_t t = 0; t < count; ++t) out[t] = dot_f32(rows + t * stride, x, n);
}

void matmul_f32(std::span<const float> x, int64_t rows, int64_t in, std::span<const float> w,
                int64_t out, std::span<const float> bias, std::span<float> y) {
  BITSPLIT_CHECK(int64_t(x.size()) == rows * in && int64_t(w.size()) == out * in &&
                 int64_t(y.size()) == rows * out && (bias.empty() || int64_t(bias.size()) == out));
  // Chunks of output columns keep each worker streaming its own slice of W.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(in, 1));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, out, grain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t o = r.begin(); o != r.end(); ++o) {
      const float* wo = w.data() + o * in;
      const float b = bias.empty() ? 0.0f : bias[o];
      for (int64_t row = 0; row < rows; ++row) y[row * out + o] = dot_f32(wo, x.data() + row * in, in) + b;
    }
  });
}

void sign_matmul_add_f32(const SignPlaneView& s, const float* x, int64_t rows, float* y) {
  BITSPLIT_CHECK(s.row_bytes >= (s.in + 7) / 8 && rows >= 0);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(s.in, 1));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, s.out, grain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t o = r.begin(); o != r.end(); ++o) {
      const uint8_t* so = s.signs + o * s.row_bytes;
      const float alpha = s.alpha[s.alpha_per_row ? o : 0];
      for (int64_t row = 0; row < rows; ++row) {
        const float* xr = x + row * s.in;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t i = 0; i < s.in; ++i) acc[i % 8] += (so[i / 8] >> (i % 8)) & 1 ? -xr[i] : xr[i];
        const float t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        float& out = y[row * s.out + o];
        out = std::fma(alpha, t, out);
      }
    }
  });
}

void rms_norm_f32(const float* x, const float* weight, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void softmax_f32(float* x, int64_t n) {
  softmax_with(x, n, [](float v) { return std::exp(v); });
}

void rope_table(int64_t n_rot, float pos, float base, float freq_scale, std::span<const float> freq_factors,
                float mscale, float* cs) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    float theta = pos * freq_scale * std::pow(base, -2.0f * float(i) / float(n_rot));
    if (!freq_factors.empty()) theta /= freq_factors[i];
    cs[2 * i] = std::cos(theta) * mscale;
    cs[2 * i + 1] = std::sin(theta) * mscale;
  }
}

void rope_apply(float* head, int64_t n_rot, RopeOrder order, const float* cs) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int64_t a = order == RopeOrder::kNormal ? 2 * i : i;
    const int64_t b = order == RopeOrder::kNormal ? 2 * i + 1 : i + half;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

void rope_f32(float* head, int64_t n_rot, RopeOrder order, float pos, float base, float freq_scale,
              std::span<const float> freq_factors, float mscale) {
  thread_local std::vector<float> cs;
  cs.resize(size_t(n_rot));
  rope_table(n_rot, pos, base, freq_scale, freq_factors, mscale, cs.data());
  rope_apply(head, n_rot, order, cs.data());
}

}  // namespace bitsplit::cpu
