// BitDelta sign planes: the scalar reference encoder and decoder (the specification of the
// 1-bit delta format; layout in quant.h and docs/FORMAT.md).
#include <cmath>
#include <cstring>

#include "bitsplit/quant.h"

namespace bitsplit::quant {

void bitdelta_encode_ref(const float* delta, int64_t out, int64_t in, DeltaAlpha mode, uint8_t* signs, float* alpha) {
  const int64_t row_bytes = delta_sign_row_bytes(in);
  double matrix_sum = 0.0;
  for (int64_t r = 0; r < out; ++r) {
    const float* d = delta + r * in;
    uint8_t* s = signs + r * row_bytes;
    std::memset(s, 0, size_t(row_bytes));
    double row_sum = 0.0;
    for (int64_t i = 0; i < in; ++i) {
      if (std::signbit(d[i]) && d[i] != 0.0f) s[i / 8] |= uint8_t(1u << (i % 8));
      row_sum += std::fabs(double(d[i]));
    }
    if (mode == DeltaAlpha::kRow) alpha[r] = in > 0 ? float(row_sum / double(in)) : 0.0f;
    matrix_sum += row_sum;
  }
  if (mode == DeltaAlpha::kMatrix) alpha[0] = out * in > 0 ? float(matrix_sum / double(out * in)) : 0.0f;
}

void bitdelta_decode_row_ref(const uint8_t* signs, float alpha, int64_t in, float* out) {
  for (int64_t i = 0; i < in; ++i) out[i] = (signs[i / 8] >> (i % 8)) & 1 ? -alpha : alpha;
}

}  // namespace bitsplit::quant
