// Test-only: the bodies of the kernel-case properties (kernel_case_properties.h), shared by the
// CPU kernel test binaries; each binary instantiates them over its own cases.
#include "kernel_case_properties.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "cpu_testing.h"

namespace bitsplit::cpu::testing {
namespace {

// The layouts a case runs in on a tier: the file-layout views (null), and the packed plane where
// PackedPlane covers the case.
std::vector<const PackedPlane*> layouts(const std::optional<PackedPlane>& packed) {
  if (packed) return {nullptr, &*packed};
  return {nullptr};
}

std::string where(const KernelCase& c, Isa isa, const PackedPlane* layout) {
  return c.name() + " " + isa_name(isa) + (layout ? " packed" : " file layout");
}

}  // namespace

TEST_P(KernelTiers, MatchTheReferenceBitwise) {
  ASSERT_FALSE(GetParam().cases.empty());
  for (const KernelCase& c : GetParam().cases) {
    const CaseWeights w(c);
    const std::optional<PackedPlane> packed = w.pack(tier_context(Isa::kScalar));
    for (int64_t rows : c.rows) {
      const std::vector<float> x = case_activations(c, rows);
      CaseActivations reference;
      quantize_case(w, nullptr, x.data(), rows, reference);
      const std::vector<float> want = multiply_case(w, nullptr, nullptr, reference);
      for (Isa isa : supported_tiers()) {
        CpuContext& ctx = tier_context(isa);
        CaseActivations quantized;
        quantize_case(w, &ctx, x.data(), rows, quantized);
        const std::string diff = activations_difference(reference, quantized);
        ASSERT_TRUE(diff.empty()) << "quantiser " << where(c, isa, nullptr) << " rows " << rows << ": " << diff;
        // The kernels all take the reference's activations: a difference is the kernel's own.
        for (const PackedPlane* layout : layouts(packed)) {
          const std::vector<float> got = multiply_case(w, &ctx, layout, reference);
          ASSERT_TRUE(same_bits(want, got))
              << where(c, isa, layout) << " rows " << rows << ": " << first_difference(want, got);
        }
      }
    }
  }
}

// Every row of every batch is compared with its own result alone. The batch of n rows starts at
// pool row 7n (mod the pool), so a row sits at a different position in each batch.
TEST_P(KernelBatchInvariance, RowAloneEqualsTheRowInAnyBatch) {
  const KernelCase& c = GetParam();
  const CaseWeights w(c);
  const int64_t pool_rows = *std::max_element(c.rows.begin(), c.rows.end());
  const std::vector<float> pool = random_activations(pool_rows, c.in, c.seed + 1);
  auto pool_row = [&](int64_t j) { return pool.begin() + (j % pool_rows) * c.in; };
  for (Isa isa : supported_tiers()) {
    CpuContext& ctx = tier_context(isa);
    const std::optional<PackedPlane> packed = w.pack(ctx);
    for (const PackedPlane* layout : layouts(packed)) {
      std::vector<std::vector<float>> alone;
      for (int64_t j = 0; j < pool_rows; ++j) alone.push_back(run_case(w, &ctx, layout, &*pool_row(j), 1));
      for (int64_t n : c.rows) {
        const int64_t start = 7 * n;
        std::vector<float> x;
        for (int64_t pos = 0; pos < n; ++pos) x.insert(x.end(), pool_row(start + pos), pool_row(start + pos) + c.in);
        const std::vector<float> y = run_case(w, &ctx, layout, x.data(), n);
        for (int64_t pos = 0; pos < n; ++pos)
          ASSERT_TRUE(same_bits(alone[size_t((start + pos) % pool_rows)].data(), y.data() + pos * c.out, size_t(c.out)))
              << where(c, isa, layout) << ": row " << pos << " of " << n << " differs from the same row alone";
      }
    }
  }
}

TEST_P(KernelThreadInvariance, SameBitsOnAnyNumberOfThreads) {
  const KernelCase& c = GetParam();
  const CaseWeights w(c);
  for (int64_t rows : c.rows) {
    const std::vector<float> x = case_activations(c, rows);
    const std::vector<float> want = run_case(w, nullptr, nullptr, x.data(), rows);
    for (Isa isa : supported_tiers()) {
      for (int threads : {1, 2, 3, 0}) {
        CpuContext ctx({.threads = threads, .isa = isa});
        const std::optional<PackedPlane> packed = w.pack(ctx);
        for (const PackedPlane* layout : layouts(packed)) {
          const std::vector<float> got = run_case(w, &ctx, layout, x.data(), rows);
          ASSERT_TRUE(same_bits(want, got)) << where(c, isa, layout) << ", " << ctx.threads()
                                            << " threads: " << first_difference(want, got);
        }
      }
    }
  }
}

}  // namespace bitsplit::cpu::testing
