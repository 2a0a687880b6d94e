// The draft plane fitted with error feedback (GPTQ: Frantar et al., "GPTQ: Accurate Post-Training
// Quantization for Generative Pre-trained Transformers", 2022) against the second moments H of
// the projection's input, then the residual plane for what the draft left.
//
// Column j of W is coded with its group's grid; the error it leaves, scaled by the inverse
// Hessian's Cholesky factor, is pushed onto the columns not yet coded, so the draft's output
// error ||X (W - D)^T|| (not its weight error) is what the codes minimise. Each group's grid
// (fp16 scale and offset) is fitted by the ordinary fit (split_row, draft only) to the group's
// weights as updated when the group is reached. The residual is fitted to the original W minus
// the draft, so D + R still stands for W.
#include <cblas.h>
#include <dlfcn.h>
#include <lapacke.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <mutex>
#include <cmath>
#include <string>
#include <vector>

#include "bitsplit/quant.h"

namespace bitsplit::quant {
namespace {

// Columns per lazy-update block (a whole number of groups).
int block_columns(int group) { return std::max(1, 128 / group) * group; }

// U with U^T U = (H + damp I)^-1 (f32, [n x n] row-major, upper triangle; the rest zero). H's
// zero-diagonal columns (an input that was always 0) get a unit diagonal. The damping starts at
// `damping` times H's mean diagonal (SplitParams::feedback_damping) and grows tenfold until the
// factorisation succeeds.
Result<std::vector<float>> inverse_cholesky_upper(const float* covariance, int64_t n, double damping) {
  double mean_diag = 0.0;
  for (int64_t i = 0; i < n; ++i) mean_diag += double(covariance[i * n + i]);
  mean_diag /= double(std::max<int64_t>(n, 1));
  if (!(mean_diag > 0.0) || !std::isfinite(mean_diag)) mean_diag = 1.0;
  std::vector<double> h(size_t(n * n));
  for (double damp = damping; damp <= 100.0; damp *= 10.0) {
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

// One diagonal block of the input's second moments: columns [c0, c0 + n) and the inverse
// factor U of that block alone ([n x n]). A full covariance is one block over every column.
struct FeedbackBlock {
  int64_t c0 = 0, n = 0;
  std::vector<float> u;
};

// One pass of error feedback over the columns of `work` ([rows x cols], updated in place), one
// diagonal block after another (errors are pushed only within a block): at each group's first
// column, grid(r, gi, weights, n) fits row r's grid of group gi to the group's current weights;
// code(r, j, value) codes one weight and returns its decoded value. Rows run in parallel (a
// row's codes depend only on that row), column chunks in order.
template <class Grid, class Code>
void feedback_pass(std::vector<float>& work, int64_t rows, int64_t cols, int group,
                   const std::vector<FeedbackBlock>& blocks, const Grid& grid, const Code& code) {
  const int chunk = block_columns(group);
  std::vector<float> err(size_t(rows * chunk));
  for (const FeedbackBlock& b : blocks) {
    const std::vector<float>& u = b.u;
    const int64_t n = b.n;
    for (int64_t i1 = 0; i1 < n; i1 += chunk) {
      const int64_t i2 = std::min<int64_t>(n, i1 + chunk);
      tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
        float* wr = work.data() + r * cols + b.c0;
        float* er = err.data() + r * chunk;
        for (int64_t j = i1; j < i2; ++j) {
          if ((b.c0 + j) % group == 0) grid(r, (b.c0 + j) / group, wr + j, std::min<int64_t>(group, cols - b.c0 - j));
          const float e = (wr[j] - code(r, b.c0 + j, wr[j])) / u[size_t(j * n + j)];
          const float* uj = u.data() + j * n;
          for (int64_t k = j + 1; k < i2; ++k) wr[k] -= e * uj[k];
          er[j - i1] = e;
        }
      });
      if (i2 < n) {
        // The block's columns after the chunk: W[:, i2:n] -= E · U[i1:i2, i2:n].
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(n - i2), int(i2 - i1), -1.0f, err.data(),
                    chunk, u.data() + i1 * n + i2, int(n), 1.0f, work.data() + b.c0 + i2, int(cols));
      }
    }
  }
}

// Both planes of one matrix fitted with feedback: the state the two passes share (the inverse
// factor, each row's current grid, the per-weight codes) and the passes as named steps.
class FeedbackFit {
 public:
  FeedbackFit(const float* w, int64_t rows, int64_t cols, const SplitParams& params, const float* importance,
              const std::vector<FeedbackBlock>& blocks, SplitPlanes out)
      : w_(w), rows_(rows), cols_(cols), params_(params), group_(params.group), importance_(importance),
        blocks_(blocks), out_(out), groups_(groups_per_row(cols, params.group)),
        padded_(padded_width(cols, params.group)), tier_(default_fit_tier()), codes_(size_t(rows * padded_), 0),
        grid_scale_(size_t(rows)), grid_offset_(size_t(rows)), grid_inverse_(size_t(rows)) {}

  // The draft: D's codes against W (work then holds W as the feedback left it).
  void fit_draft() {
    work_.assign(w_, w_ + rows_ * cols_);
    SplitParams draft_only = params_;
    draft_only.residual_bits = 0;
    const float top = float((1 << params_.draft_bits) - 1);
    feedback_pass(
        work_, rows_, cols_, group_, blocks_,
        [&](int64_t r, int64_t gi, const float* wg, int64_t n) {
          uint8_t scratch[kMaxGroup];
          DraftRow one{scratch, out_.draft_scales + r * groups_ + gi, out_.draft_offsets + r * groups_ + gi};
          split_row(tier_, wg, importance_ + gi * group_, n, draft_only, one, {});
          set_scale(r, fp16_to_fp32(one.scales[0]));
          grid_offset_[size_t(r)] = fp16_to_fp32(one.offsets[0]);
        },
        [&](int64_t r, int64_t j, float v) {
          const float s = grid_scale_[size_t(r)], m = grid_offset_[size_t(r)];
          const float q = std::clamp(std::nearbyint((v - m) * grid_inverse_[size_t(r)]), 0.0f, top);
          codes_[size_t(r * padded_ + j)] = uint8_t(q);
          return m + s * q;
        });
    pack_codes(params_.draft_bits, out_.draft_codes);
  }

  // The residual: R's codes against W - D, with feedback too, so D + R's output error is what
  // they minimise.
  void fit_residual() {
    const int64_t d_bytes = code_row_bytes(cols_, group_, params_.draft_bits);
    tbb::parallel_for(int64_t{0}, rows_, [&](int64_t r) {
      float* wr = work_.data() + r * cols_;
      dequantize_draft_row_ref(out_.draft_codes + r * d_bytes, out_.draft_scales + r * groups_,
                               out_.draft_offsets + r * groups_, cols_, group_, params_.draft_bits, wr);
      for (int64_t j = 0; j < cols_; ++j) wr[j] = w_[r * cols_ + j] - wr[j];
    });
    std::fill(codes_.begin(), codes_.end(), uint8_t(1 << (params_.residual_bits - 1)));  // padding: r = 0
    const float half = float(1 << (params_.residual_bits - 1));
    const std::vector<float> no_draft(size_t(group_), 0.0f);
    feedback_pass(
        work_, rows_, cols_, group_, blocks_,
        [&](int64_t r, int64_t gi, const float* rg, int64_t n) {
          uint8_t scratch[kMaxGroup];
          ResidualRow one{scratch, out_.resid_scales + r * groups_ + gi};
          fit_residual_row(tier_, rg, no_draft.data(), importance_ + gi * group_, n, params_, one);
          set_scale(r, fp16_to_fp32(one.scales[0]));
        },
        [&](int64_t r, int64_t j, float v) {
          const float t = grid_scale_[size_t(r)];
          const float c = std::clamp(std::nearbyint(v * grid_inverse_[size_t(r)]), -half, half - 1.0f);
          codes_[size_t(r * padded_ + j)] = uint8_t(int(c + half));
          return t * c;
        });
    pack_codes(params_.residual_bits, out_.resid_codes);
  }

 private:
  // Row r's current grid scale and its inverse (0 for a zero scale), computed once per group
  // rather than per weight.
  void set_scale(int64_t r, float s) {
    grid_scale_[size_t(r)] = s;
    grid_inverse_[size_t(r)] = s > 0.0f ? 1.0f / s : 0.0f;
  }

  // Packs the per-weight codes ([rows x padded], padding included) into a plane's code rows.
  void pack_codes(int bits, uint8_t* plane) const {
    const int64_t row_bytes = code_row_bytes(cols_, group_, bits);
    tbb::parallel_for(int64_t{0}, rows_, [&](int64_t r) {
      for (int64_t gi = 0; gi < groups_; ++gi) {
        pack_group_codes(codes_.data() + r * padded_ + gi * group_, group_, bits,
                         plane + r * row_bytes + gi * group_ * bits / 8);
      }
    });
  }

  const float* w_;
  const int64_t rows_, cols_;
  const SplitParams& params_;
  const int group_;
  const float* importance_;
  const std::vector<FeedbackBlock>& blocks_;
  const SplitPlanes out_;
  const int64_t groups_, padded_;
  const FitTier tier_;
  std::vector<uint8_t> codes_;
  // Each row's current grid: draft (scale, offset) or residual scale, decoded from fp16.
  std::vector<float> grid_scale_, grid_offset_, grid_inverse_;
  std::vector<float> work_;
};

// Both planes of rows [0, rows) of W (a chunk of a matrix; `out` points at the chunk's rows).
void fit_rows(const float* w, int64_t rows, int64_t cols, const SplitParams& params, const float* importance,
              const std::vector<FeedbackBlock>& blocks, SplitPlanes out);

}  // namespace

Status split_matrix_gptq(const float* w, int64_t rows, int64_t cols, const SplitParams& params,
                         const float* importance, const float* covariance, SplitPlanes out, int64_t block) {
  blas_single_threaded();
  const std::vector<DiagonalBlock> layout = diagonal_blocks(cols, block);
  if (layout.size() > 1 && layout[0].n % params.group != 0) {
    return Status::error("the covariance's diagonal blocks (" + std::to_string(block) +
                         " columns) must be a whole number of groups of " + std::to_string(params.group));
  }
  std::vector<FeedbackBlock> blocks;
  // The grids are fitted with the input's mean squares as column weights unless told otherwise.
  std::vector<float> diag(importance ? 0 : size_t(cols));
  for (const DiagonalBlock& b : layout) {
    const float* h = covariance + b.offset;
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> u, inverse_cholesky_upper(h, b.n, params.feedback_damping));
    if (!importance)
      for (int64_t i = 0; i < b.n; ++i) diag[size_t(b.c0 + i)] = h[i * b.n + i];
    blocks.push_back({b.c0, b.n, std::move(u)});
  }
  if (!importance) importance = diag.data();
  // Rows in chunks (a row's codes depend on no other row): the working copy and the codes of a
  // chunk alone are held, not a second copy of a whole output head.
  constexpr int64_t kChunkRows = 2048;
  const int64_t groups = groups_per_row(cols, params.group);
  const int64_t d_bytes = code_row_bytes(cols, params.group, params.draft_bits);
  const int64_t r_bytes = params.residual_bits ? code_row_bytes(cols, params.group, params.residual_bits) : 0;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const SplitPlanes part{out.draft_codes + r0 * d_bytes, out.draft_scales + r0 * groups,
                           out.draft_offsets + r0 * groups, out.resid_codes ? out.resid_codes + r0 * r_bytes : nullptr,
                           out.resid_scales ? out.resid_scales + r0 * groups : nullptr};
    fit_rows(w + r0 * cols, std::min(kChunkRows, rows - r0), cols, params, importance, blocks, part);
  }
  return Status::ok();
}

namespace {
void fit_rows(const float* w, int64_t rows, int64_t cols, const SplitParams& params, const float* importance,
              const std::vector<FeedbackBlock>& blocks, SplitPlanes out) {
  FeedbackFit fit(w, rows, cols, params, importance, blocks, out);
  fit.fit_draft();
  if (params.residual_bits != 0) fit.fit_residual();
}
}  // namespace

std::vector<DiagonalBlock> diagonal_blocks(int64_t cols, int64_t block) {
  if (block <= 0 || block >= cols) block = cols;
  std::vector<DiagonalBlock> out;
  int64_t offset = 0;
  for (int64_t c0 = 0; c0 < cols; c0 += block) {
    const int64_t n = std::min(block, cols - c0);
    out.push_back({c0, n, offset});
    offset += n * n;
  }
  return out;
}

int64_t covariance_floats(int64_t cols, int64_t block) {
  const std::vector<DiagonalBlock> blocks = diagonal_blocks(cols, block);
  return blocks.empty() ? 0 : blocks.back().offset + blocks.back().n * blocks.back().n;
}

void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    // OpenBLAS's own threads would spin beside oneTBB's workers (which call BLAS from several
    // tasks at once): measured 2x slower on 2 cores. Other BLAS builds have no such call.
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
  });
}

bool uses_error_feedback(const SplitParams& params) { return params.residual_bits != 6; }

}  // namespace bitsplit::quant
