// cpu/: CPU compute kernels, each with its scalar *_ref specification beside it: the f32 ops
// of the forward pass (dot products, norms, softmax, RoPE), the bit-split plane kernels (int8
// activations, AVX-512 VNNI / AVX2 / scalar, packed planes), the Q8_0 baseline kernels and the
// oneDNN prefill path, on a CpuContext (ISA tier, hwloc topology, pinned oneTBB arena). Every
// op is batch invariant: a row's result never depends on the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bitsplit/attention_exp.h"
#include "bitsplit/model_shape.h"
#include "bitsplit/plane_view.h"
#include "bitsplit/quant.h"

namespace bitsplit::cpu {

// Dot product with a fixed summation order (8 interleaved partial sums, then a fixed tree),
// so the result is the same wherever and with whatever else it is computed.
float dot_f32(const float* a, const float* b, int64_t n);
// out[t] = dot_f32(rows + t·stride, x, n) for t < count, bit for bit; eight rows at a time on
// the AVX2 tier when n % 8 == 0 (x read once for the eight).
void dot_f32_rows(const float* x, const float* rows, int64_t stride, int64_t n, int64_t count, float* out);

// Y[r, o] = sum_i W[o, i] * X[r, i] (+ bias[o]): X is [rows x in], W is [out x in] row-major,
// Y is [rows x out]. Parallel over output columns with oneTBB; each element is one dot_f32.
void matmul_f32(std::span<const float> x, int64_t rows, int64_t in, std::span<const float> w,
                int64_t out, std::span<const float> bias, std::span<float> y);

// y = x / sqrt(mean(x^2) + eps) * weight, over each row of length n (sum of squares in double).
void rms_norm_f32(const float* x, const float* weight, int64_t n, float eps, float* y);

// In-place softmax over n values (max-subtracted; sum in double).
void softmax_f32(float* x, int64_t n);

// The attention softmax: softmax_f32's steps (max subtracted, sum in double in order, scaled by
// float(1 / sum)) with attention_exp (bitsplit/attention_exp.h) for the exponential.
void softmax_attention_ref(float* x, int64_t n);

// One query row of attention over cache slots j < kv_len: s_j = dot_f32(q, k_j) · scale, soft-
// capped (c · tanh(s / c)) when softcap > 0, -inf where visible[j] == 0; p = softmax_attention_ref(s);
// out[0..head_dim) = Σ_j p_j · v_j over the visible j in slot order, each term one fused
// multiply-add (out = fma(p_j, v_j, out): one rounding, and half the vector operations), with
// k_j = k + j · stride and v_j = v + j · stride. `scores` is kv_len floats of scratch. The
// scalar reference of attention_block.
void attention_row_ref(const float* q, const float* k, const float* v, int64_t stride, int64_t head_dim,
                       int64_t kv_len, const uint8_t* visible, float scale, float softcap, float* scores, float* out);
// attention_row for nq <= kAttentionBlock query rows that share the keys and values (rows of a
// batch, heads of one kv group): q[r], visible[r], scores[r] (kv_len floats each), out[r]. Each
// row's result is attention_row_ref's bit for bit; the block reads every key and value once.
// Runs the best tier of default_isa(); attention_block_avx2 and attention_block_avx512 are the
// tiers (for tests; the AVX-512 one also serves the AMX tier).
inline constexpr int kAttentionBlock = 16;
void attention_block(int nq, const float* const* q, const uint8_t* const* visible, const float* k, const float* v,
                     int64_t stride, int64_t head_dim, int64_t kv_len, float scale, float softcap, float* const* scores,
                     float* const* out);
void attention_block_avx2(int nq, const float* const* q, const uint8_t* const* visible, const float* k, const float* v,
                          int64_t stride, int64_t head_dim, int64_t kv_len, float scale, float softcap,
                          float* const* scores, float* const* out);
void attention_block_avx512(int nq, const float* const* q, const uint8_t* const* visible, const float* k,
                            const float* v, int64_t stride, int64_t head_dim, int64_t kv_len, float scale,
                            float softcap, float* const* scores, float* const* out);

// SiLU by silu_exp (bitsplit/attention_exp.h): the same bits in the scalar reference, the
// vector kernel and the device draft, unlike libm's expf.
inline float silu(float x) { return silu_exp(x); }
// g[i] = silu(g[i]) · u[i] for i < n, bit for bit as the scalar loop (silu_mul_ref); eight at a
// time on the AVX2 tier and above (silu_mul_avx2, for tests).
void silu_mul(float* g, const float* u, int64_t n);
void silu_mul_ref(float* g, const float* u, int64_t n);
void silu_mul_avx2(float* g, const float* u, int64_t n);
// GELU with the tanh approximation (PyTorch's approximate="tanh", gemma's GeGLU).
inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + __builtin_tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}
// c · tanh(x / c): gemma2's soft cap of attention scores and logits.
inline float softcap(float x, float c) { return c * __builtin_tanhf(x / c); }

// (The order is the model shape's, engine/core's model_shape.h, which the device draft shares.)
using RopeOrder = ::bitsplit::RopeOrder;

// Rotates the first n_rot dims of one head vector of length head_dim at position `pos`.
// theta_i = pos · freq_scale · base^(-2i/n_rot) / freq_factor[i] (freq_factors may be empty);
// cos and sin are multiplied by mscale (LongRoPE's attention factor; 1 for every other model).
void rope_f32(float* head, int64_t n_rot, RopeOrder order, float pos, float base, float freq_scale,
              std::span<const float> freq_factors, float mscale = 1.0f);

// rope_f32 in two steps, for the heads of one position: the cos and sin of every pair, computed
// once (the same expressions, so the same values), then applied to each head. rope_f32(head, ...)
// equals rope_table(...) followed by rope_apply(head, ...) bit for bit. cs: n_rot floats (cos of
// pair i at 2i, sin at 2i + 1).
void rope_table(int64_t n_rot, float pos, float base, float freq_scale, std::span<const float> freq_factors,
                float mscale, float* cs);
void rope_apply(float* head, int64_t n_rot, RopeOrder order, const float* cs);

}  // namespace bitsplit::cpu

// ==== bit-split plane kernels =====================================================================
// Y[n x out] = plane[out x in] . X[n x in]^T for the packed planes of quant/ ("Bit-split planes" in
// docs/FORMAT.md). The arithmetic is defined exactly in docs/FORMAT.md, "Kernel arithmetic":
// activations are quantised to int8 per (row, group); each (output, group) dot product is an exact
// int32; groups are accumulated in increasing order with one fmaf per group. Every ISA tier and the
// *_ref functions produce bitwise identical results, and a row's result never depends on n or on
// its position in the batch (speculative verification relies on it).
namespace bitsplit::cpu {

// The plane views (DraftPlaneView, ResidualPlaneView, SignPlaneView, QuantizedRowsView) are
// engine/core/include/bitsplit/plane_view.h's, shared with the GPU kernels.
using bitsplit::DraftPlaneView;
using bitsplit::QuantizedRowsView;
using bitsplit::ResidualPlaneView;
using bitsplit::SignPlaneView;

// For models held in f32 (not a plane kernel; no activation quantisation): for each row r and
// output o, y[r * out + o] = fmaf(alpha_o, t, y[r * out + o]) with t = sum_i s_oi x_ri summed in
// f32 in dot_f32's order (8 interleaved partial sums, lane i % 8, then the same fixed tree).
// x is [rows x in]. Parallel over outputs; every element is independent of the batch.
void sign_matmul_add_f32(const SignPlaneView& s, const float* x, int64_t rows, float* y);

// Activations quantised per (row, group) to int8: x ~ scale * q. Owns its buffers; reuse one
// object across calls to avoid allocations.
struct QuantizedActivations {
  int64_t rows = 0, in = 0, padded = 0, groups = 0;
  int group = 0;
  std::vector<int8_t> q;       // rows x padded; padding (i >= in) is 0
  std::vector<float> scale;    // rows x groups: s_x = amax / 127, or 0
  std::vector<int32_t> sum;    // rows x groups: sum of q over the group (exact)
  void resize(int64_t rows, int64_t in, int group);
  const int8_t* row_q(int64_t r) const { return q.data() + r * padded; }
  QuantizedRowsView view() const { return {q.data(), scale.data(), sum.data(), rows, padded, groups}; }
};

// The specification (scalar, single thread). x is [rows x in]; y is [rows x out] and fully written.
void quantize_activations_ref(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa);
void residual_matmul_ref(const ResidualPlaneView& r, const QuantizedActivations& qa, float* y);
// With `delta`, the variant's draft (D + alpha ⊙ S) . X: the sign dot products are fused into the
// same pass over the planes ("Kernel arithmetic", step 5); nullptr gives exactly the plain draft.
void draft_matmul_ref(const DraftPlaneView& d, const QuantizedActivations& qa, float* y,
                      const SignPlaneView* delta = nullptr);

// kAmx is kAvx512 with the packed-plane products of 32+ activation rows on AMX tiles (TDPBSSD):
// same results bit for bit, 1.4-1.9x the AVX-512 tier's rate at 256 rows (prompts).
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };
// Every tier, lowest first (a tier's index is its value).
inline constexpr Isa kIsaTiers[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx};
const char* isa_name(Isa isa);
// From cpuid; kAmx also needs the kernel's permission for the tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM, asked once per process; Linux 5.16+).
bool isa_supported(Isa isa);
// The tier used by default: the best the CPU supports, unless BITSPLIT_ISA=scalar|avx2|avx512|amx
// asks for a lower one. Read once per process (the only process-wide choice in this module).
Isa default_isa();

// What hwloc found (one NUMA node and one package on a plain desktop).
struct CpuTopology {
  int packages = 0, numa_nodes = 0, physical_cores = 0, logical_cpus = 0;
};

// Execution context for the plane kernels: the ISA tier, the hwloc topology and a oneTBB arena with
// one worker per physical core, each worker pinned to its core. Pass it to every call; it holds
// no per-call state, but only one thread should drive a context at a time.
class CpuContext {
 public:
  struct Options {
    int threads = 0;  // 0: one per physical core
    bool pin = true;  // bind arena workers to cores with hwloc
    std::optional<Isa> isa;  // unset: default_isa(); an unsupported tier aborts via CHECK
  };
  explicit CpuContext(const Options& options);
  CpuContext();
  ~CpuContext();
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  Isa isa() const;
  int threads() const;
  const CpuTopology& topology() const;
  std::string describe() const;  // multi-line, for `bitsplit info --topology`

  // Calls body(begin, end) once per worker on contiguous slices of [0, items) whose bounds are
  // multiples of `align` (static partition: worker w always gets the same slice). Under a
  // tbb::global_control limit below threads() the same slices run on the threads it allows.
  void run_slices(int64_t items, int64_t align, const std::function<void(int64_t, int64_t)>& body);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Page-aligned memory for planes: transparent huge pages requested (MADV_HUGEPAGE) and, on a
// machine with several NUMA nodes, pages interleaved across the nodes the arena runs on.
class PlaneBuffer {
 public:
  PlaneBuffer() = default;
  // whole_huge_pages: the size is rounded up to 2 MiB (the tail's huge page is touched, so it
  // costs memory). false: rounded to 4 KiB only, huge pages requested for the 2 MiB-aligned
  // interior — for the many small buffers of a model's packed planes.
  PlaneBuffer(CpuContext& ctx, size_t bytes, bool whole_huge_pages = true);
  ~PlaneBuffer();
  PlaneBuffer(PlaneBuffer&& o) noexcept;
  PlaneBuffer& operator=(PlaneBuffer&& o) noexcept;
  PlaneBuffer(const PlaneBuffer&) = delete;
  PlaneBuffer& operator=(const PlaneBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0, mapped_ = 0;
};

// Dispatching, threaded entry points (static partition of output rows over the arena).
void quantize_activations(CpuContext& ctx, const float* x, int64_t rows, int64_t in, int group,
                          QuantizedActivations& qa);
// Step 1 of "Kernel arithmetic" with the remainder (step 1b): qa gets 2·rows rows, step 1 of x in
// rows [0, rows) and step 1 of the remainders e_i = x_i − s_x,k·q_i in rows [rows, 2·rows), so a
// plane's product with both halves summed, y[n] + y[rows + n], sees the activations to ~15 bits.
void quantize_activations_with_remainder(CpuContext& ctx, const float* x, int64_t rows, int64_t in, int group,
                                         QuantizedActivations& qa);
void residual_matmul(CpuContext& ctx, const ResidualPlaneView& r, const QuantizedActivations& qa, float* y);
void draft_matmul(CpuContext& ctx, const DraftPlaneView& d, const QuantizedActivations& qa, float* y,
                  const SignPlaneView* delta = nullptr);
// The target model's linear layer: y = draft_matmul(D, X, delta) + residual_matmul(R, X), summed
// in that order in f32. `scratch` holds the residual product (resized as needed).
void target_matmul(CpuContext& ctx, const DraftPlaneView& d, const ResidualPlaneView& r,
                   const QuantizedActivations& qa, float* y, std::vector<float>& scratch,
                   const SignPlaneView* delta = nullptr);
// Step 5 of "Kernel arithmetic" on its own, for a draft computed elsewhere (the GPU tier): y must
// hold exactly draft_matmul(D, X) and becomes draft_matmul(D, X, &s), bit for bit. Scalar, threaded
// over outputs; the group is qa.group (the draft plane's).
void sign_delta_accumulate(CpuContext& ctx, const SignPlaneView& s, const QuantizedActivations& qa, float* y);

// A plane repacked once (at model load) into the SIMD kernels' layout, so a call does no transposes,
// shuffles or scale gathers: only whole-vector loads, shifts and masks. Same values, same
// arithmetic, same results bit for bit as the file-layout view it was built from.
// Layout: tiles of 16 output rows (the last one padded with zero rows), each one contiguous stream:
//   for every group k: a code block of 16 * g * bits / 8 bytes, in 64-byte vectors whose byte
//     4l + b belongs to row l of the tile, weight 4c + b of the group ("chunk" c);
//       8 bits: vector c holds chunk c;
//       2 bits: vector j holds chunks j + t * g/16 at bits 2t (t = 0..3);
//       6 bits: g/8 nibble vectors (vector j: chunk j low nibble, chunk j + g/8 high nibble) of
//               the low 4 bits, then g/16 vectors of the top 2 bits arranged as for 2 bits;
//       4 bits (draft; a 3-bit draft is stored this way too): the g/8 nibble vectors alone;
//   then the 16 fp16 scales of every group (k-major), then (draft) the 16 fp16 offsets of every
//   group; the tile is padded to a multiple of 64 bytes.
// An AVX2 tier reads each 64-byte vector as two halves of 8 rows.
// The geometry and the repack are quant::PackedShape / quant::pack_tiles (converted files of
// format version 3 store the residual in this layout, and a loaded plane then borrows the bytes
// of the memory map instead of holding a copy).
struct PackedPlane : quant::PackedShape {  // the geometry (out, in, groups, tiles, tile_bytes, ...)

  // Shapes the layout covers: g = 32, 64, 128; residual 8 or 6 bits; draft 2, 3 or 4 bits.
  static bool supported(int group, int bits, bool draft) { return quant::packed_layout_supported(group, bits, draft); }
  // Repacked from the file layout into a PlaneBuffer.
  static PackedPlane pack(CpuContext& ctx, const ResidualPlaneView& r);
  static PackedPlane pack(CpuContext& ctx, const DraftPlaneView& d);
  // Bytes already in the layout (shape.bytes() of them), used where they are: `owner` keeps
  // them alive (a file's memory map). They must be 64-byte aligned (aligned_for_borrowing).
  static PackedPlane borrow(const quant::PackedShape& shape, const uint8_t* bytes, std::shared_ptr<const void> owner);
  static bool aligned_for_borrowing(const uint8_t* bytes) { return reinterpret_cast<uintptr_t>(bytes) % 64 == 0; }
  // Bytes already in the layout, copied into a PlaneBuffer (for bytes that cannot be borrowed).
  static PackedPlane copy(CpuContext& ctx, const quant::PackedShape& shape, const uint8_t* bytes);

  const quant::PackedShape& shape() const { return *this; }
  const uint8_t* data() const { return data_; }
  size_t size_bytes() const { return size_t(bytes()); }
  bool borrowed() const { return owner_ != nullptr; }
  const uint8_t* tile(int64_t t) const { return data_ + t * tile_bytes; }
  // The codes of (row o, group k) in natural order, and its fp16 scale / offset (for the scalar
  // tier and tests; the SIMD tiers read the layout directly).
  void unpack_group(int64_t o, int64_t k, uint8_t* codes) const;
  uint16_t scale(int64_t o, int64_t k) const;
  uint16_t offset(int64_t o, int64_t k) const;

 private:
  static PackedPlane with_shape(const quant::PackedShape& shape);
  PlaneBuffer buffer_;                  // owned bytes (pack, copy)
  std::shared_ptr<const void> owner_;   // borrowed bytes' keeper (borrow)
  const uint8_t* data_ = nullptr;
};
// The same products as the view overloads above, from packed planes (bit for bit).
void residual_matmul(CpuContext& ctx, const PackedPlane& r, const QuantizedActivations& qa, float* y);
void draft_matmul(CpuContext& ctx, const PackedPlane& d, const QuantizedActivations& qa, float* y,
                  const SignPlaneView* delta = nullptr);

}  // namespace bitsplit::cpu
// ==== end of bit-split plane kernels =============================================================

// ==== Q8_0 baseline kernels =======================================================================
// llama.cpp-style Q8_0 x Q8_0 matmul, so a Q8_0 model runs as fast as the baseline users compare
// speculative decoding against (instead of being dequantised to f32 at load). Arithmetic:
// docs/FORMAT.md, "Q8_0 baseline kernel arithmetic". Same rules as the plane kernels: every ISA
// tier equals the *_ref functions bit for bit, and a row's result never depends on the batch.
namespace bitsplit::cpu {

// `out` ggml Q8_0 rows of `in` weights (in % 32 == 0): row o is in / 32 blocks of 34 bytes
// (quant::BlockQ8_0: fp16 d, 32 int8) starting at blocks + o * (in / 32) * 34. Any alignment.
struct Q8_0PlaneView {
  const uint8_t* blocks;
  int64_t out, in;
};

// Activations quantised per (row, block of 32) to int8: x ~ d * q. Reuse one object across calls.
struct Q8_0Activations {
  int64_t rows = 0, in = 0, blocks = 0;
  std::vector<int8_t> q;     // rows x in
  std::vector<float> d;      // rows x blocks: amax / 127, or 0
  std::vector<int32_t> sum;  // rows x blocks: sum of q (exact); the SIMD tiers' weight offset needs it
  void resize(int64_t rows, int64_t in);  // aborts unless in % 32 == 0
};

// The specification (scalar, single thread). x is [rows x in]; y is [rows x w.out], fully written.
void quantize_activations_q8_0_ref(const float* x, int64_t rows, int64_t in, Q8_0Activations& qa);
void q8_0_matmul_ref(const Q8_0PlaneView& w, const Q8_0Activations& qa, float* y);
// Dispatching on ctx.isa(); the matmul is split over output rows like residual_matmul.
void quantize_activations_q8_0(CpuContext& ctx, const float* x, int64_t rows, int64_t in, Q8_0Activations& qa);
void q8_0_matmul(CpuContext& ctx, const Q8_0PlaneView& w, const Q8_0Activations& qa, float* y);

}  // namespace bitsplit::cpu
// ==== end of Q8_0 baseline kernels ===============================================================

// ==== prompt prefill through oneDNN ===============================================================
// Many rows at once (a prompt): the planes are dequantised to f32 in tiles of output rows and
// multiplied with oneDNN's sgemm on f32 activations — no int8 activation rounding, so this is
// *not* the kernels' arithmetic. Rows go through sgemm in fixed blocks of kPrefillBlockRows (the
// last padded with zeros), so a row's result does not depend on the batch it came in. The
// engine does not use it: on AVX-512 VNNI the int8 kernels are faster at every batch size
// (docs/PERFORMANCE.md, "Prompt prefill"); it is kept, tested, for CPUs where that may differ.
namespace bitsplit::cpu {

inline constexpr int64_t kPrefillBlockRows = 64;

// Whether this build has oneDNN (the prefill path needs it).
bool prefill_available();

// y[rows x d.out] = (D + R + α⊙S) · x^T with x [rows x d.in] in f32. r and delta may be null
// (D alone / no variant). Returns false (and leaves y untouched) without oneDNN.
bool prefill_matmul(CpuContext& ctx, const DraftPlaneView& d, const ResidualPlaneView* r, const SignPlaneView* delta,
                    const float* x, int64_t rows, float* y);

}  // namespace bitsplit::cpu
// ==== end of prompt prefill ======================================================================
