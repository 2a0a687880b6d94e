// Scalar reference of the Q8_0 baseline kernels (the specification the ISA tiers match bit for
// bit; docs/FORMAT.md, "Q8_0 baseline kernel arithmetic"), the scalar tier and the dispatch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "bitsplit/quant.h"
#include "bitsplit/status.h"
#include "plane_kernels.h"
#include "q8_0_kernels.h"

namespace bitsplit::cpu {

void Q8_0Activations::resize(int64_t rows_, int64_t in_) {
  BITSPLIT_CHECK(rows_ >= 0 && in_ > 0, "Q8_0 activations: bad shape");
  BITSPLIT_CHECK(in_ % detail::kQ8_0Weights == 0,
                 "Q8_0: the row length must be a multiple of 32, got " + std::to_string(in_));
  rows = rows_;
  in = in_;
  blocks = in_ / detail::kQ8_0Weights;
  q.resize(size_t(rows * in));
  d.resize(size_t(rows * blocks));
  sum.resize(size_t(rows * blocks));
}

namespace detail {

// The plane kernels' quantiser on one block (same kTinyAmax, same round_half_away), so both
// kernel families quantise a group of 32 identically.
void quantize_block_q8_0_ref(const float* x, int8_t* q, float* d, int32_t* sum) {
  float amax = 0.0f;
  for (int i = 0; i < kQ8_0Weights; ++i) amax = std::max(amax, std::fabs(x[i]));
  *d = 0.0f;
  *sum = 0;
  if (!(amax >= kTinyAmax)) {
    std::memset(q, 0, kQ8_0Weights);
    return;
  }
  *d = amax / 127.0f;
  const float inv = 127.0f / amax;
  for (int i = 0; i < kQ8_0Weights; ++i) {
    const float v = std::clamp(round_half_away(x[i] * inv), -127.0f, 127.0f);
    q[i] = int8_t(v);
    *sum += int32_t(v);
  }
}

void q8_0_rows_ref(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end, float* y) {
  BITSPLIT_CHECK(w.in % kQ8_0Weights == 0, "Q8_0: the row length must be a multiple of 32");
  BITSPLIT_CHECK(qa.in == w.in, "Q8_0 activations quantised for another row length");
  const int64_t blocks = qa.blocks, row_bytes = blocks * kQ8_0BlockBytes;
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t n = 0; n < qa.rows; ++n) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = w.blocks + o * row_bytes + b * kQ8_0BlockBytes;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const int8_t* qw = reinterpret_cast<const int8_t*>(blk + 2);
        const int8_t* qx = qa.q.data() + n * qa.in + b * kQ8_0Weights;
        int32_t s = 0;
        for (int i = 0; i < kQ8_0Weights; ++i) s += int32_t(qw[i]) * int32_t(qx[i]);
        acc = std::fma(float(s), quant::fp16_to_fp32(dh) * qa.d[size_t(n * blocks + b)], acc);
      }
      y[n * w.out + o] = acc;
    }
  }
}

namespace {
void quantize_scalar(const float* x, int64_t rows, int64_t in, Q8_0Activations& qa) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < qa.blocks; ++b)
      quantize_block_q8_0_ref(x + r * in + b * kQ8_0Weights, qa.q.data() + r * in + b * kQ8_0Weights,
                              &qa.d[size_t(r * qa.blocks + b)], &qa.sum[size_t(r * qa.blocks + b)]);
}

const Q8_0Kernels& q8_0_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return q8_0_avx512_kernels();
    case Isa::kAvx2: return q8_0_avx2_kernels();
    case Isa::kScalar: break;
  }
  return q8_0_scalar_kernels();
}
}  // namespace

const Q8_0Kernels& q8_0_scalar_kernels() {
  static const Q8_0Kernels table{Isa::kScalar, quantize_scalar, q8_0_rows_ref};
  return table;
}

}  // namespace detail

void quantize_activations_q8_0_ref(const float* x, int64_t rows, int64_t in, Q8_0Activations& qa) {
  qa.resize(rows, in);
  detail::quantize_scalar(x, rows, in, qa);
}

void q8_0_matmul_ref(const Q8_0PlaneView& w, const Q8_0Activations& qa, float* y) {
  detail::q8_0_rows_ref(w, qa, 0, w.out, y);
}

void quantize_activations_q8_0(CpuContext& ctx, const float* x, int64_t rows, int64_t in, Q8_0Activations& qa) {
  qa.resize(rows, in);
  detail::q8_0_kernels_for(ctx.isa()).quantize(x, rows, in, qa);
}

void q8_0_matmul(CpuContext& ctx, const Q8_0PlaneView& w, const Q8_0Activations& qa, float* y) {
  BITSPLIT_CHECK(w.in % detail::kQ8_0Weights == 0, "Q8_0: the row length must be a multiple of 32");
  BITSPLIT_CHECK(qa.in == w.in, "Q8_0 activations quantised for another row length");
  const auto& k = detail::q8_0_kernels_for(ctx.isa());
  ctx.run_slices(w.out, 16, [&](int64_t b, int64_t e) { k.matmul(w, qa, b, e, y); });
}

}  // namespace bitsplit::cpu
