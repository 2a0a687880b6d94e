// One projection's bit-split planes in memory: the file layout (what a converted file stores
// and a GPU uploads) and the CPU kernels' packed copies, with the CPU products over them;
// fitting planes to f32 weights, and reading them from a converted file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "bitsplit/split_format.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

// One projection's bit-split planes in memory, in the file's layout.
struct SplitProjection {
  int64_t out = 0, in = 0;
  int group = 64, draft_bits = 2, residual_bits = 8;
  std::vector<uint8_t> draft_codes, resid_codes;
  std::vector<uint16_t> draft_scales, draft_offsets, resid_scales;
  // A projection of this shape and format with every plane sized (and zeroed).
  static SplitProjection sized(int64_t out, int64_t in, int group, int draft_bits, int residual_bits);
  cpu::DraftPlaneView draft() const {
    return {draft_codes.data(), draft_scales.data(), draft_offsets.data(), out, in, group, draft_bits};
  }
  cpu::ResidualPlaneView residual() const { return {resid_codes.data(), resid_scales.data(), out, in, group, residual_bits}; }
  // The weights the planes stand for, [out x in] f32: D + R, or D alone (needs the file layout).
  std::vector<float> dequantize(bool with_residual) const;

  // The planes in the CPU kernels' layout (Model::load makes them, or a format-3 file's residual
  // is borrowed from its map; same results bit for bit, no per-call transposes). Where one is
  // set, the file-layout vectors of that plane may be empty: Model::load never keeps the
  // residual's, nor the draft's when the CPU drafts it.
  std::shared_ptr<const cpu::PackedPlane> packed_draft, packed_residual;
  // Makes the packed planes the layout covers; with release_*, frees the file-layout bytes.
  void pack(cpu::CpuContext& ctx, bool release_draft, bool release_residual);
  // D·X (with a variant's signs) and R·X on the CPU: the packed plane when present, else the
  // file layout. Every caller on the CPU should use these.
  void cpu_draft_matmul(cpu::CpuContext& ctx, const cpu::QuantizedActivations& x, float* y,
                        const cpu::SignPlaneView* delta = nullptr) const;
  void cpu_residual_matmul(cpu::CpuContext& ctx, const cpu::QuantizedActivations& x, float* y) const;
  // Bytes the planes stand for (codes, scales, offsets; the file layout's count even if released).
  uint64_t plane_bytes() const;
};

// Splits W [rows x cols] into planes with quant::split_row_ref (rows in parallel; the
// result does not depend on the schedule). `importance` (cols values) may be null.
SplitProjection split_projection(const std::vector<float>& w, int64_t rows, int64_t cols, const quant::SplitParams& params,
                                 const float* importance);

// The same planes with the draft fitted by error feedback against `covariance`, the [cols x cols]
// second moments of the projection's input (quant::split_matrix_gptq has the fit and its errors;
// with covariance_block > 0 it holds only H's diagonal blocks of that many columns).
Result<SplitProjection> split_projection_gptq(const std::vector<float>& w, int64_t rows, int64_t cols,
                                              const quant::SplitParams& params, const float* importance,
                                              const float* covariance, int64_t covariance_block = 0);

// The planes of W as convert makes them: split_projection_gptq where a covariance is given and
// quant::uses_error_feedback(params), else split_projection.
Result<SplitProjection> fit_projection(const std::vector<float>& w, int64_t rows, int64_t cols,
                                       const quant::SplitParams& params, const float* importance,
                                       const float* covariance, int64_t covariance_block = 0);

// E(2), E(3), E(4) of W [rows x cols] (quant.h, "draft precision under a budget") from at most
// max_rows evenly spaced rows (rows in parallel; the sum does not depend on the schedule).
quant::DraftTensorErrors measure_draft_errors(const std::string& base, const std::vector<float>& w, int64_t rows,
                                              int64_t cols, int64_t n_layers, const quant::SplitParams& params,
                                              const float* importance, int64_t max_rows = 256);

// Reads one split projection's planes (checking every tensor's type and shape). A format-3
// residual is borrowed from the source's memory map where it can keep it (packed_residual, no
// file-layout copy). With `pack_draft`, the draft is packed for the CPU straight from the file
// (packed_draft; no file-layout copy either) where the packed layout covers it.
Result<SplitProjection> load_split_planes(const WeightSource& source, const std::string& base, int64_t in, int64_t out,
                                          const SplitFormat& format, cpu::CpuContext* pack_draft = nullptr);

// Reconstructs one split projection as f32 [out x in]: D + R, or D alone.
Result<std::vector<float>> load_split_f32(const WeightSource& source, const std::string& base, int64_t in,
                                          int64_t out, const SplitFormat& format, bool with_residual);

}  // namespace bitsplit
