// The projections of a forward pass (forward.cpp) over its row groups: the activations they
// read and write, their input in each form the kernels take (made once however many projections
// read it), their scratch, and linear(): one projection on f32 weights, Q8_0 blocks or bit-split
// planes, with each row group's variant. Internal to engine/model/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "bitsplit/model.h"
#include "bitsplit/variant.h"

namespace bitsplit::forward_internal {

// Rows of activations: [rows x width] row-major.
struct Activations {
  int64_t rows, width;
  std::vector<float> data;
  Activations(int64_t r, int64_t w) : rows(r), width(w), data(size_t(r * w)) {}
  float* row(int64_t r) { return data.data() + r * width; }
  const float* row(int64_t r) const { return data.data() + r * width; }
};

// body(begin, end) over [0, n) in contiguous slices on the model's CPU threads when there are at
// least min_parallel items (prompt chunks; each item is written by one slice only), else inline:
// a one-row decode step does not pay for waking the workers. Same results either way.
template <typename Body>
void for_slices(const Model& model, int64_t n, int64_t min_parallel, Body&& body) {
  if (n < min_parallel || !model.has_cpu()) return body(int64_t{0}, n);
  model.cpu().run_slices(n, 1, body);
}
constexpr int64_t kParallelRows = 16, kParallelElements = 1 << 16;

// Consecutive rows of a pass decoded with one variant (null: the base). A pass's sequences are
// ordered by variant, so each variant's rows form one group.
struct RowGroup {
  int64_t row0 = 0, rows = 0;
  const Variant* variant = nullptr;
};

// The input of one or more projections. Its int8 form (plane kernels) or int8-rounded f32
// form (llama.cpp emulation) is made at most once, however many projections read it: q, k
// and v share one input, gate and up another. With several row groups the plane kernels' D
// runs per group (each with its variant's signs) on the group's own rows, quantised once
// per group too: activations are quantised row by row, so a group's rows quantise alike alone.
class ProjectionInput {
 public:
  ProjectionInput(const Activations& x, const std::vector<RowGroup>& groups) : x_(x), groups_(groups) {}
  const Activations& f32() const { return x_; }
  const std::vector<RowGroup>& groups() const { return groups_; }

  // Step 1 of the plane kernels' arithmetic; with `remainder`, step 1b too (2·rows rows: the
  // activations' int8 form, then their remainder's).
  const cpu::QuantizedActivations& quantized(const Model& model, int group, bool remainder = false) {
    Quantized& c = all_[remainder];
    if (c.group != group) {
      quantize(model, x_.data.data(), x_.rows, group, remainder, c.qa);
      c.group = group;
    }
    return c.qa;
  }

  // The rows of row group g alone (all of them when there is one group).
  const cpu::QuantizedActivations& quantized_group(const Model& model, int group, size_t g, bool remainder = false) {
    if (groups_.size() == 1) return quantized(model, group, remainder);
    std::vector<Quantized>& per = per_group_[remainder];
    if (per.size() != groups_.size()) per.resize(groups_.size());
    if (per[g].group != group) {
      quantize(model, x_.row(groups_[g].row0), groups_[g].rows, group, remainder, per[g].qa);
      per[g].group = group;
    }
    return per[g].qa;
  }

  // The Q8_0 kernel; the input is quantised once for every projection that reads it.
  void q8_0_kernel(const Model& model, const cpu::Q8_0PlaneView& w, float* y) {
    if (!q8_ready_) {
      cpu::quantize_activations_q8_0(model.cpu(), x_.data.data(), x_.rows, x_.width, q8_);
      q8_ready_ = true;
    }
    cpu::q8_0_matmul(model.cpu(), w, q8_, y);
  }

  // int8 round trip of the activations per block, as llama.cpp's CPU quantised matmuls do.
  const std::vector<float>& rounded(int64_t group) {
    if (rounded_group_ == group) return rounded_;
    rounded_ = x_.data;
    for (int64_t r = 0; r < x_.rows; ++r) {
      for (int64_t b = 0; b < x_.width; b += group) {
        float* v = rounded_.data() + r * x_.width + b;
        const int64_t n = std::min(group, x_.width - b);
        float amax = 0.0f;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int64_t i = 0; i < n; ++i) v[i] = d * std::round(v[i] * inv);
      }
    }
    rounded_group_ = group;
    return rounded_;
  }

 private:
  struct Quantized {
    cpu::QuantizedActivations qa;
    int group = 0;  // 0: not made yet
  };
  void quantize(const Model& model, const float* x, int64_t rows, int group, bool remainder,
                cpu::QuantizedActivations& qa) const {
    if (remainder) cpu::quantize_activations_with_remainder(model.cpu(), x, rows, x_.width, group, qa);
    else cpu::quantize_activations(model.cpu(), x, rows, x_.width, group, qa);
  }

  const Activations& x_;
  const std::vector<RowGroup>& groups_;
  Quantized all_[2];                    // [remainder]
  std::vector<Quantized> per_group_[2];  // [remainder][row group]
  std::vector<float> rounded_;
  int64_t rounded_group_ = 0;
  cpu::Q8_0Activations q8_;
  bool q8_ready_ = false;
};

// linear()'s intermediate products in one pass: R·X, and D·X of step 1b's two halves. Grown as
// the projections need, never zeroed (every element is written before it is read), freed with the
// pass. (A fresh zeroed vector per projection was a zeroing pass and, at prompt sizes, fresh pages
// to fault in.)
class LinearScratch {
 public:
  float* residual(size_t n) { return fit(residual_, n); }
  float* draft(size_t n) { return fit(draft_, n); }

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t size = 0;
  };
  static float* fit(Buffer& b, size_t n) {
    if (b.size < n) {
      b.data.reset();  // the old buffer goes before the new one is allocated
      b.data = std::make_unique_for_overwrite<float[]>(n);
      b.size = n;
    }
    return b.data.get();
  }
  Buffer residual_, draft_;
};

// What one row group's variant makes of a projection: the f32 weights (the f32 path), the bias,
// the sign plane and the LoRA change.
struct GroupProjection {
  const std::vector<float>* w = nullptr;
  const std::vector<float>* bias = nullptr;
  const VariantSigns* signs = nullptr;
  const VariantLora* lora = nullptr;
};

// One projection: f32 weights through the reference matmul, Q8_0 blocks through the Q8_0 kernel,
// or bit-split planes through the plane kernels (D + R for the target, D alone for the draft),
// then the bias. A variant's sign plane joins D (fused into the draft kernel on the plane path);
// its LoRA change is added in f32 from the unrounded input, in every tier, before the bias.
// `parts` has one entry per row group of `in`. The residual R (the target's bulk) is streamed
// once for every group's rows; D runs per group, with that group's signs.
Status linear(const Model& model, Pass pass, const HeldProjection& held, ProjectionInput& in,
              const std::vector<GroupProjection>& parts, LinearScratch& scratch, Activations& y);

}  // namespace bitsplit::forward_internal
