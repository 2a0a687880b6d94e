// quant/: packed weight formats and their scalar reference encoders/decoders (the specification),
// and the fits that make them. No I/O, and no threads but the error-feedback fit's
// (split_matrix_gptq). Every packed block is a struct with a static_assert'ed size; docs/FORMAT.md
// repeats the byte layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit::quant {

// IEEE binary16 <-> binary32, round-to-nearest-even, with subnormals, inf and NaN.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
// bfloat16 is the top half of a binary32; conversion to bf16 rounds to nearest even
// and keeps NaN a (quiet) NaN.
inline float bf16_to_fp32(uint16_t h) {
  uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);

// llama.cpp's Q8_0: 32 weights as int8 with one fp16 scale; w = d * q.
// Layout (34 bytes): [0..1] d (fp16, little-endian), [2..33] q[32] (int8).
struct BlockQ8_0 {
  static constexpr int kWeights = 32;
  uint16_t d;
  int8_t q[kWeights];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

// Quantizes n weights (n % 32 == 0) exactly as llama.cpp's reference quantize_row_q8_0:
// d = amax / 127, q = round(x / d) (round half away from zero).
void quantize_q8_0_ref(std::span<const float> x, std::span<BlockQ8_0> out);
void dequantize_q8_0_ref(std::span<const BlockQ8_0> in, std::span<float> out);

// ---- ggml source formats (dequantised as convert sources) ----
// llama.cpp's block formats as they appear in GGUF files people download. bitsplit only
// decodes them (to f32, then re-encodes into its own formats), so only the dequantisers
// exist here. Bit-exact with gguf-py's `gguf.quants.dequantize` (tests/data/ggml_quant).
// Every field is a byte array or a little-endian fp16, so the natural layout has no padding.
// "Element e" is the weight's index inside the block; docs/FORMAT.md repeats the layouts.

// Q4_0: w = d * (q - 8), q in 0..15.
// [0..1] d fp16 | [2..17] qs[16]: element e < 16 is qs[e] & 15, e >= 16 is qs[e - 16] >> 4.
struct BlockQ4_0 {
  static constexpr int kWeights = 32;
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");

// Q4_1: w = d * q + m, q in 0..15.
// [0..1] d fp16 | [2..3] m fp16 | [4..19] qs[16] (nibbles as in Q4_0).
struct BlockQ4_1 {
  static constexpr int kWeights = 32;
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must be 20 bytes");

// Q5_0: w = d * (q - 16), q in 0..31: low 4 bits as Q4_0, bit 4 of element e is bit e of
// the little-endian u32 qh (kept as bytes so the struct stays 2-byte aligned and unpadded).
// [0..1] d fp16 | [2..5] qh[4] | [6..21] qs[16].
struct BlockQ5_0 {
  static constexpr int kWeights = 32;
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes");

// Q5_1: w = d * q + m, q in 0..31 (bits as Q5_0).
// [0..1] d fp16 | [2..3] m fp16 | [4..7] qh[4] | [8..23] qs[16].
struct BlockQ5_1 {
  static constexpr int kWeights = 32;
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block must be 24 bytes");

// The k-quants: 256 weights per super-block, split into sub-blocks of 16 or 32 weights
// whose integer scales are themselves scaled by fp16 super-block factors.
inline constexpr int kGgmlSuperBlock = 256;

// Q2_K: 16 sub-blocks of 16. w = (d * (scales[s] & 15)) * q - (dmin * (scales[s] >> 4)),
// s = e / 16, q in 0..3 = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3.
// [0..15] scales[16] | [16..79] qs[64] | [80..81] d fp16 | [82..83] dmin fp16.
struct BlockQ2_K {
  static constexpr int kWeights = kGgmlSuperBlock;
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block must be 84 bytes");

// Q3_K: 16 sub-blocks of 16. w = (d * (sc[s] - 32)) * (lo - (hi ? 0 : 4)), s = e / 16,
// lo = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3, hi = bit e / 32 of
// hmask[e % 32]. The 6-bit sc[s]: low 4 bits are scales[s] & 15 for s < 8 and
// scales[s - 8] >> 4 for s >= 8; high 2 bits are (scales[8 + s % 4] >> (2 * (s / 4))) & 3.
// [0..31] hmask[32] | [32..95] qs[64] | [96..107] scales[12] | [108..109] d fp16.
struct BlockQ3_K {
  static constexpr int kWeights = kGgmlSuperBlock;
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block must be 110 bytes");

// Q4_K: 8 sub-blocks of 32. w = (d * sc[s]) * q - (dmin * mn[s]), s = e / 32,
// q = (qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15. The 6-bit sc/mn pairs
// are packed in scales[12] (shared with Q5_K): for s < 4, sc = scales[s] & 63 and
// mn = scales[s + 4] & 63; for s >= 4, sc = (scales[s + 4] & 15) | ((scales[s - 4] >> 6) << 4)
// and mn = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4).
// [0..1] d fp16 | [2..3] dmin fp16 | [4..15] scales[12] | [16..143] qs[128].
struct BlockQ4_K {
  static constexpr int kWeights = kGgmlSuperBlock;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes");

// Q5_K: Q4_K plus a fifth bit: q |= (bit e / 32 of qh[e % 32]) << 4, q in 0..31.
// [0..1] d fp16 | [2..3] dmin fp16 | [4..15] scales[12] | [16..47] qh[32] | [48..175] qs[128].
struct BlockQ5_K {
  static constexpr int kWeights = kGgmlSuperBlock;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes");

// Q6_K: 16 sub-blocks of 16 with int8 scales. w = (d * scales[s]) * (q - 32), s = e / 16,
// q = lo | (hi << 4) with c = e / 128, lo = (ql[64 * c + e % 64] >> (4 * ((e % 128) / 64))) & 15,
// hi = (qh[32 * c + e % 32] >> (2 * ((e % 128) / 32))) & 3.
// [0..127] ql[128] | [128..191] qh[64] | [192..207] scales[16] (int8) | [208..209] d fp16.
struct BlockQ6_K {
  static constexpr int kWeights = kGgmlSuperBlock;
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");

// Each decodes in.size() blocks into out (out.size() == in.size() * kWeights). Every product
// above is exact in f32 (an fp16 scale has <= 11 significant bits, a sub-scale <= 7, a code
// <= 5), so only the final "- ml" / "+ m" rounds: the result does not depend on grouping or
// fused multiply-add, and matches gguf-py (numpy) and ggml bit for bit.
void dequantize_q4_0_ref(std::span<const BlockQ4_0> in, std::span<float> out);
void dequantize_q4_1_ref(std::span<const BlockQ4_1> in, std::span<float> out);
void dequantize_q5_0_ref(std::span<const BlockQ5_0> in, std::span<float> out);
void dequantize_q5_1_ref(std::span<const BlockQ5_1> in, std::span<float> out);
void dequantize_q2_k_ref(std::span<const BlockQ2_K> in, std::span<float> out);
void dequantize_q3_k_ref(std::span<const BlockQ3_K> in, std::span<float> out);
void dequantize_q4_k_ref(std::span<const BlockQ4_K> in, std::span<float> out);
void dequantize_q5_k_ref(std::span<const BlockQ5_K> in, std::span<float> out);
void dequantize_q6_k_ref(std::span<const BlockQ6_K> in, std::span<float> out);

// ggml type ids (as stored in GGUF tensor infos) of the block formats above; quant/ does
// not depend on gguf.h, so the few it decodes are named here.
namespace ggml_type {
inline constexpr uint32_t kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8;
inline constexpr uint32_t kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14;
}  // namespace ggml_type

// True for the ggml type ids dequantize_ggml_row decodes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
bool ggml_dequantize_supported(uint32_t ggml_type);
// Decodes whole blocks of `ggml_type` from raw file bytes into out. `bytes` may have any
// alignment (a tensor inside an mmap); it must hold exactly out.size() / block weights
// blocks. Errors: unsupported type, out.size() not a multiple of the block, size mismatch.
Status dequantize_ggml_row(uint32_t ggml_type, std::span<const uint8_t> bytes, std::span<float> out);
// ---- end of ggml source formats ----


// ---- bit-split planes (docs/FORMAT.md, "Bit-split planes") ----
//
// A weight row of `in` values is cut into groups of `group` consecutive weights (the last
// group zero-padded). Each group has
//   draft plane D:    b-bit unsigned codes q (b = 2 by default; 3 and 4 also fit), an fp16
//                     scale s and an fp16 offset m:  d_i = m + s * q_i
//   residual plane R: codes of r_i = w_i - d_i, symmetric, with an fp16 scale t:
//                     r_i ~ t * (u_i - 2^(B-1)), B = 8 or 6 bits.
// Codes of B bits are stored as bit planes of 4, 2 and 1 bits (8 = [8], 6 = [4][2],
// 4 = [4], 3 = [2][1], 2 = [2]), lowest bits first. In a plane of k bits a group takes
// group*k/8 bytes; byte j holds the weights j + t*(group*k/8), t = 0 .. 8/k-1, at bit t*k,
// so one shift and one mask unpack a vector of consecutive weights.

inline constexpr int kMaxGroup = 256;

// Weights per row after padding the last group.
inline int64_t padded_width(int64_t in, int group) { return (in + group - 1) / group * group; }
inline int64_t groups_per_row(int64_t in, int group) { return (in + group - 1) / group; }
// Code bytes per row for B-bit codes (B in {2, 3, 4, 6, 8}).
inline int64_t code_row_bytes(int64_t in, int group, int bits) { return padded_width(in, group) * bits / 8; }
bool valid_code_bits(int bits);

// Packs/unpacks the B-bit codes of one group (values < 2^B) into group*B/8 bytes.
void pack_group_codes(const uint8_t* codes, int group, int bits, uint8_t* out);
void unpack_group_codes(const uint8_t* packed, int group, int bits, uint8_t* codes);

// ---- the packed (tile) layout ----
//
// The CPU kernels' layout of a plane (cpu.h, PackedPlane, has the byte-level description): tiles
// of 16 output rows, each one contiguous stream of the groups' code blocks, then the 16 fp16
// scales of every group, then (draft) the 16 fp16 offsets; a tile is padded to 64 bytes, the
// last tile's missing rows are zero. Converted files of format version 3 store the residual this
// way, so the kernels read it straight from the memory map (docs/FORMAT.md).
struct PackedShape {
  static constexpr int kTileRows = 16;
  int64_t out = 0, in = 0, groups = 0, tiles = 0, tile_bytes = 0;
  int group = 0, bits = 0;
  bool draft = false;
  // Bits per code in the layout: a 3-bit draft takes 4 (nibbles unpack with one shift and mask).
  int stored_bits() const { return bits == 3 ? 4 : bits; }
  int64_t code_block_bytes() const { return 2 * int64_t(group) * stored_bits(); }  // 16 rows x g x bits / 8
  uint64_t bytes() const { return uint64_t(tiles) * uint64_t(tile_bytes); }
};
// Shapes the layout covers: g = 32, 64, 128; residual 8 or 6 bits; draft 2, 3 or 4 bits.
bool packed_layout_supported(int group, int bits, bool draft);
// The layout's geometry for a plane (CHECKs that it is supported).
PackedShape packed_shape(int64_t out, int64_t in, int group, int bits, bool draft);
// Writes tiles [t0, t1) of the layout of a file-layout plane (codes: `out` rows of code_row_bytes;
// scales and offsets: out x groups fp16, offsets null for a residual) into dst, the layout's
// first byte (dst + t * tile_bytes is tile t; every byte of those tiles is written).
void pack_tiles(const PackedShape& shape, const uint8_t* codes, const uint16_t* scales, const uint16_t* offsets,
                uint8_t* dst, int64_t t0, int64_t t1);
// The inverse, code by code (scalar): the codes of row l (0 .. 15) of `tile`, group k, in natural
// order (g codes, padding included) ...
void unpack_tile_group(const PackedShape& shape, const uint8_t* tile, int l, int64_t k, uint8_t* codes);
// ... and a whole plane back in the file layout (offsets null for a residual).
void unpack_tiles(const PackedShape& shape, const uint8_t* src, uint8_t* codes, uint16_t* scales, uint16_t* offsets);

// How the draft plane's scale and offset are chosen per group.
enum class DraftFit {
  kMinMax,     // plain: offset = min, scale = (max - min) / (2^b - 1)
  kOptimized,  // searched clipping + weighted least-squares refinement (the default)
};

struct SplitParams {
  int group = 64;
  int draft_bits = 2;
  int residual_bits = 8;  // 8 or 6; 0 = draft plane only
  DraftFit fit = DraftFit::kOptimized;
  int search_steps = 6;   // clipping candidates per side (search_steps^2 fits per group)
  int refine_iters = 3;   // least-squares refit / reassign rounds for the best candidate
  // The error-feedback fit's damping of H, as a fraction of its mean diagonal (split_matrix_gptq;
  // raised tenfold while the factorisation fails). 0.1 since 2026-12-07 (docs/QUALITY.md); 0.01 before.
  double feedback_damping = 0.1;
};

// One row's planes: codes are packed as above, scales/offsets are fp16 bit patterns with
// one entry per group.
struct DraftRow {
  uint8_t* codes;
  uint16_t* scales;
  uint16_t* offsets;
};
struct ResidualRow {
  uint8_t* codes;
  uint16_t* scales;
};

// Quantises one row into D (and R when residual_bits != 0). `importance` (per input column,
// may be null) weights the squared error. When residual_bits is 6 the draft fit minimises
// the error of D+R (so the residual stays small enough for 6 bits); otherwise it minimises
// the error of D alone (the draft's quality; 8-bit residuals have ample range).
void split_row_ref(const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d,
                   ResidualRow r);
// The same fit compiled for wider vectors: every tier gives split_row_ref's bits (the fit is
// written once, lane by lane, with a fixed order for every sum). The default tier is the best the
// CPU has, or a lower one asked for with BITSPLIT_ISA=scalar|avx2 (as for the plane kernels).
enum class FitTier { kReference, kAvx2, kAvx512 };
const char* fit_tier_name(FitTier tier);
bool fit_tier_supported(FitTier tier);
FitTier default_fit_tier();
// An unsupported tier is a programming error (CHECK).
void split_row(FitTier tier, const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d,
               ResidualRow r);
inline void split_row(const float* w, const float* importance, int64_t in, const SplitParams& p, DraftRow d,
                      ResidualRow r) {
  split_row(default_fit_tier(), w, importance, in, p, d, r);
}
// The residual plane alone for a draft fitted elsewhere (error feedback, split_matrix_gptq):
// r = w - draft (draft = the row's decoded D values, `in` floats), coded per group exactly as
// split_row codes its own residual (same scale search, same bits on every tier).
void fit_residual_row(FitTier tier, const float* w, const float* draft, const float* importance, int64_t in,
                      const SplitParams& p, ResidualRow r);
// d_i for the row (padding dropped).
void dequantize_draft_row_ref(const uint8_t* codes, const uint16_t* scales, const uint16_t* offsets, int64_t in,
                              int group, int bits, float* out);
// r_i for the row (padding dropped).
void dequantize_residual_row_ref(const uint8_t* codes, const uint16_t* scales, int64_t in, int group, int bits,
                                 float* out);

// ---- the draft fitted with error feedback (GPTQ, quant/gptq.cpp) ----
//
// A whole matrix's planes in the file layout: `rows` code rows of code_row_bytes each, and
// rows x groups_per_row fp16 scales (and draft offsets), row-major.
struct SplitPlanes {
  uint8_t* draft_codes;
  uint16_t* draft_scales;
  uint16_t* draft_offsets;
  uint8_t* resid_codes;  // unused when residual_bits is 0
  uint16_t* resid_scales;
};
// Fits W [rows x cols] into `out` with the draft's codes chosen by error feedback against
// `covariance`, the [cols x cols] second moments E[x x^T] of the matrix's input: they minimise
// the draft's output error on such inputs rather than its weight error; the residual is fitted to
// W - D with feedback too. Column weights of each group's grid: `importance`, or the covariance's
// diagonal when null. Rows run in parallel (oneTBB; the result does not depend on the schedule).
// Errors: a covariance that stays singular under damping.
//
// With `block` > 0 (a whole number of groups, less than cols), `covariance` holds only H's
// diagonal blocks of `block` columns (the last one narrower), each [n x n], one after another
// (covariance_floats values): errors are pushed only within a block. The cost of the factors
// falls from cols^3 to cols * block^2 and the matrices' from cols^2 to cols * block floats, which
// is what makes a wide input (an FFN's down projection) affordable layer by layer.
Status split_matrix_gptq(const float* w, int64_t rows, int64_t cols, const SplitParams& params,
                         const float* importance, const float* covariance, SplitPlanes out, int64_t block = 0);
// Makes BLAS single-threaded for the rest of the process (OpenBLAS, found at run time; other
// builds are left as they are): callers run BLAS from oneTBB tasks, which own the parallelism.
void blas_single_threaded();
// The diagonal blocks of a covariance of `cols` columns kept in blocks of `block` (0, or at
// least cols: one block, the whole matrix): columns [c0, c0 + n), stored as n x n floats from
// `offset` on. Every reader and writer of such a covariance walks these.
struct DiagonalBlock {
  int64_t c0 = 0, n = 0, offset = 0;
};
std::vector<DiagonalBlock> diagonal_blocks(int64_t cols, int64_t block);
// Floats of such a covariance (the blocks' n² summed).
int64_t covariance_floats(int64_t cols, int64_t block);
// Whether a conversion given covariances feeds errors back for these params: with an 8-bit
// residual or none. A fed-back draft leaves a wider residual than 6 bits cover well
// (SmolLM2-135M: D + R6 KL 0.0021 with the ordinary D + R6 fit, 0.0058 with feedback on both
// planes), so a 6-bit residual keeps the ordinary fit, whose draft is chosen for D + R6.
bool uses_error_feedback(const SplitParams& params);

// ---- draft precision under a budget (docs/FORMAT.md, "Mixed-precision drafts") ----
//
// `convert --draft-bpw B` gives each split projection its own draft bits (2, 3 or 4) so that
// the draft's VRAM bits per weight (codes + fp16 scale and offset per group, padding counted,
// over every split projection) stay within B, spending the bits where they cut the most
// error. A tensor's error at b bits is its relative draft error
//   E(b) = sum_ij imp_j (w_ij - d_ij)^2 / sum_ij imp_j w_ij^2
// (imp = importance-matrix column weights, or 1), measured on a sample of its rows, times a
// class weight: how much KL a unit of relative error in that kind of tensor costs. Measured
// on SmolLM2-135M by putting one class at 2 bits and the rest at 4 (docs/QUALITY.md): per
// tensor, attn_v and ffn_down cost ~3.5x attn_q/k/output, ffn_gate/up ~1.25x, and the output
// head ~2.5x a whole class of layer tensors, i.e. 2.5 x n_layers one layer tensor; the first
// block's tensors count twice.
inline constexpr int kMinDraftBits = 2, kMaxDraftBits = 4;

struct DraftTensorErrors {
  std::string name;  // the projection's base name ("blk.3.attn_v", "output")
  int64_t rows = 0, cols = 0;
  double error[kMaxDraftBits - kMinDraftBits + 1] = {};  // E(b) for b = 2, 3, 4, class weight included
};

// The draft bits of every projection and what they add up to.
struct DraftAllocation {
  std::map<std::string, int> bits;  // base name -> 2, 3 or 4
  double bits_per_weight = 0.0;     // VRAM bits per weight over the projections
  double weighted_error = 0.0;      // sum of E(b) at the chosen bits
};

// Class weight of a projection by base name in a model of n_layers blocks (see above).
double draft_class_weight(const std::string& base, int64_t n_layers);
// VRAM bytes of a [rows x cols] draft plane at `bits`.
int64_t draft_plane_bytes(int64_t rows, int64_t cols, int group, int bits);
// One row's share of E(b): adds sum_j imp_j (w_j - d_j)^2 at b = 2, 3, 4 to err[0..2] and
// sum_j imp_j w_j^2 to *signal (imp = importance, or 1 when null). engine/backend/ split_projection's
// neighbour measure_draft_errors runs it over a sample of rows in parallel.
void draft_row_errors(const float* w, const float* importance, int64_t in, const SplitParams& p,
                      double err[kMaxDraftBits - kMinDraftBits + 1], double* signal);
// Greedy allocation: starts every tensor at 2 bits and repeatedly upgrades the one whose next
// bit buys the largest error drop per byte, while the total stays within budget_bpw. Errors: a
// budget below the all-2-bit size (the message states that size). A budget at or above the
// all-4-bit size gives every tensor 4 bits.
Result<DraftAllocation> allocate_draft_bits(const std::vector<DraftTensorErrors>& tensors, int group,
                                            double budget_bpw);

// Baseline: plain asymmetric min/max quantisation at `bits` with fp16 scale and offset
// per group, returned dequantised (what "plain 2-bit / 4-bit" means in bitsplit eval).
void minmax_roundtrip_row_ref(const float* w, int64_t in, int group, int bits, float* out);

// ---- BitDelta sign planes (docs/FORMAT.md, "BitDelta files") ----
//
// A fine-tune is stored as its difference from a base, one bit per weight: for a matrix
// [out x in], Δ = W_ft - W_base is approximated by Δ̂ = α · (1 - 2·bit), where bit = 1 marks a
// negative Δ (Δ = 0 counts as positive). Sign bits are packed row-major, ceil(in/8) bytes per
// row: bit j (LSB = 0) of byte k of a row is the sign of element 8k + j; the unused high bits
// of a row's last byte are 0. α is f32, one per output row or one for the whole matrix,
// initialised to the mean |Δ| over the row (matrix), the L2-optimal scale for fixed signs.

enum class DeltaAlpha { kRow, kMatrix };

inline int64_t delta_sign_row_bytes(int64_t in) { return (in + 7) / 8; }

// Packs the signs of delta [out x in] into signs (out * delta_sign_row_bytes(in) bytes) and
// writes α (out values for kRow, 1 for kMatrix). Sums run in double, so α does not depend on
// the order of rows.
void bitdelta_encode_ref(const float* delta, int64_t out, int64_t in, DeltaAlpha mode, uint8_t* signs, float* alpha);
// Δ̂ for one row: out[i] = alpha * (1 - 2 * bit_i).
void bitdelta_decode_row_ref(const uint8_t* signs, float alpha, int64_t in, float* out);
// ---- end of BitDelta ----

}  // namespace bitsplit::quant
