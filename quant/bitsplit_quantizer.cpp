// The bit-split quantizer: fits each group's draft (scale, offset) by searching clipping
// ranges and refining with weighted least squares, then quantises the residual
// symmetrically with its own searched scale. The fit itself is bitsplit_fit.inc, compiled here
// for baseline x86-64 (the reference) and in bitsplit_fit_avx2/avx512.cpp for wider vectors.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "bitsplit/quant.h"
#include "bitsplit/status.h"

#define BITSPLIT_FIT_NS fit_ref
#include "bitsplit_fit.inc"
#undef BITSPLIT_FIT_NS

namespace bitsplit::quant {
namespace fit_avx2 {
void split_row(const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d, ResidualRow r);
void fit_residual_row(const float* w, const float* draft, const float* importance, int64_t in, const SplitParams& p,
                      ResidualRow r);
}
namespace fit_avx512 {
void split_row(const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d, ResidualRow r);
void fit_residual_row(const float* w, const float* draft, const float* importance, int64_t in, const SplitParams& p,
                      ResidualRow r);
}

namespace {

float round_fp16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// Largest finite fp16, so scales never overflow to infinity.
constexpr float kFp16Max = 65504.0f;

// Nearest code for each weight given the (fp16-rounded) scale and offset.
void assign_draft(const float* x, int n, float scale, float offset, int levels, uint8_t* q) {
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = std::nearbyint((x[i] - offset) * inv);
    q[i] = uint8_t(std::clamp(v, 0.0f, float(levels - 1)));
  }
}

}  // namespace

void split_row_ref(const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d,
                   ResidualRow r) {
  fit_ref::split_row(w, importance, in, p, d, r);
}

const char* fit_tier_name(FitTier tier) {
  switch (tier) {
    case FitTier::kReference: return "reference";
    case FitTier::kAvx2: return "avx2";
    case FitTier::kAvx512: return "avx512";
  }
  return "?";
}

bool fit_tier_supported(FitTier tier) {
  switch (tier) {
    case FitTier::kReference: return true;
    case FitTier::kAvx2: return __builtin_cpu_supports("avx2");
    case FitTier::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
}

FitTier default_fit_tier() {
  static const FitTier chosen = [] {
    FitTier best = fit_tier_supported(FitTier::kAvx512) ? FitTier::kAvx512
                   : fit_tier_supported(FitTier::kAvx2) ? FitTier::kAvx2
                                                        : FitTier::kReference;
    // BITSPLIT_ISA (as for the plane kernels) may ask for a lower tier; all give the same bits.
    if (const char* env = std::getenv("BITSPLIT_ISA")) {
      const std::string want = env;
      if (want == "scalar") best = FitTier::kReference;
      if (want == "avx2" && fit_tier_supported(FitTier::kAvx2)) best = FitTier::kAvx2;
    }
    return best;
  }();
  return chosen;
}

void split_row(FitTier tier, const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d,
               ResidualRow r) {
  BITSPLIT_CHECK(fit_tier_supported(tier), std::string("the CPU lacks the ") + fit_tier_name(tier) + " fit tier");
  switch (tier) {
    case FitTier::kReference: return fit_ref::split_row(w, importance, in, p, d, r);
    case FitTier::kAvx2: return fit_avx2::split_row(w, importance, in, p, d, r);
    case FitTier::kAvx512: return fit_avx512::split_row(w, importance, in, p, d, r);
  }
}

void fit_residual_row(FitTier tier, const float* w, const float* draft, const float* importance, int64_t in,
                      const SplitParams& p, ResidualRow r) {
  BITSPLIT_CHECK(fit_tier_supported(tier), std::string("the CPU lacks the ") + fit_tier_name(tier) + " fit tier");
  switch (tier) {
    case FitTier::kReference: return fit_ref::fit_residual_row(w, draft, importance, in, p, r);
    case FitTier::kAvx2: return fit_avx2::fit_residual_row(w, draft, importance, in, p, r);
    case FitTier::kAvx512: return fit_avx512::fit_residual_row(w, draft, importance, in, p, r);
  }
}

void dequantize_draft_row_ref(const uint8_t* codes, const uint16_t* scales, const uint16_t* offsets, int64_t in,
                              int group, int bits, float* out) {
  uint8_t q[kMaxGroup];
  for (int64_t gi = 0; gi < groups_per_row(in, group); ++gi) {
    unpack_group_codes(codes + gi * group * bits / 8, group, bits, q);
    const float s = fp16_to_fp32(scales[gi]), m = fp16_to_fp32(offsets[gi]);
    for (int i = 0; i < group && gi * group + i < in; ++i) out[gi * group + i] = m + s * float(q[i]);
  }
}

void dequantize_residual_row_ref(const uint8_t* codes, const uint16_t* scales, int64_t in, int group, int bits,
                                 float* out) {
  uint8_t u[kMaxGroup];
  const int half = 1 << (bits - 1);
  for (int64_t gi = 0; gi < groups_per_row(in, group); ++gi) {
    unpack_group_codes(codes + gi * group * bits / 8, group, bits, u);
    const float t = fp16_to_fp32(scales[gi]);
    for (int i = 0; i < group && gi * group + i < in; ++i) out[gi * group + i] = t * float(int(u[i]) - half);
  }
}

void minmax_roundtrip_row_ref(const float* w, int64_t in, int group, int bits, float* out) {
  const int levels = 1 << bits;
  for (int64_t base = 0; base < in; base += group) {
    const int n = int(std::min<int64_t>(group, in - base));
    float lo = w[base], hi = w[base];
    for (int i = 1; i < n; ++i) {
      lo = std::min(lo, w[base + i]);
      hi = std::max(hi, w[base + i]);
    }
    const float scale = round_fp16(std::min(kFp16Max, (hi - lo) / float(levels - 1)));
    const float offset = round_fp16(lo);
    uint8_t q[kMaxGroup];
    assign_draft(w + base, n, scale, offset, levels, q);
    for (int i = 0; i < n; ++i) out[base + i] = offset + scale * float(q[i]);
  }
}

}  // namespace bitsplit::quant
