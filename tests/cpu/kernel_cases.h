// Test-only: the CPU kernel cases, each defined once (kernel, shape, batch sizes, seed), the
// builder of a case's random planes and activations, and the one function that runs a case on
// the *_ref specification or on a CpuContext's ISA tier, file layout or packed. The kernel tests
// drive their properties from these lists (kernel_case_properties.h), as ggml's test-backend-ops
// does; bench/ takes its shapes and planes from here too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "guarded_bytes.h"

namespace bitsplit::cpu::testing {

enum class Kernel { kDraft, kResidual, kQ8_0 };
// kFitted: quant's own quantisers on Gaussian weights (split_row_ref, quantize_q8_0_ref).
// kRandom: every byte and scale random, so every code value, the extremes included, meets every
// activation sign.
enum class Codes { kFitted, kRandom };
// A BitDelta sign plane fused into a draft kernel: none, α per output row, or one α.
enum class Signs { kNone, kAlphaPerRow, kOneAlpha };

struct KernelCase {
  Kernel kernel = Kernel::kDraft;
  int bits = 2;  // draft 2, 3, 4; residual 8, 6; Q8_0 8
  Codes codes = Codes::kRandom;
  Signs signs = Signs::kNone;
  int64_t out = 1, in = 32;
  int group = 64;                   // Q8_0: 32, its block
  std::vector<int64_t> rows = {1};  // the batch sizes a property runs
  // Sign rows are ceil(in / 8) + sign_stride_extra bytes apart; the extra bytes and the bits
  // past `in` hold random garbage, which the kernels must ignore.
  int sign_stride_extra = 0;
  uint32_t seed = 1;

  bool packable() const;       // PackedPlane covers the plane
  std::string kind() const;    // "draft2_random_signs_row", "residual6_fitted", "q8_0_random"
  std::string family() const;  // kind and group: "draft2_random_g64" ("q8_0_random")
  std::string name() const;    // family and shape: "draft2_random_g64_o17_i111"
};

// Cases of one family, one GoogleTest parameter: ctest runs every test in its own process, and
// the ~1,300 shapes below as that many processes would dwarf the kernels' own time. Every
// failure names its case.
struct CaseSet {
  std::string name;
  std::vector<KernelCase> cases;
};

using CaseFilter = bool (*)(const KernelCase&);
bool plain_plane(const KernelCase& c);  // draft or residual, no signs
bool sign_plane(const KernelCase& c);   // draft with signs
bool q8_0(const KernelCase& c);
bool draft2(const KernelCase& c);       // 2-bit draft, with or without signs (the CUDA kernels)

// The registry (kernel_cases.cpp says why each list holds what it holds).
std::vector<CaseSet> tier_case_sets(CaseFilter keep);  // each tier bitwise equal to *_ref
std::vector<KernelCase> batch_cases(CaseFilter keep);  // n = 1..32, every row at any position
std::vector<KernelCase> thread_cases(CaseFilter keep); // 1 thread vs several

// Model-sized projections for bench/ (never run by the tests): a 7-8B model's attention and FFN
// matrices, a small model's, and Qwen2.5-1.5B's FFN (gate/up 8960 x 1536, down 1536 x 8960).
// bench_case() is a random-code case of one at group 64.
struct Shape {
  int64_t out, in;
};
inline constexpr Shape kModelShapes[] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {256, 256}, {256, 688}, {8960, 1536}, {1536, 8960}};
KernelCase bench_case(Kernel kernel, int bits, Signs signs, Shape shape);

// Views of one copy of a case's weights.
struct CaseViews {
  DraftPlaneView draft{};
  ResidualPlaneView residual{};
  Q8_0PlaneView q8_0{};
  SignPlaneView signs{};
  bool has_signs = false;
  const SignPlaneView* delta() const { return has_signs ? &signs : nullptr; }
};

// A case's weights built from its seed: the plane its kernel reads (draft, residual or Q8_0),
// and the sign plane, in one block that ends at an inaccessible page (the sign plane last: a
// kernel reading past its last row faults). views_of() gives the views into a copy of bytes().
class CaseWeights {
 public:
  explicit CaseWeights(const KernelCase& c);
  const KernelCase& spec() const { return c_; }
  const CaseViews& views() const { return views_; }
  CaseViews views_of(const uint8_t* copy) const;
  const uint8_t* bytes() const { return block_.data(); }
  size_t size() const { return block_.size(); }
  size_t plane_bytes() const;  // what the kernel reads of the plane: codes, scales (and offsets)
  size_t sign_bytes() const;   // of the sign plane: sign rows and α
  // The plane in PackedPlane's layout, packed on ctx's workers (nullopt where it does not apply).
  std::optional<PackedPlane> pack(CpuContext& ctx, const uint8_t* copy = nullptr) const;

  // The arrays, for tests that read or set single values.
  uint8_t* codes() const { return at<uint8_t>(codes_); }
  uint16_t* scales() const { return at<uint16_t>(scales_); }
  uint16_t* offsets() const { return at<uint16_t>(offsets_); }
  quant::BlockQ8_0* blocks() const { return at<quant::BlockQ8_0>(codes_); }
  float* alpha() const { return at<float>(alpha_); }
  std::vector<float> dequantized_row(int64_t o) const;  // the plane's row o, signs left out
  float sign(int64_t o, int64_t i) const;               // -1 or 1, also past `in`
  float alpha_of(int64_t o) const;
  void clear_sign_padding();  // zero the bits past `in` and the extra bytes
  int64_t sign_row_bytes() const { return views_.signs.row_bytes; }

 private:
  template <typename T>
  T* at(size_t offset) const { return reinterpret_cast<T*>(block_.data() + offset); }
  void fill_fitted();
  void fill_random();

  KernelCase c_;
  bitsplit::testing::GuardedBytes block_;
  size_t codes_ = 0, scales_ = 0, offsets_ = 0, alpha_ = 0, signs_ = 0;
  CaseViews views_;
};

// rows x in standard normal values, an outlier (x 20) every 37th, as real activations have, so
// group scales differ widely.
std::vector<float> random_activations(int64_t rows, int64_t in, uint32_t seed);
// A case's activations for a batch of `rows`: random_activations with values the quantiser must
// round by its definition: row 0 starts with exact halves after scaling (amax 127), its second
// group is zero; row 1 starts with a tiny value; row 2's first group is all below the
// quantiser's threshold (quantised to zero).
std::vector<float> case_activations(const KernelCase& c, int64_t rows);

// Activations quantised for a case's kernel (the plane kernels' format or Q8_0's).
struct CaseActivations {
  QuantizedActivations plane;
  Q8_0Activations q8_0;
};
// "" when both hold the same bits, else the first difference (for an assertion's message).
std::string activations_difference(const CaseActivations& want, const CaseActivations& got);
// x [rows x in] quantised for w's kernel by the *_ref quantiser (ctx null) or by ctx's tier,
// into buffers poisoned first.
void quantize_case(const CaseWeights& w, CpuContext* ctx, const float* x, int64_t rows, CaseActivations& a);
// w's product with a by the *_ref function (ctx null) or by ctx's tier, on the file-layout
// views or on `packed`, returned in an output poisoned with NaN before the call.
std::vector<float> multiply_case(const CaseWeights& w, CpuContext* ctx, const PackedPlane* packed,
                                 const CaseActivations& a);
// The same into y as it is (bench/'s timed loop), on views v of the case's weights (of a copy of
// CaseWeights::bytes(), or with the signs left out).
void multiply_case(const KernelCase& c, const CaseViews& v, CpuContext* ctx, const PackedPlane* packed,
                   const CaseActivations& a, float* y);
// Running a case: both of the above, the activations quantised by the same tier.
std::vector<float> run_case(const CaseWeights& w, CpuContext* ctx, const PackedPlane* packed, const float* x,
                            int64_t rows);

}  // namespace bitsplit::cpu::testing
