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

// A Q8_0 block is a plane-kernel group of 32 (docs/FORMAT.md, "Q8_0 baseline kernel arithmetic"):
// every block goes through a tier's group quantiser, whole (in % 32 == 0, so no padding).
void quantize_blocks(const float* x, int64_t rows, int64_t in, Q8_0Activations& qa, GroupQuantizer quantize_group) {
  qa.resize(rows, in);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < qa.blocks; ++b)
      quantize_group(x + r * in + b * kQ8_0Weights, kQ8_0Weights, kQ8_0Weights,
                     qa.q.data() + r * in + b * kQ8_0Weights, &qa.d[size_t(r * qa.blocks + b)],
                     &qa.sum[size_t(r * qa.blocks + b)]);
}

Q8_0Rows q8_0_rows_for(Isa isa) {
  switch (isa) {
    case Isa::kAmx:  // the Q8_0 baseline has no AMX kernel
    case Isa::kAvx512: return q8_0_rows_avx512;
    case Isa::kAvx2: return q8_0_rows_avx2;
    case Isa::kScalar: break;
  }
  return q8_0_rows_ref;
}

}  // namespace
}  // namespace detail

void quantize_activations_q8_0_ref(const float* x, int64_t rows, int64_t in, Q8_0Activations& qa) {
  detail::quantize_blocks(x, rows, in, qa, detail::quantize_group_ref);
}

void q8_0_matmul_ref(const Q8_0PlaneView& w, const Q8_0Activations& qa, float* y) {
  detail::q8_0_rows_ref(w, qa, 0, w.out, y);
}

void quantize_activations_q8_0(CpuContext& ctx, const float* x, int64_t rows, int64_t in, Q8_0Activations& qa) {
  detail::quantize_blocks(x, rows, in, qa, detail::kernels_of(ctx).quantize_group);
}

void q8_0_matmul(CpuContext& ctx, const Q8_0PlaneView& w, const Q8_0Activations& qa, float* y) {
  BITSPLIT_CHECK(w.in % detail::kQ8_0Weights == 0, "Q8_0: the row length must be a multiple of 32");
  BITSPLIT_CHECK(qa.in == w.in, "Q8_0 activations quantised for another row length");
  const detail::Q8_0Rows rows = detail::q8_0_rows_for(ctx.isa());
  ctx.run_slices(w.out, 16, [&](int64_t b, int64_t e) { rows(w, qa, b, e, y); });
}

}  // namespace bitsplit::cpu
