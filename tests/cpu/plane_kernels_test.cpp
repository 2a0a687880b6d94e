// Bit-split plane kernels: every ISA tier the CPU has bitwise equal to the scalar reference, batch
// and thread invariance (driven by the registry of kernel_cases.h), and the cases a registry does
// not hold: the quantiser's definition, the packed layout's values, the target layer, the reference
// against a double-precision dequantised matmul within a bound derived from the int8 activation
// rounding, the forced tier and the context (its topology, and no memory kept by its calls).
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "cpu_testing.h"
#include "kernel_case_properties.h"

namespace bitsplit::cpu {
namespace {

using namespace testing;  // bitsplit::cpu::testing
using ::testing::ValuesIn;

INSTANTIATE_TEST_SUITE_P(Planes, KernelTiers, ValuesIn(tier_case_sets(plain_plane)), set_name);
INSTANTIATE_TEST_SUITE_P(Planes, KernelBatchInvariance, ValuesIn(batch_cases(plain_plane)), case_name);
INSTANTIATE_TEST_SUITE_P(Planes, KernelThreadInvariance, ValuesIn(thread_cases(plain_plane)), case_name);

TEST(CpuKernels, ReportsTiers) {
  for (Isa isa : supported_tiers()) std::printf("tier available: %s\n", isa_name(isa));
  std::printf("default tier: %s\n", isa_name(default_isa()));
  EXPECT_TRUE(isa_supported(default_isa()));
}

TEST(CpuKernels, QuantizerFollowsTheDefinition) {
  // amax = 127 gives 127/amax = 1: halves round away from zero, and s_x = 1.
  const float x[8] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 2.4999998f, -126.5f, 0.0f};
  QuantizedActivations qa;
  quantize_activations_ref(x, 1, 8, 32, qa);
  const int8_t want[8] = {127, 1, -1, 2, -3, 2, -127, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(qa.q[size_t(i)], want[i]) << i;
  EXPECT_EQ(qa.scale[0], 1.0f);
  EXPECT_EQ(qa.sum[0], 127 + 1 - 1 + 2 - 3 + 2 - 127);
  for (int i = 8; i < 32; ++i) EXPECT_EQ(qa.q[size_t(i)], 0);  // padding
  const float zeros[4] = {0, 0, 0, 0};
  quantize_activations_ref(zeros, 1, 4, 32, qa);
  EXPECT_EQ(qa.scale[0], 0.0f);
  EXPECT_EQ(qa.sum[0], 0);
}

// Packing moves bits only: every code, scale and offset reads back as in the file layout, for
// tails in both directions (out not a multiple of 16, in not a multiple of the group).
TEST(CpuKernels, PackedPlaneHoldsTheFileLayoutValues) {
  for (int group : {32, 64, 128}) {
    for (int bits : {8, 6, 4, 3, 2}) {
      const bool draft = bits <= 4;
      const KernelCase c{.kernel = draft ? Kernel::kDraft : Kernel::kResidual, .bits = bits, .out = 37,
                         .in = 3 * group - 5, .group = group, .seed = uint32_t(group * 3 + bits)};
      const CaseWeights w(c);
      const PackedPlane p = *w.pack(tier_context(Isa::kScalar));
      EXPECT_EQ(p.tiles, 3);
      EXPECT_EQ(p.tile_bytes % 64, 0);
      const int64_t groups = quant::groups_per_row(c.in, group), row_bytes = quant::code_row_bytes(c.in, group, bits);
      uint8_t want[quant::kMaxGroup], got[quant::kMaxGroup];
      for (int64_t o = 0; o < c.out; ++o) {
        for (int64_t k = 0; k < groups; ++k) {
          quant::unpack_group_codes(w.codes() + o * row_bytes + k * group * bits / 8, group, bits, want);
          p.unpack_group(o, k, got);
          ASSERT_EQ(std::memcmp(want, got, size_t(group)), 0) << c.name() << " o " << o;
          EXPECT_EQ(p.scale(o, k), w.scales()[o * groups + k]);
          if (draft) {
            EXPECT_EQ(p.offset(o, k), w.offsets()[o * groups + k]);
          }
        }
      }
    }
  }
  EXPECT_TRUE(PackedPlane::supported(64, 3, true));
  EXPECT_FALSE(PackedPlane::supported(64, 6, true));
  EXPECT_FALSE(PackedPlane::supported(64, 4, false));
  EXPECT_FALSE(PackedPlane::supported(48, 8, false));
}

TEST(CpuKernels, TargetIsDraftPlusResidual) {
  const KernelCase dc{.kernel = Kernel::kDraft, .codes = Codes::kFitted, .out = 19, .in = 200, .seed = 11};
  KernelCase rc = dc;
  rc.kernel = Kernel::kResidual;
  rc.bits = 6;
  const CaseWeights d(dc), r(rc);
  const int64_t rows = 5;
  const auto x = random_activations(rows, dc.in, 4);
  CpuContext ctx;
  CaseActivations a;
  quantize_case(d, &ctx, x.data(), rows, a);
  const std::vector<float> yd = multiply_case(d, nullptr, nullptr, a), yr = multiply_case(r, nullptr, nullptr, a);
  std::vector<float> y = poisoned(yd.size()), scratch;
  target_matmul(ctx, d.views().draft, r.views().residual, a.plane, y.data(), scratch);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], yd[i] + yr[i]) << i;
}

// Step 1b: rows [0, n) are step 1 of x, rows [n, 2n) step 1 of e_i = x_i - s_x q_i (one rounded
// product, one rounded difference), bit for bit on every tier.
TEST(CpuKernels, RemainderFollowsTheDefinition) {
  const int64_t rows = 3;
  for (int group : {32, 64}) {
    for (int64_t in : {7, 200}) {
      const auto x = random_activations(rows, in, uint32_t(in + group));
      QuantizedActivations first, rest;
      quantize_activations_ref(x.data(), rows, in, group, first);
      std::vector<float> e(x.size());
      for (int64_t n = 0; n < rows; ++n)
        for (int64_t i = 0; i < in; ++i) {
          const float s = first.scale[size_t(n * first.groups + i / group)];
          const float p = s * float(first.row_q(n)[i]);
          e[size_t(n * in + i)] = x[size_t(n * in + i)] - p;
        }
      quantize_activations_ref(e.data(), rows, in, group, rest);
      for (Isa isa : supported_tiers()) {
        QuantizedActivations qa;
        quantize_activations_with_remainder(tier_context(isa), x.data(), rows, in, group, qa);
        ASSERT_EQ(qa.rows, 2 * rows);
        for (int64_t n = 0; n < 2 * rows; ++n) {
          const QuantizedActivations& want = n < rows ? first : rest;
          const int64_t r = n % rows;
          for (int64_t i = 0; i < qa.padded; ++i) ASSERT_EQ(qa.row_q(n)[i], want.row_q(r)[i]) << isa_name(isa) << " row " << n;
          for (int64_t k = 0; k < qa.groups; ++k) {
            ASSERT_EQ(qa.scale[size_t(n * qa.groups + k)], want.scale[size_t(r * qa.groups + k)]);
            ASSERT_EQ(qa.sum[size_t(n * qa.groups + k)], want.sum[size_t(r * qa.groups + k)]);
          }
        }
      }
      // The remainder is what step 1 left, |e_i| <= s_x/2 + 2^-21 |x_i| (docs/FORMAT.md), with
      // |x_i| <= amax = 127 s_x: its amax (127 times its scale) is within that.
      for (int64_t n = 0; n < rows; ++n)
        for (int64_t k = 0; k < rest.groups; ++k) {
          const float s_x = first.scale[size_t(n * first.groups + k)];
          EXPECT_LE(rest.scale[size_t(n * rest.groups + k)] * 127.0f, s_x * 0.5f + std::ldexp(127.0f * s_x, -21));
        }
    }
  }
}

// A plane times both halves of step 1b, summed, is ~100x closer to the exact product than step 1
// alone (the int8 remainder cuts the activation error by up to 254x).
TEST(CpuKernels, RemainderCutsTheActivationError) {
  for (auto [kernel, bits] : {std::pair{Kernel::kResidual, 8}, {Kernel::kDraft, 2}}) {
    const KernelCase c{.kernel = kernel, .bits = bits, .codes = Codes::kFitted, .out = 17, .in = 512, .seed = 5};
    const CaseWeights w(c);
    const int64_t rows = 4;
    const auto x = random_activations(rows, c.in, 9);
    CaseActivations one, two;
    quantize_case(w, nullptr, x.data(), rows, one);
    quantize_activations_with_remainder(tier_context(Isa::kScalar), x.data(), rows, c.in, c.group, two.plane);
    const std::vector<float> y1 = multiply_case(w, nullptr, nullptr, one), y2 = multiply_case(w, nullptr, nullptr, two);
    double err1 = 0, err2 = 0;
    for (int64_t o = 0; o < c.out; ++o) {
      const std::vector<float> wo = w.dequantized_row(o);
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0;
        for (int64_t i = 0; i < c.in; ++i) exact += double(wo[size_t(i)]) * double(x[size_t(r * c.in + i)]);
        err1 += std::fabs(y1[size_t(r * c.out + o)] - exact);
        err2 += std::fabs(double(y2[size_t(r * c.out + o)]) + double(y2[size_t((rows + r) * c.out + o)]) - exact);
      }
    }
    EXPECT_GT(err1, 0.0) << c.name();
    EXPECT_LT(err2, err1 / 100) << c.name() << ": one pass " << err1 << ", with the remainder " << err2;
  }
}

// The reference against sum_i w_i x_i in double, w the dequantised plane, x the f32 activations.
// Bound per output (docs/FORMAT.md, "Kernel arithmetic"):
//  * activation rounding: |x_i - s_x q_i| <= s_x / 2 + 2^-21 |x_i| (q rounds x * f32(127/amax) to
//    the nearest integer; the three f32 roundings in s_x * f32(x * inv) are below 2^-21 relative),
//    so the integer path differs from the exact product by <= sum_i |w_i| (s_x/2 + 2^-21 |x_i|);
//  * float steps: each group adds one f32 product and one fma rounding (two more for the draft),
//    each <= 2^-24 relative to a partial sum bounded by sum_k |term_k|: (G + 2) 2^-23 sum_k |term_k|.
TEST(CpuKernels, ReferenceIsCloseToDoublePrecisionMatmul) {
  for (int group : {32, 64, 128}) {
    for (int64_t in : {7, 111, 1023}) {
      for (auto [kernel, bits] : {std::pair{Kernel::kResidual, 8}, {Kernel::kResidual, 6}, {Kernel::kDraft, 2}}) {
        const KernelCase c{.kernel = kernel, .bits = bits, .codes = Codes::kFitted, .out = 17, .in = in,
                           .group = group, .seed = uint32_t(in + bits)};
        const CaseWeights w(c);
        const int64_t rows = 5;
        const auto x = random_activations(rows, in, 21);
        CaseActivations a;
        quantize_case(w, nullptr, x.data(), rows, a);
        const std::vector<float> y = multiply_case(w, nullptr, nullptr, a);
        const QuantizedActivations& qa = a.plane;
        for (int64_t o = 0; o < c.out; ++o) {
          const std::vector<float> wo = w.dequantized_row(o);
          for (int64_t r = 0; r < rows; ++r) {
            const ProductTerms t = product_terms(wo.data(), x.data() + r * in, qa.row_q(r),
                                                 qa.scale.data() + r * qa.groups, in, group);
            const double tol = t.act + std::ldexp(double(qa.groups + 2), -23) * t.terms * 1.01;
            EXPECT_LE(std::fabs(y[size_t(r * c.out + o)] - t.exact), tol) << c.name() << " o " << o;
          }
        }
      }
    }
  }
}

// BITSPLIT_ISA is read once per process, so it is checked in a child process (cpu_describe.cpp,
// which prints the context's description as `bitsplit info --topology` does).
TEST(CpuKernels, EnvironmentForcesTier) {
  for (Isa isa : supported_tiers()) {
    const std::string cmd = std::string("BITSPLIT_ISA=") + isa_name(isa) + " " + BITSPLIT_CPU_DESCRIBE;
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string text;
    char buf[256];
    while (std::fgets(buf, sizeof(buf), f)) text += buf;
    ASSERT_EQ(pclose(f), 0) << text;
    EXPECT_NE(text.find(std::string("isa tier:      ") + isa_name(isa) + " "), std::string::npos) << text;
  }
}

TEST(CpuKernels, ContextDescribesTopology) {
  CpuContext ctx;
  EXPECT_GE(ctx.topology().physical_cores, 1);
  EXPECT_GE(ctx.topology().numa_nodes, 1);
  EXPECT_EQ(ctx.threads(), ctx.topology().physical_cores);
  EXPECT_NE(ctx.describe().find("isa tier"), std::string::npos);
  PlaneBuffer buf(ctx, 3 << 20);
  ASSERT_NE(buf.data(), nullptr);
  std::memset(buf.data(), 1, buf.size());
  EXPECT_EQ(buf.data()[buf.size() - 1], 1);
}

// This process's resident memory in MiB (VmRSS of /proc/self/status; -1 where there is none).
double resident_mib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  double kib = -1;
  char line[256];
  while (std::fgets(line, sizeof(line), f))
    if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::atof(line + 6);
  std::fclose(f);
  return kib < 0 ? -1 : kib / 1024;
}

// Issue 43: under a tbb::global_control limit below the context's threads (`serve -t 1` on a
// machine with more cores), the arena slots no thread could take kept every slice mailed to
// them, ~256 bytes a call per slot, for the life of the process (before the fix: +150 MiB at
// limit 1 with 4 threads; at limit 2 the one worker drains a random slot now and then, so what
// stayed depended on the scheduling). The calls come from fresh threads, as a server's requests
// make them; every item is still covered once.
TEST(CpuKernels, RunSlicesUnderAThreadLimitKeepsNoMemory) {
  if (resident_mib() < 0) GTEST_SKIP() << "no /proc/self/status";
  for (auto [limit, threads] : {std::pair{1, 4}, std::pair{2, 8}}) {
    const tbb::global_control control(tbb::global_control::max_allowed_parallelism, size_t(limit));
    CpuContext ctx({.threads = threads});
    std::atomic<int64_t> covered{0};
    auto calls = [&] {
      for (int i = 0; i < 10'000; ++i) ctx.run_slices(64, 16, [&](int64_t b, int64_t e) { covered += e - b; });
    };
    std::thread(calls).join();  // oneTBB's threads and pools, made once
    const double before = resident_mib();
    for (int round = 0; round < 20; ++round) std::thread(calls).join();
    const double growth = resident_mib() - before;
    EXPECT_EQ(covered.load(), 21 * 10'000 * 64) << "limit " << limit;
    // Well above the noise of a few allocator pages, well below what the mail kept.
    EXPECT_LT(growth, 16.0) << "limit " << limit << ": resident memory grew by " << growth << " MiB";
  }
}

}  // namespace
}  // namespace bitsplit::cpu
