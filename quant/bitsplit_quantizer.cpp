// The bit-split quantizer: fits each group's draft (scale, offset) by searching clipping
// ranges and refining with weighted least squares, then quantises the residual
// symmetrically with its own searched scale. Scalar reference = the specification.
#include <algorithm>
#include <cmath>

#include "bitsplit/quant.h"
#include "bitsplit/status.h"

namespace bitsplit::quant {
namespace {

float round_fp16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// Largest finite fp16, so scales never overflow to infinity.
constexpr float kFp16Max = 65504.0f;

struct DraftFitResult {
  float scale = 0.0f, offset = 0.0f;  // already rounded to fp16
  uint8_t q[kMaxGroup];
};

// Nearest code for each weight given the (fp16-rounded) scale and offset.
void assign_draft(const float* x, int n, float scale, float offset, int levels, uint8_t* q) {
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = std::nearbyint((x[i] - offset) * inv);
    q[i] = uint8_t(std::clamp(v, 0.0f, float(levels - 1)));
  }
}

double weighted_error(const float* x, const float* w, int n, const float* approx) {
  double e = 0.0;
  for (int i = 0; i < n; ++i) {
    const double d = double(x[i]) - approx[i];
    e += (w ? w[i] : 1.0) * d * d;
  }
  return e;
}

// Residual codes for r with scale t: u = clamp(round(r / t) + half, 0, 2*half - 1).
void assign_residual(const float* r, int n, float t, int bits, uint8_t* u) {
  const int half = 1 << (bits - 1);
  const float inv = t > 0.0f ? 1.0f / t : 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = std::nearbyint(r[i] * inv) + float(half);
    u[i] = uint8_t(std::clamp(v, 0.0f, float(2 * half - 1)));
  }
}

// Best symmetric scale for the residual among a few shrinks of amax / (2^(B-1) - 1).
float fit_residual(const float* r, const float* w, int n, int bits, uint8_t* u, double* error) {
  const int half = 1 << (bits - 1);
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(r[i]));
  float best_t = 0.0f;
  double best = INFINITY;
  uint8_t trial[kMaxGroup];
  float approx[kMaxGroup];
  if (amax == 0.0f) {
    for (int i = 0; i < n; ++i) u[i] = uint8_t(half);
    *error = 0.0;
    return 0.0f;
  }
  // Slightly smaller scales trade clipping of the single largest residual for a finer grid;
  // the codes reach -half, so amax / (half - 1) is the largest scale worth trying.
  for (int k = 0; k < 6; ++k) {
    const float t = round_fp16(std::min(kFp16Max, amax / (float(half) - 1.0f + 0.25f * float(k))));
    if (t <= 0.0f) continue;
    assign_residual(r, n, t, bits, trial);
    for (int i = 0; i < n; ++i) approx[i] = t * float(int(trial[i]) - half);
    const double e = weighted_error(r, w, n, approx);
    if (e < best) {
      best = e;
      best_t = t;
      std::copy(trial, trial + n, u);
    }
  }
  *error = best;
  return best_t;
}

// Weighted least squares for x ~ offset + scale * q; false when q is constant.
bool least_squares(const float* x, const float* w, int n, const uint8_t* q, float* scale, float* offset) {
  double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
  for (int i = 0; i < n; ++i) {
    const double wi = w ? w[i] : 1.0;
    sw += wi;
    sq += wi * q[i];
    sqq += wi * q[i] * q[i];
    sx += wi * x[i];
    sqx += wi * q[i] * x[i];
  }
  const double det = sw * sqq - sq * sq;
  if (!(det > 1e-12 * sw * sqq) || sw <= 0) return false;
  const double s = (sw * sqx - sq * sx) / det;
  const double m = (sqq * sx - sq * sqx) / det;
  if (!(s > 0) || !std::isfinite(s) || !std::isfinite(m)) return false;
  *scale = float(s);
  *offset = float(m);
  return true;
}

struct Objective {
  const float* x;
  const float* w;
  int n;
  int levels;
  int residual_bits;  // 6: judge D by the error of D + R6; else by D alone
};

double evaluate(const Objective& o, float scale, float offset, uint8_t* q) {
  assign_draft(o.x, o.n, scale, offset, o.levels, q);
  float d[kMaxGroup];
  for (int i = 0; i < o.n; ++i) d[i] = offset + scale * float(q[i]);
  if (o.residual_bits != 6) return weighted_error(o.x, o.w, o.n, d);
  float r[kMaxGroup];
  for (int i = 0; i < o.n; ++i) r[i] = o.x[i] - d[i];
  uint8_t u[kMaxGroup];
  double e;
  fit_residual(r, o.w, o.n, 6, u, &e);
  return e;
}

DraftFitResult fit_draft(const Objective& o, const SplitParams& p) {
  float lo = o.x[0], hi = o.x[0];
  for (int i = 1; i < o.n; ++i) {
    lo = std::min(lo, o.x[i]);
    hi = std::max(hi, o.x[i]);
  }
  DraftFitResult best;
  const float range = hi - lo;
  auto consider = [&](float scale, float offset, double* best_err) {
    scale = round_fp16(std::clamp(scale, 0.0f, kFp16Max));
    offset = round_fp16(std::clamp(offset, -kFp16Max, kFp16Max));
    uint8_t q[kMaxGroup];
    const double e = evaluate(o, scale, offset, q);
    if (e < *best_err) {
      *best_err = e;
      best.scale = scale;
      best.offset = offset;
      std::copy(q, q + o.n, best.q);
    }
  };
  double best_err = INFINITY;
  consider(range / float(o.levels - 1), lo, &best_err);  // plain min/max
  if (p.fit == DraftFit::kMinMax || range == 0.0f) return best;

  // Clipping search: shrink the range from each side in steps of range / (4 * levels), then
  // refit scale and offset by least squares on the resulting codes.
  for (int a = 0; a < p.search_steps; ++a) {
    for (int b = 0; b < p.search_steps; ++b) {
      const float l = lo + range * float(a) / float(4 * o.levels);
      const float h = hi - range * float(b) / float(4 * o.levels);
      if (h <= l) continue;
      const float scale = (h - l) / float(o.levels - 1);
      consider(scale, l, &best_err);
      uint8_t q[kMaxGroup];
      assign_draft(o.x, o.n, round_fp16(scale), round_fp16(l), o.levels, q);
      float s2, m2;
      if (least_squares(o.x, o.w, o.n, q, &s2, &m2)) consider(s2, m2, &best_err);
    }
  }
  for (int it = 0; it < p.refine_iters; ++it) {
    float s2, m2;
    if (!least_squares(o.x, o.w, o.n, best.q, &s2, &m2)) break;
    const double before = best_err;
    consider(s2, m2, &best_err);
    if (!(best_err < before)) break;
  }
  return best;
}

}  // namespace

void split_row_ref(const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d,
                   ResidualRow r) {
  BITSPLIT_CHECK(p.group > 0 && p.group <= kMaxGroup && p.group % 8 == 0, "bad group size");
  BITSPLIT_CHECK(valid_code_bits(p.draft_bits) && p.draft_bits <= 4, "bad draft bits");
  BITSPLIT_CHECK(p.residual_bits == 0 || p.residual_bits == 6 || p.residual_bits == 8, "bad residual bits");
  const int g = p.group;
  const int64_t n_groups = groups_per_row(in, g);
  const int levels = 1 << p.draft_bits;
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    // The padded tail of the last group is zero with zero importance, so it never steers
    // the fit but still gets valid codes.
    float x[kMaxGroup], wt[kMaxGroup];
    const int64_t base = gi * g;
    const int valid = int(std::min<int64_t>(g, in - base));
    bool any_weight = false;
    for (int i = 0; i < g; ++i) {
      x[i] = i < valid ? w[base + i] : 0.0f;
      wt[i] = i < valid ? (importance ? std::max(importance[base + i], 0.0f) : 1.0f) : 0.0f;
      any_weight |= wt[i] > 0.0f;
    }
    if (!any_weight) for (int i = 0; i < valid; ++i) wt[i] = 1.0f;
    const Objective o{x, wt, valid, levels, p.residual_bits};
    DraftFitResult fit = fit_draft(o, p);
    for (int i = valid; i < g; ++i) fit.q[i] = 0;
    d.scales[gi] = fp32_to_fp16(fit.scale);
    d.offsets[gi] = fp32_to_fp16(fit.offset);
    pack_group_codes(fit.q, g, p.draft_bits, d.codes + gi * g * p.draft_bits / 8);
    if (p.residual_bits == 0) continue;

    float res[kMaxGroup];
    for (int i = 0; i < g; ++i) res[i] = i < valid ? x[i] - (fit.offset + fit.scale * float(fit.q[i])) : 0.0f;
    uint8_t u[kMaxGroup];
    double err;
    const float t = fit_residual(res, wt, g, p.residual_bits, u, &err);
    r.scales[gi] = fp32_to_fp16(t);
    pack_group_codes(u, g, p.residual_bits, r.codes + gi * g * p.residual_bits / 8);
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
