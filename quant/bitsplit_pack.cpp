// Bit-plane packing of B-bit codes (B in 2, 3, 4, 6, 8) for the draft and residual planes.
#include "bitsplit/quant.h"
#include "bitsplit/status.h"

namespace bitsplit::quant {
namespace {

// The sub-plane widths of a B-bit code, lowest bits first.
struct Planes {
  int n;
  int width[2];
};
Planes planes_of(int bits) {
  switch (bits) {
    case 2: return {1, {2, 0}};
    case 3: return {2, {2, 1}};
    case 4: return {1, {4, 0}};
    case 6: return {2, {4, 2}};
    case 8: return {1, {8, 0}};
    default: BITSPLIT_CHECK(false, "unsupported code width " + std::to_string(bits));
  }
  return {};
}

}  // namespace

bool valid_code_bits(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 6 || bits == 8; }

namespace {

// One sub-plane of width K (a compile-time constant, so the loops vectorise): byte j holds bits
// shift..shift+K-1 of codes j, j + bytes, j + 2·bytes, ... at bit positions 0, K, 2K, ...
template <int K>
void pack_plane(const uint8_t* codes, int bytes, int shift, uint8_t* out) {
  constexpr uint8_t kMask = uint8_t((1u << K) - 1);
  for (int j = 0; j < bytes; ++j) {
    uint8_t b = 0;
    for (int t = 0; t < 8 / K; ++t) b |= uint8_t(((codes[j + t * bytes] >> shift) & kMask) << (t * K));
    out[j] = b;
  }
}

}  // namespace

void pack_group_codes(const uint8_t* codes, int group, int bits, uint8_t* out) {
  const Planes planes = planes_of(bits);
  int shift = 0;
  for (int p = 0; p < planes.n; ++p) {
    const int k = planes.width[p];
    const int bytes = group * k / 8;
    switch (k) {
      case 1: pack_plane<1>(codes, bytes, shift, out); break;
      case 2: pack_plane<2>(codes, bytes, shift, out); break;
      case 4: pack_plane<4>(codes, bytes, shift, out); break;
      case 8: pack_plane<8>(codes, bytes, shift, out); break;
      default: BITSPLIT_CHECK(false, "unsupported plane width " + std::to_string(k));
    }
    out += bytes;
    shift += k;
  }
}

void unpack_group_codes(const uint8_t* packed, int group, int bits, uint8_t* codes) {
  const Planes planes = planes_of(bits);
  for (int i = 0; i < group; ++i) codes[i] = 0;
  int shift = 0;
  for (int p = 0; p < planes.n; ++p) {
    const int k = planes.width[p];
    const int bytes = group * k / 8;
    const uint8_t mask = uint8_t((1u << k) - 1);
    for (int j = 0; j < bytes; ++j)
      for (int t = 0; t < 8 / k; ++t) codes[j + t * bytes] |= uint8_t(((packed[j] >> (t * k)) & mask) << shift);
    packed += bytes;
    shift += k;
  }
}

}  // namespace bitsplit::quant
