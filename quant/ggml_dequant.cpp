// Scalar reference dequantisers for llama.cpp's block formats (Q4_0 ... Q6_K) as read from GGUF
// files, and the type-id dispatch that decodes raw, possibly unaligned, tensor bytes.
#include <algorithm>
#include <string>

#include "bitsplit/quant.h"

namespace bitsplit::quant {
namespace {

// Nibble e of a 32-weight legacy block: the first 16 weights are the low nibbles.
inline int legacy_nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

inline uint32_t load_u32_le(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// The 2-bit field of element e in the k-quant layout shared by Q2_K and Q3_K (and Q6_K's
// high bits): each 128-weight half uses 32 bytes, and the four 32-weight groups of that half
// take bit pairs 0-1, 2-3, 4-5, 6-7 of the same bytes.
inline int crumb(const uint8_t* q, int e) { return (q[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

// Q4_K / Q5_K 4-bit field: each 64-weight pair of sub-blocks shares 32 bytes, low nibbles first.
inline int k_nibble(const uint8_t* qs, int e) { return (qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15; }

// Bit e / 32 of mask[e % 32]: the high-bit plane of Q3_K and Q5_K.
inline int plane_bit(const uint8_t* mask, int e) { return (mask[e % 32] >> (e / 32)) & 1; }

// The 6-bit scale and min of sub-block s (0..7) packed in 12 bytes by Q4_K and Q5_K.
struct ScaleMin {
  int scale, min;
};
inline ScaleMin k_scale_min(const uint8_t* sc, int s) {
  if (s < 4) return {sc[s] & 63, sc[s + 4] & 63};
  return {(sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4), (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4)};
}

// Q3_K's 6-bit sub-block scale s (0..15), still biased by 32.
inline int q3_k_scale(const uint8_t* sc, int s) {
  const int low = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
  const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

template <typename Block>
void check_sizes(std::span<const Block> in, std::span<float> out, const char* name) {
  BITSPLIT_CHECK(out.size() == in.size() * size_t{Block::kWeights}, std::string(name) + ": size mismatch");
}

}  // namespace

void dequantize_q4_0_ref(std::span<const BlockQ4_0> in, std::span<float> out) {
  check_sizes(in, out, "Q4_0");
  for (size_t b = 0; b < in.size(); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    float* y = out.data() + b * BlockQ4_0::kWeights;
    for (int e = 0; e < BlockQ4_0::kWeights; ++e) y[e] = d * float(legacy_nibble(in[b].qs, e) - 8);
  }
}

void dequantize_q4_1_ref(std::span<const BlockQ4_1> in, std::span<float> out) {
  check_sizes(in, out, "Q4_1");
  for (size_t b = 0; b < in.size(); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const float m = fp16_to_fp32(in[b].m);
    float* y = out.data() + b * BlockQ4_1::kWeights;
    for (int e = 0; e < BlockQ4_1::kWeights; ++e) y[e] = d * float(legacy_nibble(in[b].qs, e)) + m;
  }
}

void dequantize_q5_0_ref(std::span<const BlockQ5_0> in, std::span<float> out) {
  check_sizes(in, out, "Q5_0");
  for (size_t b = 0; b < in.size(); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const uint32_t qh = load_u32_le(in[b].qh);
    float* y = out.data() + b * BlockQ5_0::kWeights;
    for (int e = 0; e < BlockQ5_0::kWeights; ++e) {
      const int q = legacy_nibble(in[b].qs, e) | int((qh >> e) & 1) << 4;
      y[e] = d * float(q - 16);
    }
  }
}

void dequantize_q5_1_ref(std::span<const BlockQ5_1> in, std::span<float> out) {
  check_sizes(in, out, "Q5_1");
  for (size_t b = 0; b < in.size(); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const float m = fp16_to_fp32(in[b].m);
    const uint32_t qh = load_u32_le(in[b].qh);
    float* y = out.data() + b * BlockQ5_1::kWeights;
    for (int e = 0; e < BlockQ5_1::kWeights; ++e) {
      const int q = legacy_nibble(in[b].qs, e) | int((qh >> e) & 1) << 4;
      y[e] = d * float(q) + m;
    }
  }
}

void dequantize_q2_k_ref(std::span<const BlockQ2_K> in, std::span<float> out) {
  check_sizes(in, out, "Q2_K");
  for (size_t b = 0; b < in.size(); ++b) {
    const BlockQ2_K& blk = in[b];
    const float d = fp16_to_fp32(blk.d);
    const float dmin = fp16_to_fp32(blk.dmin);
    float* y = out.data() + b * BlockQ2_K::kWeights;
    for (int s = 0; s < 16; ++s) {
      const float dl = d * float(blk.scales[s] & 15);
      const float ml = dmin * float(blk.scales[s] >> 4);
      for (int e = 16 * s; e < 16 * s + 16; ++e) y[e] = dl * float(crumb(blk.qs, e)) - ml;
    }
  }
}

void dequantize_q3_k_ref(std::span<const BlockQ3_K> in, std::span<float> out) {
  check_sizes(in, out, "Q3_K");
  for (size_t b = 0; b < in.size(); ++b) {
    const BlockQ3_K& blk = in[b];
    const float d = fp16_to_fp32(blk.d);
    float* y = out.data() + b * BlockQ3_K::kWeights;
    for (int s = 0; s < 16; ++s) {
      const float dl = d * float(q3_k_scale(blk.scales, s) - 32);
      for (int e = 16 * s; e < 16 * s + 16; ++e) {
        // A set hmask bit means "no offset"; a clear one subtracts 4, giving q in -4..3.
        const int q = crumb(blk.qs, e) - (plane_bit(blk.hmask, e) ? 0 : 4);
        y[e] = dl * float(q);
      }
    }
  }
}

void dequantize_q4_k_ref(std::span<const BlockQ4_K> in, std::span<float> out) {
  check_sizes(in, out, "Q4_K");
  for (size_t b = 0; b < in.size(); ++b) {
    const BlockQ4_K& blk = in[b];
    const float d = fp16_to_fp32(blk.d);
    const float dmin = fp16_to_fp32(blk.dmin);
    float* y = out.data() + b * BlockQ4_K::kWeights;
    for (int s = 0; s < 8; ++s) {
      const ScaleMin sm = k_scale_min(blk.scales, s);
      const float dl = d * float(sm.scale);
      const float ml = dmin * float(sm.min);
      for (int e = 32 * s; e < 32 * s + 32; ++e) y[e] = dl * float(k_nibble(blk.qs, e)) - ml;
    }
  }
}

void dequantize_q5_k_ref(std::span<const BlockQ5_K> in, std::span<float> out) {
  check_sizes(in, out, "Q5_K");
  for (size_t b = 0; b < in.size(); ++b) {
    const BlockQ5_K& blk = in[b];
    const float d = fp16_to_fp32(blk.d);
    const float dmin = fp16_to_fp32(blk.dmin);
    float* y = out.data() + b * BlockQ5_K::kWeights;
    for (int s = 0; s < 8; ++s) {
      const ScaleMin sm = k_scale_min(blk.scales, s);
      const float dl = d * float(sm.scale);
      const float ml = dmin * float(sm.min);
      for (int e = 32 * s; e < 32 * s + 32; ++e) {
        const int q = k_nibble(blk.qs, e) | plane_bit(blk.qh, e) << 4;
        y[e] = dl * float(q) - ml;
      }
    }
  }
}

void dequantize_q6_k_ref(std::span<const BlockQ6_K> in, std::span<float> out) {
  check_sizes(in, out, "Q6_K");
  for (size_t b = 0; b < in.size(); ++b) {
    const BlockQ6_K& blk = in[b];
    const float d = fp16_to_fp32(blk.d);
    float* y = out.data() + b * BlockQ6_K::kWeights;
    for (int s = 0; s < 16; ++s) {
      const float dl = d * float(blk.scales[s]);
      for (int e = 16 * s; e < 16 * s + 16; ++e) {
        // Low nibbles: each 128-weight half uses 64 bytes, low nibbles for its first 64 weights.
        const int lo = (blk.ql[64 * (e / 128) + e % 64] >> (4 * ((e % 128) / 64))) & 15;
        const int q = lo | crumb(blk.qh, e) << 4;
        y[e] = dl * float(q - 32);
      }
    }
  }
}

namespace {

struct FormatInfo {
  const char* name;
  size_t weights;      // per block
  size_t block_bytes;  // per block
};

// Copies blocks out of `bytes` a few at a time into an aligned buffer (mapped tensor data
// may start at any byte) and decodes them, so no full-size copy of the tensor is made.
template <typename Block, void (*Decode)(std::span<const Block>, std::span<float>)>
void decode_unaligned(std::span<const uint8_t> bytes, std::span<float> out) {
  constexpr size_t kChunk = 16;
  Block buffer[kChunk];
  const size_t n_blocks = bytes.size() / sizeof(Block);
  for (size_t b = 0; b < n_blocks; b += kChunk) {
    const size_t k = std::min(kChunk, n_blocks - b);
    std::memcpy(buffer, bytes.data() + b * sizeof(Block), k * sizeof(Block));
    Decode(std::span<const Block>(buffer, k), out.subspan(b * Block::kWeights, k * Block::kWeights));
  }
}

using DecodeFn = void (*)(std::span<const uint8_t>, std::span<float>);

struct Format {
  FormatInfo info;
  DecodeFn decode;
};

template <typename Block, void (*Decode)(std::span<const Block>, std::span<float>)>
constexpr Format format(const char* name) {
  return {{name, size_t{Block::kWeights}, sizeof(Block)}, &decode_unaligned<Block, Decode>};
}

// nullptr for type ids without a dequantiser here.
const Format* find_format(uint32_t type_id) {
  static constexpr Format kQ4_0 = format<BlockQ4_0, dequantize_q4_0_ref>("Q4_0");
  static constexpr Format kQ4_1 = format<BlockQ4_1, dequantize_q4_1_ref>("Q4_1");
  static constexpr Format kQ5_0 = format<BlockQ5_0, dequantize_q5_0_ref>("Q5_0");
  static constexpr Format kQ5_1 = format<BlockQ5_1, dequantize_q5_1_ref>("Q5_1");
  static constexpr Format kQ8_0 = format<BlockQ8_0, dequantize_q8_0_ref>("Q8_0");
  static constexpr Format kQ2_K = format<BlockQ2_K, dequantize_q2_k_ref>("Q2_K");
  static constexpr Format kQ3_K = format<BlockQ3_K, dequantize_q3_k_ref>("Q3_K");
  static constexpr Format kQ4_K = format<BlockQ4_K, dequantize_q4_k_ref>("Q4_K");
  static constexpr Format kQ5_K = format<BlockQ5_K, dequantize_q5_k_ref>("Q5_K");
  static constexpr Format kQ6_K = format<BlockQ6_K, dequantize_q6_k_ref>("Q6_K");
  switch (type_id) {
    case ggml_type::kQ4_0: return &kQ4_0;
    case ggml_type::kQ4_1: return &kQ4_1;
    case ggml_type::kQ5_0: return &kQ5_0;
    case ggml_type::kQ5_1: return &kQ5_1;
    case ggml_type::kQ8_0: return &kQ8_0;
    case ggml_type::kQ2_K: return &kQ2_K;
    case ggml_type::kQ3_K: return &kQ3_K;
    case ggml_type::kQ4_K: return &kQ4_K;
    case ggml_type::kQ5_K: return &kQ5_K;
    case ggml_type::kQ6_K: return &kQ6_K;
    default: return nullptr;
  }
}

}  // namespace

bool ggml_dequantize_supported(uint32_t ggml_type) { return find_format(ggml_type) != nullptr; }

Status dequantize_ggml_row(uint32_t ggml_type, std::span<const uint8_t> bytes, std::span<float> out) {
  const Format* f = find_format(ggml_type);
  if (f == nullptr) {
    return Status::error("ggml type id " + std::to_string(ggml_type) +
                         " has no dequantiser (supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, "
                         "Q4_K, Q5_K, Q6_K)");
  }
  const FormatInfo& fi = f->info;
  if (out.size() % fi.weights != 0) {
    return Status::error(std::string(fi.name) + ": " + std::to_string(out.size()) +
                         " weights is not a whole number of " + std::to_string(fi.weights) + "-weight blocks");
  }
  const size_t n_blocks = out.size() / fi.weights;
  if (bytes.size() != n_blocks * fi.block_bytes) {
    return Status::error(std::string(fi.name) + ": " + std::to_string(out.size()) + " weights need " +
                         std::to_string(n_blocks) + " blocks of " + std::to_string(fi.block_bytes) +
                         " bytes (" + std::to_string(n_blocks * fi.block_bytes) + "), got " +
                         std::to_string(bytes.size()) + " bytes");
  }
  f->decode(bytes, out);
  return Status::ok();
}

}  // namespace bitsplit::quant
