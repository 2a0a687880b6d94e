// The CUDA draft kernels (gpu/draft_kernels.cuh), run on the CPU under tests/gpu/cuda_emulation.h:
// every kernel against the CPU reference it mirrors, bit for bit where the arithmetic is the
// same; draft_matmul on the 2-, 3- and 4-bit draft cases of the CPU kernels' registry (kernel_cases.h). The whole
// device draft pass under the same emulation: device_draft_pass_emulated_test.cpp.
#include "cuda_emulation.h"  // first: defines the CUDA names the kernels use

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_case_properties.h"

namespace bitsplit {
namespace {

namespace k = gpu::kernels;

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The CUDA draft_matmul kernels on every 2-bit draft case of the CPU kernels' registry
// (kernel_cases.h): the plain kernel (a block per output row, a thread per activation row) and,
// at group 64, draft_matmul_g64 (16-byte loads, dp4a, a warp per output row, rows in passes),
// bit for bit the reference, with and without the case's sign plane (rows padded to whole groups
// as the device holds them). The registry's long rows give batches larger than one g64 pass and
// rows with more groups than a warp has lanes.
class EmulatedDraftMatmul : public ::testing::TestWithParam<cpu::testing::CaseSet> {};

TEST_P(EmulatedDraftMatmul, IsBitExactWithTheCpuReference) {
  for (const cpu::testing::KernelCase& c : GetParam().cases) {
    const cpu::testing::CaseWeights w(c);
    const cpu::testing::CaseViews& v = w.views();
    const int64_t groups = quant::groups_per_row(c.in, c.group);
    const k::PlaneDev d{v.draft.codes, v.draft.scales, v.draft.offsets, c.out, c.in, groups, c.group, c.bits};
    const std::vector<uint8_t> dev_signs = v.has_signs ? k::pad_sign_rows(v.signs, c.group) : std::vector<uint8_t>();
    const bool g64 = c.group == 64 && c.bits == 2;
    if (g64) {
      ASSERT_GT(k::g64_rows_per_pass(groups), 0) << c.name();
    }
    for (int64_t rows : c.rows) {
      const std::vector<float> x = cpu::testing::case_activations(c, rows);
      cpu::QuantizedActivations qa;
      cpu::quantize_activations_ref(x.data(), rows, c.in, c.group, qa);
      for (bool with_signs : v.has_signs ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        const std::string what = c.name() + " rows " + std::to_string(rows) + (with_signs ? " signs" : "");
        const uint8_t* signs = with_signs ? dev_signs.data() : nullptr;
        std::vector<float> want(size_t(rows * c.out)), got(want.size(), NAN);
        cpu::draft_matmul_ref(v.draft, qa, want.data(), with_signs ? &v.signs : nullptr);
        BS_LAUNCH(k::draft_matmul, d.out, k::kMatmulThreads, 0, d.codes, d.scales, d.offsets, d.out, d.groups, d.group,
                  d.bits, qa.q.data(), qa.scale.data(), qa.sum.data(), rows, qa.padded, signs, v.signs.alpha,
                  v.signs.alpha_per_row, got.data());
        for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << what << " at " << i;
        if (!g64) continue;
        got.assign(want.size(), NAN);
        BS_LAUNCH_SHARED(k::draft_matmul_g64, k::blocks_for(c.out, k::kG64Warps), k::kG64Threads,
                         k::g64_shared_bytes(groups), 0, d.codes, d.scales, d.offsets, d.out, d.groups, qa.q.data(),
                         qa.scale.data(), qa.sum.data(), rows, qa.padded, signs, v.signs.alpha,
                         v.signs.alpha_per_row, got.data());
        for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << what << " g64 at " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Draft2, EmulatedDraftMatmul, ::testing::ValuesIn(cpu::testing::tier_case_sets(cpu::testing::draft2)),
                         cpu::testing::set_name);
// 3- and 4-bit planes (mixed-precision drafts): the plain kernel, bit for bit.
INSTANTIATE_TEST_SUITE_P(Draft34, EmulatedDraftMatmul,
                         ::testing::ValuesIn(cpu::testing::tier_case_sets([](const cpu::testing::KernelCase& c) {
                           return c.kernel == cpu::testing::Kernel::kDraft && c.bits != 2;
                         })),
                         cpu::testing::set_name);

TEST(EmulatedKernels, QuantizeRowsIsBitExactWithTheCpuReference) {
  const int64_t rows = 3, in = 200;
  const int group = 64;
  auto x = random_floats(size_t(rows * in), 5, 3.0f);
  for (int64_t i = 64; i < 128; ++i) x[size_t(i)] = 0.0f;  // a group of zeros (scale 0)
  cpu::QuantizedActivations want;
  cpu::quantize_activations_ref(x.data(), rows, in, group, want);
  std::vector<int8_t> q(size_t(rows * want.padded), 99);
  std::vector<float> scale(size_t(rows * want.groups), NAN);
  std::vector<int32_t> sum(size_t(rows * want.groups), -1);
  BS_LAUNCH(k::quantize_rows, k::blocks_for(rows * want.groups, 32), 32, 0, x.data(), rows, in, group, want.groups,
            want.padded, q.data(), scale.data(), sum.data());
  EXPECT_EQ(q, want.q);
  EXPECT_EQ(sum, want.sum);
  for (size_t i = 0; i < scale.size(); ++i) EXPECT_TRUE(same_bits(scale[i], want.scale[i])) << i;
}

TEST(EmulatedKernels, RopeIsBitExactWithTheCpuReference) {
  const int64_t rows = 3, heads = 4, head_dim = 16;
  const std::vector<int32_t> positions = {0, 7, 300};
  const std::vector<float> factors = {1.0f, 1.5f, 2.0f, 4.0f, 1.0f, 1.0f, 8.0f, 1.0f};
  for (bool neox : {false, true}) {
    for (int64_t n_rot : {16, 8}) {
      for (bool with_factors : {false, true}) {
        const float mscale = with_factors ? 1.1832f : 1.0f;  // LongRoPE's attention factor with its factors
        auto x = random_floats(size_t(rows * heads * head_dim), 9);
        auto want = x;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < heads; ++h)
            cpu::rope_f32(want.data() + (r * heads + h) * head_dim, n_rot,
                          neox ? cpu::RopeOrder::kNeox : cpu::RopeOrder::kNormal, float(positions[size_t(r)]), 10000.0f,
                          0.5f, with_factors ? std::span<const float>(factors.data(), size_t(n_rot / 2)) : std::span<const float>(),
                          mscale);
        BS_LAUNCH(k::rope_rows, k::blocks_for(rows * heads * n_rot / 2, 32), 32, 0, x.data(), rows, heads, head_dim,
                  n_rot, neox, positions.data(), 10000.0f, 0.5f, with_factors ? factors.data() : nullptr, mscale);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_bits(x[i], want[i])) << i;
      }
    }
  }
}

TEST(EmulatedKernels, RmsNormMatchesTheCpuReference) {
  const int64_t rows = 4, n = 300;
  const auto x = random_floats(size_t(rows * n), 13, 2.0f);
  const auto w = random_floats(size_t(n), 17);
  std::vector<float> got(x.size(), NAN), want(x.size());
  for (int64_t r = 0; r < rows; ++r) cpu::rms_norm_f32(x.data() + r * n, w.data(), n, 1e-5f, want.data() + r * n);
  BS_LAUNCH_SYNC(k::rms_norm_rows, rows, k::kBlock, 0, x.data(), w.data(), n, 1e-5f, got.data());
  // The sum of squares is in double in another order: equal up to the last bit of the scale.
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-7 * std::fabs(want[i]) + 1e-30) << i;
  auto inplace = x;
  BS_LAUNCH_SYNC(k::rms_norm_rows, rows, k::kBlock, 0, inplace.data(), w.data(), n, 1e-5f, inplace.data());
  EXPECT_EQ(inplace, got);
}

TEST(EmulatedKernels, TopKIsTheLargestFirstWithTiesToTheSmallerId) {
  const int64_t rows = 2, vocab = 1000;
  auto l = random_floats(size_t(rows * vocab), 21);
  l[5] = l[700] = l[999] = 9.0f;  // a three-way tie at the top of row 0
  l[vocab + 3] = -INFINITY;
  const int kk = 6;
  std::vector<int32_t> tok(size_t(rows * kk), -2);
  std::vector<float> lp(size_t(rows * kk), NAN);
  BS_LAUNCH_SYNC(k::top_k_rows, rows, k::kBlock, 0, l.data(), vocab, kk, tok.data(), lp.data());
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) ids[size_t(i)] = i;
    const float* lr = l.data() + r * vocab;
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return lr[a] > lr[b]; });
    std::vector<float> p(lr, lr + vocab);
    cpu::softmax_f32(p.data(), vocab);
    for (int j = 0; j < kk; ++j) {
      EXPECT_EQ(tok[size_t(r * kk + j)], ids[size_t(j)]) << "row " << r << " rank " << j;
      EXPECT_NEAR(lp[size_t(r * kk + j)], std::log(p[size_t(ids[size_t(j)])]), 1e-5) << "row " << r << " rank " << j;
    }
  }
  EXPECT_EQ(std::vector<int32_t>(tok.begin(), tok.begin() + 3), (std::vector<int32_t>{5, 700, 999}));
}

}  // namespace
}  // namespace bitsplit
