// Test-only: building a kernel case's weights and activations, and running the case on the
// *_ref functions or a context's ISA tier (kernel_cases.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include "kernel_cases.h"

namespace bitsplit::cpu::testing {
namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

CaseWeights::CaseWeights(const KernelCase& c) : c_(c) {
  const bool draft = c.kernel == Kernel::kDraft, q8 = c.kernel == Kernel::kQ8_0;
  BITSPLIT_CHECK(!q8 || c.in % 32 == 0, "a Q8_0 case needs whole blocks");
  BITSPLIT_CHECK(draft || c.signs == Signs::kNone, "signs go with a draft plane");
  const int64_t groups = quant::groups_per_row(c.in, c.group);
  const size_t code_bytes = q8 ? size_t(c.out * c.in / 32) * sizeof(quant::BlockQ8_0)
                               : size_t(c.out * quant::code_row_bytes(c.in, c.group, c.bits));
  const size_t scale_bytes = q8 ? 0 : size_t(c.out * groups) * sizeof(uint16_t);
  const int64_t row_bytes = (c.in + 7) / 8 + c.sign_stride_extra;
  const size_t sign_bytes = c.signs == Signs::kNone ? 0 : size_t(c.out * row_bytes);
  const size_t alpha_count = c.signs == Signs::kAlphaPerRow ? size_t(c.out) : 1;
  // 64-byte aligned arrays from the block's start; the sign rows end the block, at the guard page.
  scales_ = round_up(code_bytes, 64);
  offsets_ = round_up(scales_ + scale_bytes, 64);
  alpha_ = round_up(offsets_ + (draft ? scale_bytes : 0), 64);
  const size_t n = round_up(alpha_ + (sign_bytes ? alpha_count * sizeof(float) : 0) + sign_bytes, 64);
  signs_ = n - sign_bytes;
  block_ = bitsplit::testing::GuardedBytes(n);
  std::memset(block_.data(), 0, signs_);
  views_ = views_of(block_.data());
  if (c.codes == Codes::kFitted) fill_fitted();
  else fill_random();
  if (sign_bytes) {  // garbage in the padding bits and extra bytes included
    std::mt19937 rng(c.seed ^ 0x5157u);
    for (size_t i = 0; i < sign_bytes; ++i) block_.data()[signs_ + i] = uint8_t(rng());
    std::uniform_real_distribution<float> u(0.0f, 0.05f);
    for (size_t i = 0; i < alpha_count; ++i) alpha()[i] = u(rng);
  }
}

CaseViews CaseWeights::views_of(const uint8_t* copy) const {
  const auto* scales = reinterpret_cast<const uint16_t*>(copy + scales_);
  const auto* offsets = reinterpret_cast<const uint16_t*>(copy + offsets_);
  CaseViews v;
  v.draft = {copy, scales, offsets, c_.out, c_.in, c_.group, c_.bits};
  v.residual = {copy, scales, c_.out, c_.in, c_.group, c_.bits};
  v.q8_0 = {copy, c_.out, c_.in};
  v.has_signs = c_.signs != Signs::kNone;
  v.signs = {copy + signs_, reinterpret_cast<const float*>(copy + alpha_), c_.out, c_.in,
             (c_.in + 7) / 8 + c_.sign_stride_extra, c_.signs == Signs::kAlphaPerRow};
  return v;
}

void CaseWeights::fill_random() {
  std::mt19937 rng(c_.seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const size_t code_bytes = scales_;  // codes, then padding up to the scales: random as well
  for (size_t i = 0; i < code_bytes; ++i) codes()[i] = uint8_t(rng());
  if (c_.kernel == Kernel::kQ8_0) {
    for (int64_t b = 0; b < c_.out * c_.in / 32; ++b) blocks()[b].d = quant::fp32_to_fp16(2.0f * u(rng));
    return;
  }
  const int64_t n = c_.out * quant::groups_per_row(c_.in, c_.group);
  for (int64_t i = 0; i < n; ++i) {
    if (c_.kernel == Kernel::kResidual) {
      scales()[i] = quant::fp32_to_fp16(0.001f * (0.1f + std::fabs(u(rng))));
    } else {
      scales()[i] = quant::fp32_to_fp16(0.01f + std::fabs(u(rng)));
      offsets()[i] = quant::fp32_to_fp16(u(rng));
    }
  }
}

// Gaussian weights through quant's quantisers; the kernels do not care how the codes were chosen,
// so the draft fit is plain min/max.
void CaseWeights::fill_fitted() {
  std::mt19937 rng(c_.seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(size_t(c_.kernel == Kernel::kQ8_0 ? c_.out * c_.in : c_.in));
  if (c_.kernel == Kernel::kQ8_0) {
    for (auto& v : w) v = nd(rng);
    quant::quantize_q8_0_ref(w, std::span(blocks(), size_t(c_.out * c_.in / 32)));
    return;
  }
  const bool draft = c_.kernel == Kernel::kDraft;
  quant::SplitParams p;
  p.group = c_.group;
  p.draft_bits = draft ? c_.bits : 2;
  p.residual_bits = draft ? 8 : c_.bits;
  p.fit = quant::DraftFit::kMinMax;
  const int64_t g = quant::groups_per_row(c_.in, c_.group);
  // The other plane of the split is thrown away.
  std::vector<uint8_t> other_codes(size_t(quant::code_row_bytes(c_.in, c_.group, draft ? 8 : 2)));
  std::vector<uint16_t> other_scales(static_cast<size_t>(g)), other_offsets(other_scales.size());
  for (int64_t o = 0; o < c_.out; ++o) {
    for (auto& v : w) v = nd(rng);
    uint8_t* codes = this->codes() + o * quant::code_row_bytes(c_.in, c_.group, c_.bits);
    if (draft)
      quant::split_row_ref(w.data(), nullptr, c_.in, p, {codes, scales() + o * g, offsets() + o * g},
                           {other_codes.data(), other_scales.data()});
    else
      quant::split_row_ref(w.data(), nullptr, c_.in, p, {other_codes.data(), other_scales.data(), other_offsets.data()},
                           {codes, scales() + o * g});
  }
}

size_t CaseWeights::plane_bytes() const {
  if (c_.kernel == Kernel::kQ8_0) return size_t(c_.out * c_.in / 32) * sizeof(quant::BlockQ8_0);
  const size_t scales = size_t(c_.out * quant::groups_per_row(c_.in, c_.group)) * sizeof(uint16_t);
  return size_t(c_.out * quant::code_row_bytes(c_.in, c_.group, c_.bits)) + scales * (c_.kernel == Kernel::kDraft ? 2 : 1);
}

size_t CaseWeights::sign_bytes() const {
  if (c_.signs == Signs::kNone) return 0;
  return block_.size() - signs_ + (c_.signs == Signs::kAlphaPerRow ? size_t(c_.out) : 1) * sizeof(float);
}

std::optional<PackedPlane> CaseWeights::pack(CpuContext& ctx, const uint8_t* copy) const {
  if (!c_.packable()) return std::nullopt;
  const CaseViews v = copy ? views_of(copy) : views_;
  return c_.kernel == Kernel::kDraft ? PackedPlane::pack(ctx, v.draft) : PackedPlane::pack(ctx, v.residual);
}

std::vector<float> CaseWeights::dequantized_row(int64_t o) const {
  std::vector<float> w(size_t(c_.in));
  if (c_.kernel == Kernel::kQ8_0) {
    quant::dequantize_q8_0_ref(std::span<const quant::BlockQ8_0>(blocks() + o * c_.in / 32, size_t(c_.in / 32)), w);
    return w;
  }
  const int64_t g = quant::groups_per_row(c_.in, c_.group);
  const uint8_t* codes = this->codes() + o * quant::code_row_bytes(c_.in, c_.group, c_.bits);
  if (c_.kernel == Kernel::kDraft)
    quant::dequantize_draft_row_ref(codes, scales() + o * g, offsets() + o * g, c_.in, c_.group, c_.bits, w.data());
  else
    quant::dequantize_residual_row_ref(codes, scales() + o * g, c_.in, c_.group, c_.bits, w.data());
  return w;
}

float CaseWeights::sign(int64_t o, int64_t i) const {
  return (block_.data()[signs_ + size_t(o * sign_row_bytes() + i / 8)] >> (i % 8)) & 1 ? -1.0f : 1.0f;
}

float CaseWeights::alpha_of(int64_t o) const { return alpha()[c_.signs == Signs::kAlphaPerRow ? o : 0]; }

void CaseWeights::clear_sign_padding() {
  for (int64_t o = 0; o < c_.out; ++o)
    for (int64_t i = c_.in; i < sign_row_bytes() * 8; ++i)
      block_.data()[signs_ + size_t(o * sign_row_bytes() + i / 8)] &= uint8_t(~(1u << (i % 8)));
}

std::vector<float> random_activations(int64_t rows, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * in));
  for (auto& v : x) v = nd(rng);
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 20.0f;
  return x;
}

std::vector<float> case_activations(const KernelCase& c, int64_t rows) {
  auto x = random_activations(rows, c.in, c.seed * 31u + uint32_t(rows));
  const float halves[] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 3.5f, -126.5f, 0.0f};
  for (int64_t i = 0; i < std::min<int64_t>(c.in, 8); ++i) x[size_t(i)] = halves[i];
  if (c.in > c.group) std::fill(x.begin() + c.group, x.begin() + std::min<int64_t>(c.in, 2 * c.group), 0.0f);
  if (rows > 1) x[size_t(c.in)] = 1e-38f;
  if (rows > 2) std::fill_n(x.begin() + 2 * c.in, std::min<int64_t>(c.in, c.group), 1e-38f);
  return x;
}

namespace {

template <typename T>
std::string show(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", double(v));
    return buf;
  } else {
    return std::to_string(int64_t(v));
  }
}

template <typename T>
std::string array_difference(const char* what, const std::vector<T>& want, const std::vector<T>& got) {
  if (want.size() != got.size()) return std::string(what) + ": sizes differ";
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0)
      return std::string(what) + " differs at " + std::to_string(i) + ": " + show(want[i]) + " vs " + show(got[i]);
  return "";
}

}  // namespace

std::string activations_difference(const CaseActivations& want, const CaseActivations& got) {
  for (const std::string& d :
       {array_difference("q", want.plane.q, got.plane.q), array_difference("sum", want.plane.sum, got.plane.sum),
        array_difference("scale", want.plane.scale, got.plane.scale), array_difference("q", want.q8_0.q, got.q8_0.q),
        array_difference("sum", want.q8_0.sum, got.q8_0.sum), array_difference("d", want.q8_0.d, got.q8_0.d)})
    if (!d.empty()) return d;
  return "";
}

void quantize_case(const CaseWeights& w, CpuContext* ctx, const float* x, int64_t rows, CaseActivations& a) {
  const KernelCase& c = w.spec();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  if (c.kernel == Kernel::kQ8_0) {
    a.q8_0.q.assign(size_t(rows * c.in), int8_t(0x55));
    a.q8_0.d.assign(size_t(rows * c.in / 32), kNaN);
    a.q8_0.sum.assign(a.q8_0.d.size(), 0x55555555);
    if (ctx) quantize_activations_q8_0(*ctx, x, rows, c.in, a.q8_0);
    else quantize_activations_q8_0_ref(x, rows, c.in, a.q8_0);
    return;
  }
  const int64_t groups = quant::groups_per_row(c.in, c.group);
  a.plane.q.assign(size_t(rows * groups * c.group), int8_t(0x55));
  a.plane.scale.assign(size_t(rows * groups), kNaN);
  a.plane.sum.assign(a.plane.scale.size(), 0x55555555);
  if (ctx) quantize_activations(*ctx, x, rows, c.in, c.group, a.plane);
  else quantize_activations_ref(x, rows, c.in, c.group, a.plane);
}

void multiply_case(const KernelCase& c, const CaseViews& v, CpuContext* ctx, const PackedPlane* packed,
                   const CaseActivations& a, float* y) {
  BITSPLIT_CHECK(ctx || !packed, "the packed layout runs on a tier");
  switch (c.kernel) {
    case Kernel::kQ8_0:
      if (ctx) q8_0_matmul(*ctx, v.q8_0, a.q8_0, y);
      else q8_0_matmul_ref(v.q8_0, a.q8_0, y);
      return;
    case Kernel::kResidual:
      if (!ctx) residual_matmul_ref(v.residual, a.plane, y);
      else if (packed) residual_matmul(*ctx, *packed, a.plane, y);
      else residual_matmul(*ctx, v.residual, a.plane, y);
      return;
    case Kernel::kDraft:
      if (!ctx) draft_matmul_ref(v.draft, a.plane, y, v.delta());
      else if (packed) draft_matmul(*ctx, *packed, a.plane, y, v.delta());
      else draft_matmul(*ctx, v.draft, a.plane, y, v.delta());
      return;
  }
}

std::vector<float> multiply_case(const CaseWeights& w, CpuContext* ctx, const PackedPlane* packed,
                                 const CaseActivations& a) {
  const int64_t rows = w.spec().kernel == Kernel::kQ8_0 ? a.q8_0.rows : a.plane.rows;
  std::vector<float> y(size_t(rows * w.spec().out), std::numeric_limits<float>::quiet_NaN());
  multiply_case(w.spec(), w.views(), ctx, packed, a, y.data());
  return y;
}

std::vector<float> run_case(const CaseWeights& w, CpuContext* ctx, const PackedPlane* packed, const float* x,
                            int64_t rows) {
  CaseActivations a;
  quantize_case(w, ctx, x, rows, a);
  return multiply_case(w, ctx, packed, a);
}

}  // namespace bitsplit::cpu::testing
