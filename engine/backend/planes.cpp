// Bit-split planes in memory: packing for the CPU kernels, the CPU products, fitting planes to
// f32 weights, and reading them from a converted file.
#include "bitsplit/planes.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace bitsplit {

void SplitProjection::pack(cpu::CpuContext& ctx, bool release_draft, bool release_residual) {
  if (!packed_draft && cpu::PackedPlane::supported(group, draft_bits, true)) {
    packed_draft = std::make_shared<const cpu::PackedPlane>(cpu::PackedPlane::pack(ctx, draft()));
    if (release_draft) {
      std::vector<uint8_t>().swap(draft_codes);
      std::vector<uint16_t>().swap(draft_scales);
      std::vector<uint16_t>().swap(draft_offsets);
    }
  }
  if (!packed_residual && cpu::PackedPlane::supported(group, residual_bits, false)) {
    packed_residual = std::make_shared<const cpu::PackedPlane>(cpu::PackedPlane::pack(ctx, residual()));
    if (release_residual) {
      std::vector<uint8_t>().swap(resid_codes);
      std::vector<uint16_t>().swap(resid_scales);
    }
  }
}

void SplitProjection::cpu_draft_matmul(cpu::CpuContext& ctx, const cpu::QuantizedActivations& x, float* y,
                                       const cpu::SignPlaneView* delta) const {
  if (packed_draft) cpu::draft_matmul(ctx, *packed_draft, x, y, delta);
  else cpu::draft_matmul(ctx, draft(), x, y, delta);
}

void SplitProjection::cpu_residual_matmul(cpu::CpuContext& ctx, const cpu::QuantizedActivations& x, float* y) const {
  if (packed_residual) cpu::residual_matmul(ctx, *packed_residual, x, y);
  else cpu::residual_matmul(ctx, residual(), x, y);
}

uint64_t SplitProjection::plane_bytes() const {
  const int64_t groups = quant::groups_per_row(in, group);
  return uint64_t(out * (quant::code_row_bytes(in, group, draft_bits) + quant::code_row_bytes(in, group, residual_bits) +
                         2 * 3 * groups));
}

SplitProjection SplitProjection::sized(int64_t out, int64_t in, int group, int draft_bits, int residual_bits) {
  SplitProjection p;
  p.out = out;
  p.in = in;
  p.group = group;
  p.draft_bits = draft_bits;
  p.residual_bits = residual_bits;
  const int64_t groups = quant::groups_per_row(in, group);
  p.draft_codes.resize(size_t(out * quant::code_row_bytes(in, group, draft_bits)));
  p.resid_codes.resize(size_t(out * quant::code_row_bytes(in, group, residual_bits)));
  p.draft_scales.resize(size_t(out * groups));
  p.draft_offsets.resize(p.draft_scales.size());
  p.resid_scales.resize(p.draft_scales.size());
  return p;
}

SplitProjection split_projection(const std::vector<float>& w, int64_t rows, int64_t cols, const quant::SplitParams& params,
                                 const float* importance) {
  SplitProjection p = SplitProjection::sized(rows, cols, params.group, params.draft_bits, params.residual_bits);
  const int64_t groups = quant::groups_per_row(cols, params.group);
  const int64_t d_bytes = quant::code_row_bytes(cols, params.group, params.draft_bits);
  const int64_t r_bytes = quant::code_row_bytes(cols, params.group, params.residual_bits);
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t o) {
    quant::split_row(w.data() + o * cols, importance, cols, params,
                         {p.draft_codes.data() + o * d_bytes, p.draft_scales.data() + o * groups,
                          p.draft_offsets.data() + o * groups},
                         {p.resid_codes.data() + o * r_bytes, p.resid_scales.data() + o * groups});
  });
  return p;
}

Result<SplitProjection> split_projection_gptq(const std::vector<float>& w, int64_t rows, int64_t cols,
                                              const quant::SplitParams& params, const float* importance,
                                              const float* covariance, int64_t covariance_block) {
  SplitProjection p = SplitProjection::sized(rows, cols, params.group, params.draft_bits, params.residual_bits);
  BITSPLIT_RETURN_IF_ERROR(quant::split_matrix_gptq(
      w.data(), rows, cols, params, importance, covariance,
      {p.draft_codes.data(), p.draft_scales.data(), p.draft_offsets.data(), p.resid_codes.data(), p.resid_scales.data()},
      covariance_block));
  return p;
}

Result<SplitProjection> fit_projection(const std::vector<float>& w, int64_t rows, int64_t cols,
                                       const quant::SplitParams& params, const float* importance,
                                       const float* covariance, int64_t covariance_block) {
  if (covariance && quant::uses_error_feedback(params)) {
    return split_projection_gptq(w, rows, cols, params, importance, covariance, covariance_block);
  }
  return split_projection(w, rows, cols, params, importance);
}

quant::DraftTensorErrors measure_draft_errors(const std::string& base, const std::vector<float>& w, int64_t rows,
                                              int64_t cols, int64_t n_layers, const quant::SplitParams& params,
                                              const float* importance, int64_t max_rows) {
  constexpr int kWidths = quant::kMaxDraftBits - quant::kMinDraftBits + 1;
  const int64_t sampled = std::max<int64_t>(1, std::min(rows, max_rows));
  // Per sampled row, summed in row order afterwards: the result does not depend on the schedule.
  std::vector<std::array<double, kWidths + 1>> per_row(static_cast<size_t>(sampled));
  tbb::parallel_for(int64_t{0}, sampled, [&](int64_t s) {
    const int64_t r = sampled == rows ? s : s * (rows - 1) / std::max<int64_t>(1, sampled - 1);
    auto& acc = per_row[size_t(s)];
    acc.fill(0.0);
    quant::draft_row_errors(w.data() + r * cols, importance, cols, params, acc.data(), &acc[kWidths]);
  });
  quant::DraftTensorErrors e;
  e.name = base;
  e.rows = rows;
  e.cols = cols;
  double signal = 0.0;
  for (const auto& acc : per_row) {
    for (int b = 0; b < kWidths; ++b) e.error[b] += acc[size_t(b)];
    signal += acc[kWidths];
  }
  const double weight = quant::draft_class_weight(base, n_layers);
  for (double& v : e.error) v = signal > 0.0 ? weight * v / signal : 0.0;
  return e;
}

std::vector<float> SplitProjection::dequantize(bool with_residual) const {
  const int64_t groups = quant::groups_per_row(in, group);
  const int64_t d_bytes = quant::code_row_bytes(in, group, draft_bits);
  const int64_t r_bytes = quant::code_row_bytes(in, group, residual_bits);
  // A residual held only packed (borrowed from a file) is read back through the file layout.
  std::vector<uint8_t> unpacked_codes;
  std::vector<uint16_t> unpacked_scales;
  const uint8_t* resid_code_rows = resid_codes.data();
  const uint16_t* resid_scale_rows = resid_scales.data();
  if (with_residual && resid_codes.empty() && packed_residual) {
    unpacked_codes.resize(size_t(out * r_bytes));
    unpacked_scales.resize(size_t(out * groups));
    quant::unpack_tiles(packed_residual->shape(), packed_residual->data(), unpacked_codes.data(),
                        unpacked_scales.data(), nullptr);
    resid_code_rows = unpacked_codes.data();
    resid_scale_rows = unpacked_scales.data();
  }
  std::vector<float> w(static_cast<size_t>(in * out));
  tbb::parallel_for(int64_t{0}, out, [&](int64_t o) {
    float* row = w.data() + o * in;
    quant::dequantize_draft_row_ref(draft_codes.data() + o * d_bytes, draft_scales.data() + o * groups,
                                    draft_offsets.data() + o * groups, in, group, draft_bits, row);
    if (!with_residual) return;
    std::vector<float> r(static_cast<size_t>(in));
    quant::dequantize_residual_row_ref(resid_code_rows + o * r_bytes, resid_scale_rows + o * groups, in, group,
                                       residual_bits, r.data());
    for (int64_t i = 0; i < in; ++i) row[i] += r[size_t(i)];
  });
  return w;
}

namespace {

// Checks a plane tensor's presence, type and shape.
Status check_plane(const WeightSource& source, const std::string& name, gguf::TensorType type, int64_t row_elems,
                   int64_t rows) {
  const gguf::TensorInfo* t = source.find_tensor(name);
  if (!t) return Status::error(source.path() + ": tensor '" + name + "' is missing");
  if (t->type != type || t->dims != std::vector<int64_t>{row_elems, rows}) {
    return Status::error(source.path() + ": tensor '" + name + "' is " + gguf::tensor_type_name(t->type) + " " +
                         t->shape_string() + ", expected " + gguf::tensor_type_name(type) + " [" +
                         std::to_string(row_elems) + ", " + std::to_string(rows) + "]");
  }
  return Status::ok();
}

}  // namespace

Result<SplitProjection> load_split_planes(const WeightSource& source, const std::string& base, int64_t in,
                                          int64_t out, const SplitFormat& f, cpu::CpuContext* pack_draft) {
  // The planes' shapes are checked before anything is sized for (in, out), which come from the
  // metadata: a header cannot make the loader allocate more than the file holds.
  const auto tensors = split_plane_tensors(base, in, out, f);
  for (const SplitPlaneTensor& st : tensors) BITSPLIT_RETURN_IF_ERROR(check_plane(source, st.name, st.type, st.row, st.rows));
  // The shape only: each file-layout vector is sized when it is filled (a plane used or packed
  // from the map never allocates one).
  SplitProjection p;
  p.out = out;
  p.in = in;
  p.group = f.group;
  p.draft_bits = f.draft_bits_for(base);
  p.residual_bits = f.residual_bits;
  const int64_t groups = quant::groups_per_row(in, f.group);
  if (pack_draft && cpu::PackedPlane::supported(p.group, p.draft_bits, true)) {
    // The draft packed from the map's bytes (F16 tensors start on the file's alignment, so the
    // scales and offsets are 2-byte aligned there); its file layout is never allocated.
    const SplitTensorNames n = split_tensor_names(base);
    const gguf::TensorInfo* codes = source.find_tensor(n.draft_codes);
    const gguf::TensorInfo* scales = source.find_tensor(n.draft_scales);
    const gguf::TensorInfo* offsets = source.find_tensor(n.draft_offsets);
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> c, source.raw_bytes(*codes));
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> s, source.raw_bytes(*scales));
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> o, source.raw_bytes(*offsets));
    if (reinterpret_cast<uintptr_t>(s.data()) % 2 == 0 && reinterpret_cast<uintptr_t>(o.data()) % 2 == 0) {
      const cpu::DraftPlaneView view{c.data(), reinterpret_cast<const uint16_t*>(s.data()),
                                     reinterpret_cast<const uint16_t*>(o.data()), out, in, p.group, p.draft_bits};
      p.packed_draft = std::make_shared<const cpu::PackedPlane>(cpu::PackedPlane::pack(*pack_draft, view));
      for (const gguf::TensorInfo* t : {codes, scales, offsets}) source.release(*t);
    }
  }
  // Each file-layout plane's bytes are copied as stored (I8 codes, little-endian F16 scales) into
  // the buffers sized for the shape; check_plane has matched the sizes. A packed residual is
  // borrowed from the memory map where the source can keep it (and it is aligned), else unpacked
  // into the file layout (Model::load repacks it).
  for (const SplitPlaneTensor& st : tensors) {
    const bool draft_plane = st.plane == SplitPlane::kDraftCodes || st.plane == SplitPlane::kDraftScales ||
                             st.plane == SplitPlane::kDraftOffsets;
    if (draft_plane && p.packed_draft) continue;  // packed above
    const gguf::TensorInfo& t = *source.find_tensor(st.name);
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> raw, source.raw_bytes(t));
    if (st.plane == SplitPlane::kResidPacked) {
      const quant::PackedShape shape = quant::packed_shape(out, in, f.group, f.residual_bits, false);
      BITSPLIT_CHECK(raw.size() == shape.bytes(), "packed plane size checked above");
      auto owner = source.keep_alive();
      if (owner && cpu::PackedPlane::aligned_for_borrowing(raw.data())) {
        p.packed_residual = std::make_shared<const cpu::PackedPlane>(cpu::PackedPlane::borrow(shape, raw.data(), owner));
        source.will_need(t);  // read in the background while the rest loads (a cold page cache)
      } else {
        p.resid_codes.resize(size_t(out * quant::code_row_bytes(in, f.group, f.residual_bits)));
        p.resid_scales.resize(size_t(out * groups));
        quant::unpack_tiles(shape, raw.data(), p.resid_codes.data(), p.resid_scales.data(), nullptr);
        source.release(t);
      }
      continue;
    }
    // Codes: `row` bytes per output; scales and offsets: `row` halves.
    const size_t n = size_t(st.row * st.rows);
    void* dest = nullptr;
    switch (st.plane) {
      case SplitPlane::kDraftCodes: p.draft_codes.resize(n); dest = p.draft_codes.data(); break;
      case SplitPlane::kDraftScales: p.draft_scales.resize(n); dest = p.draft_scales.data(); break;
      case SplitPlane::kDraftOffsets: p.draft_offsets.resize(n); dest = p.draft_offsets.data(); break;
      case SplitPlane::kResidCodes: p.resid_codes.resize(n); dest = p.resid_codes.data(); break;
      case SplitPlane::kResidScales: p.resid_scales.resize(n); dest = p.resid_scales.data(); break;
      case SplitPlane::kResidPacked: break;
    }
    const size_t bytes = st.type == gguf::TensorType::F16 ? 2 * n : n;
    BITSPLIT_CHECK(raw.size() == bytes, "plane size checked above");
    std::memcpy(dest, raw.data(), bytes);
    source.release(t);
  }
  return p;
}

Result<std::vector<float>> load_split_f32(const WeightSource& source, const std::string& base, int64_t in,
                                          int64_t out, const SplitFormat& f, bool with_residual) {
  BITSPLIT_ASSIGN_OR_RETURN(SplitProjection p, load_split_planes(source, base, in, out, f));
  return p.dequantize(with_residual);
}

}  // namespace bitsplit
