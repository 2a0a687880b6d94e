// linear(): one projection of a forward pass over its row groups, on f32 weights, Q8_0 blocks or
// bit-split planes (D·X on the model's Backend, R·X on the CPU), then each group's LoRA and bias.
#include <cblas.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <optional>

#include "linear.h"

namespace bitsplit::forward_internal {

namespace {

// A product over step 1b's 2·n rows folded to n: out[i] = two[i] + two[half + i], one f32 add,
// then `plus[i]` added when given (the residual term, in the same pass: (D·X̂ + D·Ê) + R·X̂).
// out may be `two`: each element is read before it is written.
void sum_halves(const Model& model, const float* two, size_t half, float* out, const float* plus = nullptr) {
  for_slices(model, int64_t(half), kParallelElements, [&](int64_t b, int64_t e) {
    if (plus) {
      for (int64_t i = b; i < e; ++i) out[i] = (two[i] + two[int64_t(half) + i]) + plus[i];
    } else {
      for (int64_t i = b; i < e; ++i) out[i] = two[i] + two[int64_t(half) + i];
    }
  });
}

// Row group g's sign plane as the kernels take it, if its variant has one.
std::optional<cpu::SignPlaneView> delta_of(const std::vector<GroupProjection>& parts, size_t g) {
  if (parts[g].signs) return parts[g].signs->view();
  return std::nullopt;
}

// Q8_0 blocks: one product over every group's rows, then each group's signs in f32.
void q8_0_projection(const Model& model, const std::vector<uint8_t>& q8, ProjectionInput& in,
                     const std::vector<GroupProjection>& parts, Activations& y) {
  const Activations& x = in.f32();
  const std::vector<RowGroup>& groups = in.groups();
  in.q8_0_kernel(model, cpu::Q8_0PlaneView{q8.data(), y.width, x.width}, y.data.data());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (auto d = delta_of(parts, g)) cpu::sign_matmul_add_f32(*d, x.row(groups[g].row0), groups[g].rows, y.row(groups[g].row0));
  }
}

// f32 weights through the reference matmul (inputs int8-rounded when the model emulates that):
// one product when every group reads the same weights, else one per group; then each group's signs.
void f32_projection(const Model& model, ProjectionInput& in, const std::vector<GroupProjection>& parts, Activations& y) {
  const Activations& x = in.f32();
  const std::vector<RowGroup>& groups = in.groups();
  const std::vector<float>& xs = model.activation_rounding() > 0 ? in.rounded(model.activation_rounding()) : x.data;
  const bool shared = std::all_of(parts.begin(), parts.end(), [&](const GroupProjection& p) { return p.w == parts[0].w; });
  if (shared && model.f32_gemm() && model.activation_rounding() == 0) {
    // y = x · Wᵀ by BLAS: a calibration's long batches at GEMM speed (not batch invariant), in
    // slices of rows on oneTBB's workers (BLAS itself single-threaded: quant::blas_single_threaded).
    constexpr int64_t kRows = 64;
    tbb::parallel_for(int64_t{0}, (x.rows + kRows - 1) / kRows, [&](int64_t s) {
      const int64_t r0 = s * kRows, n = std::min(kRows, x.rows - r0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(y.width), int(x.width), 1.0f,
                  xs.data() + r0 * x.width, int(x.width), parts[0].w->data(), int(x.width), 0.0f, y.row(r0),
                  int(y.width));
    });
  } else if (shared) {
    cpu::matmul_f32(xs, x.rows, x.width, *parts[0].w, y.width, {}, y.data);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const RowGroup& rg = groups[g];
    const float* xg = xs.data() + rg.row0 * x.width;
    if (!shared) {
      cpu::matmul_f32({xg, size_t(rg.rows * x.width)}, rg.rows, x.width, *parts[g].w, y.width, {},
                      {y.row(rg.row0), size_t(rg.rows * y.width)});
    }
    if (auto d = delta_of(parts, g)) cpu::sign_matmul_add_f32(*d, xg, rg.rows, y.row(rg.row0));
  }
}

// The draft plane D alone, per group with its signs, on the model's backend.
Status draft_projection(const Model& model, const SplitProjection& planes, ProjectionInput& in,
                        const std::vector<GroupProjection>& parts, Activations& y) {
  const std::vector<RowGroup>& groups = in.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto d = delta_of(parts, g);
    BITSPLIT_RETURN_IF_ERROR(model.backend().draft_matmul(planes, in.quantized_group(model, planes.group, g),
                                                          y.row(groups[g].row0), d ? &*d : nullptr));
  }
  return Status::ok();
}

// The two planes: D·X (+ the variant's signs) on the model's backend (CPU or GPU), R·X on the
// CPU, summed draft first (the same order as cpu::target_matmul). R·X (packed when loaded) runs
// on the CPU, over every group's rows at once, while the backend computes the first group's D·X
// (a GPU overlaps); the other groups' D·X follow. With the activations' remainder (step 1b: for
// D, and for R too, as the model asks) a plane multiplies twice the rows and each row sums its
// two halves.
Status target_projection(const Model& model, const SplitProjection& planes, ProjectionInput& in,
                         const std::vector<GroupProjection>& parts, LinearScratch& scratch, Activations& y) {
  const std::vector<RowGroup>& groups = in.groups();
  const bool rem_r = model.target_activations() == TargetActivations::kRemainder;
  const bool rem_d = rem_r || model.target_activations() == TargetActivations::kDraftRemainder;
  const cpu::QuantizedActivations& all = in.quantized(model, planes.group, rem_r);
  float* residual = scratch.residual(size_t(all.rows * y.width));
  float* dbuf = nullptr;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto d = delta_of(parts, g);
    const cpu::QuantizedActivations& qg = in.quantized_group(model, planes.group, g, rem_d);
    float* yg = y.row(groups[g].row0);
    float* out = yg;
    if (rem_d) {
      dbuf = scratch.draft(size_t(qg.rows * y.width));
      out = dbuf;
    }
    if (g == 0) {
      BITSPLIT_RETURN_IF_ERROR(model.backend().target_matmul(
          planes, qg, out, d ? &*d : nullptr, [&] { planes.cpu_residual_matmul(model.cpu(), all, residual); }));
    } else {
      BITSPLIT_RETURN_IF_ERROR(model.backend().draft_matmul(planes, qg, out, d ? &*d : nullptr));
    }
    // With the residual's halves still to be summed, R·X is added after the loop.
    if (rem_d) {
      sum_halves(model, dbuf, size_t(groups[g].rows * y.width), yg, rem_r ? nullptr : residual + groups[g].row0 * y.width);
    }
  }
  if (rem_r) sum_halves(model, residual, y.data.size(), residual);
  if (!rem_d || rem_r) {  // (else added with D's halves above)
    for_slices(model, int64_t(y.data.size()), kParallelElements, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y.data[size_t(i)] += residual[i];
    });
  }
  return Status::ok();
}

}  // namespace

// One projection: f32 weights through the reference matmul, Q8_0 blocks through the Q8_0 kernel,
// or bit-split planes through the plane kernels (D + R for the target, D alone for the draft),
// then the bias. A variant's sign plane joins D (fused into the draft kernel on the plane path);
// its LoRA change is added in f32 from the unrounded input, in every tier, before the bias.
// `parts` has one entry per row group of `in`. The residual R (the target's bulk) is streamed
// once for every group's rows; D runs per group, with that group's signs.
Status linear(const Model& model, Pass pass, const HeldProjection& held, ProjectionInput& in,
              const std::vector<GroupProjection>& parts, LinearScratch& scratch, Activations& y) {
  if (held.q8_0) {
    q8_0_projection(model, *held.q8_0, in, parts, y);
  } else if (!held.planes) {
    f32_projection(model, in, parts, y);
  } else if (pass == Pass::kDraft) {
    BITSPLIT_RETURN_IF_ERROR(draft_projection(model, *held.planes, in, parts, y));
  } else {
    BITSPLIT_RETURN_IF_ERROR(target_projection(model, *held.planes, in, parts, scratch, y));
  }
  const Activations& x = in.f32();
  const std::vector<RowGroup>& groups = in.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const RowGroup& rg = groups[g];
    if (parts[g].lora) parts[g].lora->apply(x.row(rg.row0), rg.rows, y.row(rg.row0));
    const std::vector<float>& bias = *parts[g].bias;
    if (bias.empty()) continue;
    for (int64_t r = rg.row0; r < rg.row0 + rg.rows; ++r)
      for (int64_t o = 0; o < y.width; ++o) y.data[size_t(r * y.width + o)] += bias[size_t(o)];
  }
  return Status::ok();
}

}  // namespace bitsplit::forward_internal
