// Scalar reference of the bit-split plane kernels (the specification every ISA tier matches
// bit for bit; docs/FORMAT.md, "Kernel arithmetic") and the scalar tier's kernel table.
#include <algorithm>
#include <cmath>
#include <vector>

#include "bitsplit/status.h"
#include "activation_chunks.h"
#include "plane_kernels.h"

namespace bitsplit::cpu {

void QuantizedActivations::resize(int64_t rows_, int64_t in_, int group_) {
  BITSPLIT_CHECK(rows_ >= 0 && in_ > 0 && group_ > 0 && group_ % 4 == 0 && group_ <= quant::kMaxGroup);
  rows = rows_;
  in = in_;
  group = group_;
  padded = quant::padded_width(in_, group_);
  groups = quant::groups_per_row(in_, group_);
  q.resize(size_t(rows * padded));
  scale.resize(size_t(rows * groups));
  sum.resize(size_t(rows * groups));
}

void quantize_activations_ref(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa) {
  qa.resize(rows, in, group);
  detail::quantize_rows(x, rows, in, group, qa, detail::quantize_group_ref);
}

namespace detail {

void quantize_group_ref(const float* x, int64_t n, int group, int8_t* q, float* scale, int32_t* sum) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  *sum = 0;
  *scale = 0.0f;
  if (amax >= kTinyAmax) {
    *scale = amax / 127.0f;
    const float inv = 127.0f / amax;
    for (int64_t i = 0; i < n; ++i) {
      // max(-127, .) before min(., 127), as the SIMD tiers' max_ps/min_ps: a NaN (non-finite
      // weights in a model file) becomes -127 instead of reaching the int8 conversion (undefined).
      const float v = std::min(std::max(-127.0f, round_half_away(x[i] * inv)), 127.0f);
      q[i] = int8_t(v);
      *sum += int32_t(v);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) q[i] = 0;
  }
  for (int64_t i = n; i < group; ++i) q[i] = 0;
}

}  // namespace detail

namespace detail {
namespace {

void check_shapes(int64_t in, int group, const QuantizedActivations& qa) {
  BITSPLIT_CHECK(qa.in == in && qa.group == group, "activations quantised for another plane shape");
}

// The 0/1 signs (1 = negative) of positions begin .. begin + group of one sign row; 0 at i >= in.
void group_signs(const uint8_t* row, int64_t in, int64_t begin, int group, uint8_t* neg) {
  for (int64_t i = 0, at = begin; i < group; ++i, ++at) neg[i] = at < in ? (row[at / 8] >> (at % 8)) & 1 : 0;
}

// Ss_k (step 5): sum_i s_i q_i = sum(q) - 2 * (sum of q where the sign is negative), exact.
int32_t signed_sum(const uint8_t* neg, const int8_t* q, int group, int32_t sum_q) {
  int32_t sneg = 0;
  for (int i = 0; i < group; ++i) sneg += neg[i] ? int32_t(q[i]) : 0;
  return sum_q - 2 * sneg;
}

}  // namespace

namespace {

// The residual arithmetic (step 2) over any source of codes and scales: a file-layout view or a
// PackedPlane. `unpack(o, k, u)` fills group k of row o in natural order; `scale(o, k)` is its t.
template <typename Unpack, typename Scale>
void residual_rows(int64_t out, int bits, int group, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                   float* y, Unpack unpack, Scale scale) {
  const int64_t groups = qa.groups;
  const int32_t half = 1 << (bits - 1);
  uint8_t u[quant::kMaxGroup];
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t n = 0; n < qa.rows; ++n) y[n * out + o] = 0.0f;
    for (int64_t k = 0; k < groups; ++k) {
      unpack(o, k, u);
      const float t = quant::fp16_to_fp32(scale(o, k));
      for (int64_t n = 0; n < qa.rows; ++n) {
        const int8_t* q = qa.row_q(n) + k * group;
        int32_t s = 0;
        for (int i = 0; i < group; ++i) s += int32_t(u[i]) * int32_t(q[i]);
        s -= half * qa.sum[size_t(n * groups + k)];
        float& acc = y[n * out + o];
        acc = std::fma(float(s), t * qa.scale[size_t(n * groups + k)], acc);
      }
    }
  }
}

}  // namespace

void residual_rows_ref(const ResidualPlaneView& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                       float* y) {
  check_shapes(r.in, r.group, qa);
  BITSPLIT_CHECK(r.bits == 8 || r.bits == 6);
  const int64_t row_bytes = quant::code_row_bytes(r.in, r.group, r.bits), groups = qa.groups;
  residual_rows(
      r.out, r.bits, r.group, qa, o_begin, o_end, y,
      [&](int64_t o, int64_t k, uint8_t* u) {
        quant::unpack_group_codes(r.codes + o * row_bytes + k * r.group * r.bits / 8, r.group, r.bits, u);
      },
      [&](int64_t o, int64_t k) { return r.scales[o * groups + k]; });
}

void residual_packed_ref(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                         float* y) {
  check_shapes(r.in, r.group, qa);
  BITSPLIT_CHECK(!r.draft);
  residual_rows(
      r.out, r.bits, r.group, qa, o_begin, o_end, y,
      [&](int64_t o, int64_t k, uint8_t* u) { r.unpack_group(o, k, u); },
      [&](int64_t o, int64_t k) { return r.scale(o, k); });
}

void check_delta(const DraftPlaneView& d, const SignPlaneView* delta) {
  if (!delta) return;
  BITSPLIT_CHECK(delta->out == d.out && delta->in == d.in && delta->row_bytes >= sign_bytes_read(d.in) &&
                     delta->signs != nullptr && delta->alpha != nullptr,
                 "sign plane does not match the draft plane's shape");
}

namespace {

// The draft arithmetic (step 3, and step 5 with `delta`) over any source of codes, scales and
// offsets (see residual_rows).
template <typename Unpack, typename Scale, typename Offset>
void draft_rows(int64_t out, int64_t in, int group, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                float* y, const SignPlaneView* delta, Unpack unpack, Scale scale, Offset offset) {
  const int64_t groups = qa.groups;
  uint8_t c[quant::kMaxGroup], neg[quant::kMaxGroup];
  std::vector<float> dacc(size_t(delta ? qa.rows : 0));
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t n = 0; n < qa.rows; ++n) y[n * out + o] = 0.0f;
    std::fill(dacc.begin(), dacc.end(), 0.0f);
    for (int64_t k = 0; k < groups; ++k) {
      unpack(o, k, c);
      const float s = quant::fp16_to_fp32(scale(o, k));
      const float m = quant::fp16_to_fp32(offset(o, k));
      if (delta) group_signs(delta->signs + o * delta->row_bytes, in, k * group, group, neg);
      for (int64_t n = 0; n < qa.rows; ++n) {
        const int8_t* q = qa.row_q(n) + k * group;
        int32_t sq = 0;
        for (int i = 0; i < group; ++i) sq += int32_t(c[i]) * int32_t(q[i]);
        const float sx = float(qa.sum[size_t(n * groups + k)]);
        const float inner = std::fma(s, float(sq), m * sx);
        float& acc = y[n * out + o];
        acc = std::fma(qa.scale[size_t(n * groups + k)], inner, acc);
        if (delta) {
          const int32_t ss = signed_sum(neg, q, group, qa.sum[size_t(n * groups + k)]);
          dacc[size_t(n)] = std::fma(float(ss), qa.scale[size_t(n * groups + k)], dacc[size_t(n)]);
        }
      }
    }
    if (delta) {
      const float alpha = delta_alpha(*delta, o);
      for (int64_t n = 0; n < qa.rows; ++n) y[n * out + o] = std::fma(alpha, dacc[size_t(n)], y[n * out + o]);
    }
  }
}

}  // namespace

void draft_rows_ref(const DraftPlaneView& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                    float* y, const SignPlaneView* delta) {
  check_shapes(d.in, d.group, qa);
  check_delta(d, delta);
  BITSPLIT_CHECK(d.bits == 2 || d.bits == 3 || d.bits == 4);
  const int64_t row_bytes = quant::code_row_bytes(d.in, d.group, d.bits), groups = qa.groups;
  draft_rows(
      d.out, d.in, d.group, qa, o_begin, o_end, y, delta,
      [&](int64_t o, int64_t k, uint8_t* c) {
        quant::unpack_group_codes(d.codes + o * row_bytes + k * d.group * d.bits / 8, d.group, d.bits, c);
      },
      [&](int64_t o, int64_t k) { return d.scales[o * groups + k]; },
      [&](int64_t o, int64_t k) { return d.offsets[o * groups + k]; });
}

void draft_packed_ref(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                      const SignPlaneView* delta) {
  check_shapes(d.in, d.group, qa);
  BITSPLIT_CHECK(d.draft);
  draft_rows(
      d.out, d.in, d.group, qa, o_begin, o_end, y, delta,
      [&](int64_t o, int64_t k, uint8_t* c) { d.unpack_group(o, k, c); },
      [&](int64_t o, int64_t k) { return d.scale(o, k); }, [&](int64_t o, int64_t k) { return d.offset(o, k); });
}

void sign_rows_ref(const SignPlaneView& s, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                   float* y) {
  BITSPLIT_CHECK(s.in == qa.in && s.row_bytes >= sign_bytes_read(s.in), "sign plane does not match the activations");
  const int64_t groups = qa.groups;
  uint8_t neg[quant::kMaxGroup];
  std::vector<float> dacc(size_t(qa.rows));
  for (int64_t o = o_begin; o < o_end; ++o) {
    std::fill(dacc.begin(), dacc.end(), 0.0f);
    for (int64_t k = 0; k < groups; ++k) {
      group_signs(s.signs + o * s.row_bytes, s.in, k * qa.group, qa.group, neg);
      for (int64_t n = 0; n < qa.rows; ++n) {
        const int32_t ss = signed_sum(neg, qa.row_q(n) + k * qa.group, qa.group, qa.sum[size_t(n * groups + k)]);
        dacc[size_t(n)] = std::fma(float(ss), qa.scale[size_t(n * groups + k)], dacc[size_t(n)]);
      }
    }
    const float alpha = delta_alpha(s, o);
    for (int64_t n = 0; n < qa.rows; ++n) y[n * s.out + o] = std::fma(alpha, dacc[size_t(n)], y[n * s.out + o]);
  }
}

namespace {
void quantize_scalar(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa) {
  quantize_activations_ref(x, rows, in, group, qa);
}
}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table{Isa::kScalar,      quantize_scalar,     quantize_group_ref, residual_rows_ref,
                                 draft_rows_ref,    residual_packed_ref, draft_packed_ref};
  return table;
}

}  // namespace detail

void residual_matmul_ref(const ResidualPlaneView& r, const QuantizedActivations& qa, float* y) {
  detail::residual_rows_ref(r, qa, 0, r.out, y);
}

void draft_matmul_ref(const DraftPlaneView& d, const QuantizedActivations& qa, float* y, const SignPlaneView* delta) {
  detail::draft_rows_ref(d, qa, 0, d.out, y, delta);
}

}  // namespace bitsplit::cpu
