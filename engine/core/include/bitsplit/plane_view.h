// Views of bit-split planes and quantised activations in memory: what the CPU kernels
// (cpu/), the GPU kernels (gpu/) and the device draft read. One definition for all of them;
// C++17 and free of CUDA types, because the CUDA sources include it. The layouts are
// docs/FORMAT.md's ("Bit-split planes", "BitDelta files", "Kernel arithmetic").
#pragma once

#include <cstdint>

namespace bitsplit {

// A plane of `out` rows; row o starts at codes + o * quant::code_row_bytes(in, group, bits), its
// fp16 scales (and offsets) at scales + o * quant::groups_per_row(in, group).
struct ResidualPlaneView {
  const uint8_t* codes;
  const uint16_t* scales;  // t per (row, group), fp16 bits
  int64_t out, in;
  int group;  // 32, 64 or 128 (the _ref functions accept any multiple of 4 up to quant::kMaxGroup)
  int bits;   // 8 or 6
};
struct DraftPlaneView {
  const uint8_t* codes;
  const uint16_t* scales;   // s per (row, group), fp16 bits
  const uint16_t* offsets;  // m per (row, group), fp16 bits
  int64_t out, in;
  int group;
  int bits;  // 2 (SIMD tiers); 3 and 4 run the scalar kernel on every tier
};
// A BitDelta variant of one projection (docs/FORMAT.md, "BitDelta files"): W_v = D + alpha ⊙ S.
// Row o's signs start at signs + o * row_bytes; bit i % 8 of byte i / 8 set means s_oi = -1.
// Kernels read only the first ceil(in / 8) bytes of a row; bits at i >= in are ignored.
struct SignPlaneView {
  const uint8_t* signs;
  const float* alpha;  // out values, or 1 when !alpha_per_row
  int64_t out, in, row_bytes;
  bool alpha_per_row;
};

// Activations quantised per (row, group) to int8 (cpu::QuantizedActivations' arrays): row r's
// codes at q + r * padded, its per-group scales at scale + r * groups and exact int32 sums of
// the codes at sum + r * groups.
struct QuantizedRowsView {
  const int8_t* q;
  const float* scale;
  const int32_t* sum;
  int64_t rows, padded, groups;
};

}  // namespace bitsplit
