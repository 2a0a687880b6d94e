// The draft plane fitted with error feedback (GPTQ: Frantar et al., "GPTQ: Accurate Post-Training
// Quantization for Generative Pre-trained Transformers", 2022) against the second moments H of
// the projection's input, then the residual plane for what the draft left.
//
// Column j of W is coded with its group's grid; the error it leaves, scaled by the inverse
// Hessian's Cholesky factor, is pushed onto the columns not yet coded, so the draft's output
// error ||X (W - D)^T|| (not its weight error) is what the codes minimise. Each group's grid
// (fp16 scale and offset) is fitted by the ordinary fit (quant::split_row, draft only) to the
// group's weights as updated when the group is reached. The residual is fitted to the original
// W minus the draft, so D + R still stands for W.
#include <cblas.h>
#include <lapacke.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bitsplit/planes.h"

namespace bitsplit {
namespace {

// Columns per lazy-update block (a whole number of groups).
int block_columns(int group) { return std::max(1, 128 / group) * group; }

// U with U^T U = (H + damp I)^-1 (f32, [n x n] row-major, upper triangle; the rest zero). H's
// zero-diagonal columns (an input that was always 0) get a unit diagonal. The damping starts at
// 1 % of H's mean diagonal and grows tenfold until the factorisation succeeds.
Result<std::vector<float>> inverse_cholesky_upper(const float* covariance, int64_t n) {
  double mean_diag = 0.0;
  for (int64_t i = 0; i < n; ++i) mean_diag += double(covariance[i * n + i]);
  mean_diag /= double(std::max<int64_t>(n, 1));
  if (!(mean_diag > 0.0) || !std::isfinite(mean_diag)) mean_diag = 1.0;
  std::vector<double> h(size_t(n * n));
  for (double damp = 0.01; damp <= 100.0; damp *= 10.0) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) h[size_t(i * n + j)] = double(covariance[i * n + j]);
    for (int64_t i = 0; i < n; ++i) {
      double& d = h[size_t(i * n + i)];
      if (d == 0.0) d = 1.0;
      d += damp * mean_diag;
    }
    // H is symmetric, so its row-major array is also H in column-major order, which LAPACK takes
    // without transposing: column-major lower factors are the row-major upper triangle here.
    const auto ni = lapack_int(n);
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', ni, h.data(), ni) != 0) continue;
    if (LAPACKE_dpotri(LAPACK_COL_MAJOR, 'L', ni, h.data(), ni) != 0) continue;
    for (int64_t i = 0; i < n; ++i)  // H^-1's upper triangle (row-major) mirrored into the lower
      for (int64_t j = i + 1; j < n; ++j) h[size_t(j * n + i)] = h[size_t(i * n + j)];
    // Column-major lower L with H^-1 = L L^T is row-major upper U = L^T with H^-1 = U^T U.
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', ni, h.data(), ni) != 0) continue;
    std::vector<float> u(size_t(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i; j < n; ++j) u[size_t(i * n + j)] = float(h[size_t(i * n + j)]);
    return u;
  }
  return Status::error("the input covariance (" + std::to_string(n) + " x " + std::to_string(n) +
                       ") is not positive definite even with damping; was the importance matrix made for this model?");
}

// One pass of error feedback over the columns of `work` ([rows x cols], updated in place):
// at each group's first column, grid(r, gi, weights, n) fits row r's grid of group gi to the
// group's current weights; code(r, j, value) codes one weight and returns its decoded value.
// Rows run in parallel (a row's codes depend only on that row), blocks of columns in order.
template <class Grid, class Code>
void feedback_pass(std::vector<float>& work, int64_t rows, int64_t cols, int group, const std::vector<float>& u,
                   const Grid& grid, const Code& code) {
  const int block = block_columns(group);
  std::vector<float> err(size_t(rows * block));
  for (int64_t i1 = 0; i1 < cols; i1 += block) {
    const int64_t i2 = std::min<int64_t>(cols, i1 + block);
    tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
      float* wr = work.data() + r * cols;
      float* er = err.data() + r * block;
      for (int64_t j = i1; j < i2; ++j) {
        if (j % group == 0) grid(r, j / group, wr + j, std::min<int64_t>(group, cols - j));
        const float e = (wr[j] - code(r, j, wr[j])) / u[size_t(j * cols + j)];
        const float* uj = u.data() + j * cols;
        for (int64_t k = j + 1; k < i2; ++k) wr[k] -= e * uj[k];
        er[j - i1] = e;
      }
    });
    if (i2 < cols) {
      // The columns after the block: W[:, i2:] -= E · U[i1:i2, i2:].
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(cols - i2), int(i2 - i1), -1.0f,
                  err.data(), block, u.data() + i1 * cols + i2, int(cols), 1.0f, work.data() + i2, int(cols));
    }
  }
}

// Packs per-weight codes ([rows x padded], padding 0) into a plane's code rows.
void pack_codes(const std::vector<uint8_t>& codes, int64_t rows, int64_t cols, int group, int bits,
                std::vector<uint8_t>& out) {
  const int64_t groups = quant::groups_per_row(cols, group), padded = quant::padded_width(cols, group);
  const int64_t row_bytes = quant::code_row_bytes(cols, group, bits);
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      quant::pack_group_codes(codes.data() + r * padded + gi * group, group, bits,
                              out.data() + r * row_bytes + gi * group * bits / 8);
    }
  });
}

}  // namespace

Result<SplitProjection> split_projection_gptq(const std::vector<float>& w, int64_t rows, int64_t cols,
                                              const quant::SplitParams& params, const float* importance,
                                              const float* covariance) {
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> u, inverse_cholesky_upper(covariance, cols));
  // The grids are fitted with the input's mean squares as column weights unless told otherwise.
  std::vector<float> diag;
  if (!importance) {
    diag.resize(size_t(cols));
    for (int64_t i = 0; i < cols; ++i) diag[size_t(i)] = covariance[i * cols + i];
    importance = diag.data();
  }
  SplitProjection p = SplitProjection::sized(rows, cols, params.group, params.draft_bits, params.residual_bits);
  const int group = params.group;
  const int64_t groups = quant::groups_per_row(cols, group), padded = quant::padded_width(cols, group);
  const quant::FitTier tier = quant::default_fit_tier();
  std::vector<uint8_t> codes(size_t(rows * padded), 0);
  // Each row's current grid: draft (scale, offset) or residual scale, decoded from fp16, and the
  // scale's inverse (0 for a zero scale), computed once per group rather than per weight.
  std::vector<float> grid_scale(static_cast<size_t>(rows)), grid_offset(static_cast<size_t>(rows)),
      grid_inverse(static_cast<size_t>(rows));
  const auto set_scale = [&](int64_t r, float s) {
    grid_scale[size_t(r)] = s;
    grid_inverse[size_t(r)] = s > 0.0f ? 1.0f / s : 0.0f;
  };

  // The draft: D's codes against W.
  std::vector<float> work = w;
  quant::SplitParams draft_only = params;
  draft_only.residual_bits = 0;
  const float top = float((1 << params.draft_bits) - 1);
  feedback_pass(
      work, rows, cols, group, u,
      [&](int64_t r, int64_t gi, const float* wg, int64_t n) {
        uint8_t scratch[quant::kMaxGroup];
        quant::DraftRow one{scratch, p.draft_scales.data() + r * groups + gi, p.draft_offsets.data() + r * groups + gi};
        quant::split_row(tier, wg, importance + gi * group, n, draft_only, one, {});
        set_scale(r, quant::fp16_to_fp32(one.scales[0]));
        grid_offset[size_t(r)] = quant::fp16_to_fp32(one.offsets[0]);
      },
      [&](int64_t r, int64_t j, float v) {
        const float s = grid_scale[size_t(r)], m = grid_offset[size_t(r)];
        const float q = std::clamp(std::nearbyint((v - m) * grid_inverse[size_t(r)]), 0.0f, top);
        codes[size_t(r * padded + j)] = uint8_t(q);
        return m + s * q;
      });
  pack_codes(codes, rows, cols, group, params.draft_bits, p.draft_codes);
  if (params.residual_bits == 0) return p;

  // The residual: R's codes against W - D, with feedback too, so D + R's output error is what
  // they minimise.
  const int64_t d_bytes = quant::code_row_bytes(cols, group, params.draft_bits);
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
    float* wr = work.data() + r * cols;
    quant::dequantize_draft_row_ref(p.draft_codes.data() + r * d_bytes, p.draft_scales.data() + r * groups,
                                    p.draft_offsets.data() + r * groups, cols, group, params.draft_bits, wr);
    for (int64_t j = 0; j < cols; ++j) wr[j] = w[size_t(r * cols + j)] - wr[j];
  });
  std::fill(codes.begin(), codes.end(), uint8_t(1 << (params.residual_bits - 1)));  // padding: r = 0
  const float half = float(1 << (params.residual_bits - 1));
  const std::vector<float> no_draft(size_t(group), 0.0f);
  feedback_pass(
      work, rows, cols, group, u,
      [&](int64_t r, int64_t gi, const float* rg, int64_t n) {
        uint8_t scratch[quant::kMaxGroup];
        quant::ResidualRow one{scratch, p.resid_scales.data() + r * groups + gi};
        quant::fit_residual_row(tier, rg, no_draft.data(), importance + gi * group, n, params, one);
        set_scale(r, quant::fp16_to_fp32(one.scales[0]));
      },
      [&](int64_t r, int64_t j, float v) {
        const float t = grid_scale[size_t(r)];
        const float c = std::clamp(std::nearbyint(v * grid_inverse[size_t(r)]), -half, half - 1.0f);
        codes[size_t(r * padded + j)] = uint8_t(int(c + half));
        return t * c;
      });
  pack_codes(codes, rows, cols, group, params.residual_bits, p.resid_codes);
  return p;
}

bool uses_error_feedback(const quant::SplitParams& params) { return params.residual_bits != 6; }

Result<SplitProjection> fit_projection(const std::vector<float>& w, int64_t rows, int64_t cols,
                                       const quant::SplitParams& params, const float* importance,
                                       const float* covariance) {
  if (covariance && uses_error_feedback(params)) {
    return split_projection_gptq(w, rows, cols, params, importance, covariance);
  }
  return split_projection(w, rows, cols, params, importance);
}

}  // namespace bitsplit
