// PackedPlane: a plane in the SIMD kernels' tile layout (include/bitsplit/cpu.h) — repacked once
// from the file layout, or borrowed from a file that stores it —, its scalar accessors, and the
// dispatching packed entry points.
// The repack moves bits, never changes a value, so every kernel on it is bit-identical to the
// file-layout kernels.
#include <bit>
#include <cstring>
#include <vector>

#include "bitsplit/status.h"
#include "plane_kernels.h"

namespace bitsplit::cpu {

namespace {

constexpr int kRows = PackedPlane::kTileRows;

// Copies out to the tile bytes in parallel (each tile is written by one worker).
void fill(CpuContext& ctx, PackedPlane& p, uint8_t* dst, const uint8_t* codes, const uint16_t* scales,
          const uint16_t* offsets) {
  const quant::PackedShape shape = p.shape();
  ctx.run_slices(p.tiles, 1, [&](int64_t t0, int64_t t1) { quant::pack_tiles(shape, codes, scales, offsets, dst, t0, t1); });
}

}  // namespace

PackedPlane PackedPlane::with_shape(const quant::PackedShape& shape) {
  PackedPlane p;
  static_cast<quant::PackedShape&>(p) = shape;
  return p;
}

PackedPlane PackedPlane::borrow(const quant::PackedShape& shape, const uint8_t* bytes, std::shared_ptr<const void> owner) {
  BITSPLIT_CHECK(aligned_for_borrowing(bytes), "borrowed packed plane bytes must be 64-byte aligned");
  BITSPLIT_CHECK(owner != nullptr, "borrowed packed plane bytes need an owner");
  PackedPlane p = with_shape(shape);
  p.owner_ = std::move(owner);
  p.data_ = bytes;
  return p;
}

PackedPlane PackedPlane::copy(CpuContext& ctx, const quant::PackedShape& shape, const uint8_t* bytes) {
  PackedPlane p = with_shape(shape);
  p.buffer_ = PlaneBuffer(ctx, size_t(shape.bytes()), /*whole_huge_pages=*/false);
  std::memcpy(p.buffer_.data(), bytes, size_t(shape.bytes()));
  p.data_ = p.buffer_.data();
  return p;
}

PackedPlane PackedPlane::pack(CpuContext& ctx, const ResidualPlaneView& r) {
  PackedPlane p = with_shape(quant::packed_shape(r.out, r.in, r.group, r.bits, false));
  p.buffer_ = PlaneBuffer(ctx, size_t(p.size_bytes()), /*whole_huge_pages=*/false);
  p.data_ = p.buffer_.data();
  fill(ctx, p, p.buffer_.data(), r.codes, r.scales, nullptr);
  return p;
}

PackedPlane PackedPlane::pack(CpuContext& ctx, const DraftPlaneView& d) {
  PackedPlane p = with_shape(quant::packed_shape(d.out, d.in, d.group, d.bits, true));
  p.buffer_ = PlaneBuffer(ctx, size_t(p.size_bytes()), /*whole_huge_pages=*/false);
  p.data_ = p.buffer_.data();
  fill(ctx, p, p.buffer_.data(), d.codes, d.scales, d.offsets);
  return p;
}

void PackedPlane::unpack_group(int64_t o, int64_t k, uint8_t* codes) const {
  quant::unpack_tile_group(shape(), tile(o / kRows), int(o % kRows), k, codes);
}

uint16_t PackedPlane::scale(int64_t o, int64_t k) const {
  const auto* sc = reinterpret_cast<const uint16_t*>(tile(o / kRows) + groups * code_block_bytes());
  return sc[k * kRows + o % kRows];
}

uint16_t PackedPlane::offset(int64_t o, int64_t k) const {
  const auto* sc = reinterpret_cast<const uint16_t*>(tile(o / kRows) + groups * code_block_bytes());
  return sc[(groups + k) * kRows + o % kRows];
}

void residual_matmul(CpuContext& ctx, const PackedPlane& r, const QuantizedActivations& qa, float* y) {
  BITSPLIT_CHECK(!r.draft && qa.in == r.in && qa.group == r.group, "activations quantised for another plane shape");
  const auto& k = detail::kernels_of(ctx);
  ctx.run_slices(r.out, kRows, [&](int64_t b, int64_t e) { k.residual_packed(r, qa, b, e, y); });
}

void draft_matmul(CpuContext& ctx, const PackedPlane& d, const QuantizedActivations& qa, float* y,
                  const SignPlaneView* delta) {
  BITSPLIT_CHECK(d.draft && qa.in == d.in && qa.group == d.group, "activations quantised for another plane shape");
  if (delta) {
    BITSPLIT_CHECK(delta->out == d.out && delta->in == d.in && delta->row_bytes >= detail::sign_bytes_read(d.in) &&
                       delta->signs != nullptr && delta->alpha != nullptr,
                   "sign plane does not match the draft plane's shape");
  }
  const auto& k = detail::kernels_of(ctx);
  ctx.run_slices(d.out, kRows, [&](int64_t b, int64_t e) { k.draft_packed(d, qa, b, e, y, delta); });
}

}  // namespace bitsplit::cpu
