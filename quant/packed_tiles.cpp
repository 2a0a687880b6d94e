// The packed (tile) layout of a plane: its geometry and the repack from the file layout. Moves
// bits, never changes a value; cpu.h's PackedPlane describes the bytes, the kernels read them.
#include <bit>
#include <cstring>

#include "bitsplit/quant.h"
#include "bitsplit/status.h"

namespace bitsplit::quant {
namespace {

constexpr int kRows = PackedShape::kTileRows;

// A 3-bit group's codes (file layout at `src`: a 2-bit plane of g/4 bytes, then a 1-bit plane of
// g/8; docs/FORMAT.md "Bit-split planes") as chunk dwords: d[c] holds codes 4c .. 4c + 3, one per
// byte. In a k-bit plane byte j holds codes j + t * (g k / 8) at bit t k, and g k / 8 is a
// multiple of 4, so a chunk's codes are one unaligned dword load, shift and mask per plane.
void three_bit_dwords(const uint8_t* src, int group, uint32_t* d) {
  auto part = [](const uint8_t* plane, int plane_bytes, int k, int c) {
    const int at = 4 * c, t = at / plane_bytes;
    uint32_t v;
    std::memcpy(&v, plane + at % plane_bytes, 4);
    return (v >> (k * t)) & (k == 2 ? 0x03030303u : 0x01010101u);
  };
  for (int c = 0; c < group / 4; ++c) d[c] = part(src, group / 4, 2, c) | part(src + group / 4, group / 8, 1, c) << 2;
}

// Where code i (0 <= i < g) of tile row l sits in a group's code block: byte offset and bit
// shift of its low part, and (6 bits) of its top 2 bits. See the layout comment in
// cpu.h (PackedPlane).
struct CodeSlot {
  int64_t byte, hi_byte;
  int shift, hi_shift;
};
CodeSlot code_slot(int group, int bits, int l, int i) {
  const int c = i / 4, b = i % 4, lane_byte = 4 * l + b;
  CodeSlot s{};
  if (bits == 8) {
    s.byte = 64 * c + lane_byte;
  } else if (bits == 2) {
    s.byte = 64 * (c % (group / 16)) + lane_byte;
    s.shift = 2 * (c / (group / 16));
  } else if (bits == 4) {  // nibble vectors
    s.byte = 64 * (c % (group / 8)) + lane_byte;
    s.shift = 4 * (c / (group / 8));
  } else {  // 6: nibble vectors, then the 2-bit vectors of the top bits
    s.byte = 64 * (c % (group / 8)) + lane_byte;
    s.shift = 4 * (c / (group / 8));
    s.hi_byte = 64 * (group / 8) + 64 * (c % (group / 16)) + lane_byte;
    s.hi_shift = 2 * (c / (group / 16));
  }
  return s;
}

}  // namespace

bool packed_layout_supported(int group, int bits, bool draft) {
  return (group == 32 || group == 64 || group == 128) &&
         (draft ? (bits == 2 || bits == 3 || bits == 4) : (bits == 8 || bits == 6));
}

PackedShape packed_shape(int64_t out, int64_t in, int group, int bits, bool draft) {
  BITSPLIT_CHECK(packed_layout_supported(group, bits, draft), "plane shape not supported by the packed layout");
  PackedShape p;
  p.out = out;
  p.in = in;
  p.group = group;
  p.bits = bits;
  p.draft = draft;
  p.groups = groups_per_row(in, group);
  p.tiles = (out + kRows - 1) / kRows;
  const int64_t bytes = p.groups * (p.code_block_bytes() + (draft ? 64 : 32));
  p.tile_bytes = (bytes + 63) / 64 * 64;
  return p;
}

// A code block is 16-lane vectors of 4-code dwords (chunk c = codes 4c .. 4c + 3 as one
// little-endian uint32).
void pack_tiles(const PackedShape& p, const uint8_t* codes, const uint16_t* scales, const uint16_t* offsets,
                uint8_t* dst, int64_t t0, int64_t t1) {
  static_assert(std::endian::native == std::endian::little, "the dword packing assumes little-endian");
  const int64_t row_bytes = code_row_bytes(p.in, p.group, p.bits), gbytes = p.group * p.bits / 8;
  const int64_t cb = p.code_block_bytes();
  const int kN = p.group / 8;
  uint32_t d[kMaxGroup / 4];
  for (int64_t t = t0; t < t1; ++t) {
    uint8_t* tile = dst + t * p.tile_bytes;
    std::memset(tile, 0, size_t(p.tile_bytes));
    auto* sc = reinterpret_cast<uint16_t*>(tile + p.groups * cb);
    auto* of = sc + p.groups * kRows;
    // Group-major, so each group's code block is finished while it is in L1.
    for (int64_t k = 0; k < p.groups; ++k) {
      for (int l = 0; l < kRows && t * kRows + l < p.out; ++l) {
        const int64_t o = t * kRows + l;
        std::memcpy(sc + k * kRows + l, scales + o * p.groups + k, 2);
        if (offsets) std::memcpy(of + k * kRows + l, offsets + o * p.groups + k, 2);
        const uint8_t* src = codes + o * row_bytes + k * gbytes;
        uint8_t* block = tile + k * cb + 4 * l;
        if (p.bits != 3) {
          // At 2, 4, 6 and 8 bits the layouts hold the same bytes: file byte 4v + b of the group
          // is byte b of vector v's dword (chunks j + t kV at bits 2t are codes 4j + b + t g/4,
          // the file's byte 4j + b; nibbles and the 6-bit top bits likewise), so a tile is the
          // 16 rows' group bytes transposed by dwords.
          for (int v = 0; v < gbytes / 4; ++v) std::memcpy(block + 64 * v, src + 4 * v, 4);
          continue;
        }
        // 3 bits are stored as nibbles: vector j holds chunk j (low) and chunk j + g/8 (high).
        three_bit_dwords(src, p.group, d);
        for (int j = 0; j < kN; ++j) {
          const uint32_t v = d[j] | d[j + kN] << 4;
          std::memcpy(block + 64 * j, &v, 4);
        }
      }
    }
  }
}

void unpack_tile_group(const PackedShape& p, const uint8_t* tile, int l, int64_t k, uint8_t* codes) {
  const uint8_t* block = tile + k * p.code_block_bytes();
  const int bits = p.stored_bits();
  for (int i = 0; i < p.group; ++i) {
    const CodeSlot s = code_slot(p.group, bits, l, i);
    if (bits == 6) {
      codes[i] = uint8_t((block[s.byte] >> s.shift & 15) | (block[s.hi_byte] >> s.hi_shift & 3) << 4);
    } else {
      codes[i] = uint8_t(block[s.byte] >> s.shift & ((1 << bits) - 1));
    }
  }
}

void unpack_tiles(const PackedShape& p, const uint8_t* src, uint8_t* codes, uint16_t* scales, uint16_t* offsets) {
  const int64_t row_bytes = code_row_bytes(p.in, p.group, p.bits), gbytes = p.group * p.bits / 8;
  uint8_t group_codes[kMaxGroup];
  for (int64_t o = 0; o < p.out; ++o) {
    const uint8_t* tile = src + (o / kRows) * p.tile_bytes;
    const int l = int(o % kRows);
    const auto* sc = reinterpret_cast<const uint8_t*>(tile + p.groups * p.code_block_bytes());
    for (int64_t k = 0; k < p.groups; ++k) {
      unpack_tile_group(p, tile, l, k, group_codes);
      pack_group_codes(group_codes, p.group, p.bits, codes + o * row_bytes + k * gbytes);
      std::memcpy(scales + o * p.groups + k, sc + 2 * (k * kRows + l), 2);
      if (offsets) std::memcpy(offsets + o * p.groups + k, sc + 2 * ((p.groups + k) * kRows + l), 2);
    }
  }
}

}  // namespace bitsplit::quant
