// The attention block (cpu::attention_block and its AVX2 and AVX-512 tiers) against the scalar reference
// attention_row_ref: bit for bit on random queries, keys, values and masks, every block size,
// head sizes with and without a tail of eight, soft caps, fully masked runs of slots.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "bitsplit/cpu.h"

namespace bitsplit::cpu {
namespace {

struct Case {
  int nq;
  int64_t head_dim, kv_len;
  float softcap;
  bool causal;
};

// Which attention_block: the dispatching one, or a tier's own.
enum class Block { kDispatch, kAvx2, kAvx512 };

void expect_block_equals_reference(const Case& c, Block block) {
  std::mt19937_64 rng(uint64_t(c.nq * 1000 + c.head_dim * 10 + c.kv_len));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> coin(0, 3);
  const int64_t stride = c.head_dim * 3 + 5;  // other heads' values between a slot's
  std::vector<float> k(size_t(c.kv_len * stride)), v(k.size());
  for (float& x : k) x = 2.0f * normal(rng);
  for (float& x : v) x = normal(rng);
  std::vector<std::vector<float>> q(size_t(c.nq), std::vector<float>(size_t(c.head_dim)));
  std::vector<std::vector<uint8_t>> vis(size_t(c.nq), std::vector<uint8_t>(size_t(c.kv_len)));
  for (int r = 0; r < c.nq; ++r) {
    for (float& x : q[size_t(r)]) x = normal(rng);
    for (int64_t j = 0; j < c.kv_len; ++j) {
      // causal: row r sees a prefix (at least one slot); else random, with runs of 8 unseen.
      vis[size_t(r)][size_t(j)] = c.causal ? uint8_t(j <= (c.kv_len - 1) * (r + 1) / c.nq)
                                           : uint8_t((j / 8) % 3 != 1 && coin(rng) != 0);
    }
    vis[size_t(r)][0] = 1;
  }
  std::vector<std::vector<float>> want(size_t(c.nq), std::vector<float>(size_t(c.head_dim))),
      got = want, s1(size_t(c.nq), std::vector<float>(size_t(c.kv_len))), s2 = s1;
  const float* qs[kAttentionBlock];
  const uint8_t* vs[kAttentionBlock];
  float* ss[kAttentionBlock];
  float* os[kAttentionBlock];
  for (int r = 0; r < c.nq; ++r) {
    attention_row_ref(q[size_t(r)].data(), k.data() + 7, v.data() + 7, stride, c.head_dim, c.kv_len,
                      vis[size_t(r)].data(), 0.125f, c.softcap, s1[size_t(r)].data(), want[size_t(r)].data());
    qs[r] = q[size_t(r)].data();
    vs[r] = vis[size_t(r)].data();
    ss[r] = s2[size_t(r)].data();
    os[r] = got[size_t(r)].data();
  }
  auto* fn = block == Block::kAvx2 ? attention_block_avx2 : block == Block::kAvx512 ? attention_block_avx512 : attention_block;
  fn(c.nq, qs, vs, k.data() + 7, v.data() + 7, stride, c.head_dim, c.kv_len, 0.125f, c.softcap, ss, os);
  for (int r = 0; r < c.nq; ++r) {
    ASSERT_EQ(std::memcmp(want[size_t(r)].data(), got[size_t(r)].data(), size_t(c.head_dim) * 4), 0)
        << "row " << r << " of " << c.nq << ", head_dim " << c.head_dim << ", kv_len " << c.kv_len;
  }
}

TEST(CpuAttention, BlockEqualsTheReferenceBitForBit) {
  const bool avx2 = isa_supported(Isa::kAvx2), avx512 = isa_supported(Isa::kAvx512);
  for (int nq : {1, 3, 8, 11, 16}) {  // 11: a block of eight rows summed together, then three
    // 40, 200: the AVX-512 tier's sixteen-wide chunks with an eight-wide tail (scalar there).
    for (int64_t head_dim : {8, 12, 40, 64, 96, 128, 200, 256}) {
      for (int64_t kv_len : {1, 9, 64, 131}) {
        for (float softcap : {0.0f, 50.0f}) {
          for (bool causal : {true, false}) {
            const Case c{nq, head_dim, kv_len, softcap, causal};
            expect_block_equals_reference(c, Block::kDispatch);
            if (avx2) expect_block_equals_reference(c, Block::kAvx2);
            if (avx512) expect_block_equals_reference(c, Block::kAvx512);
          }
        }
      }
    }
  }
  if (!avx2) GTEST_SKIP() << "no AVX2 here: only the dispatching (scalar) path was compared";
  if (!avx512) GTEST_SKIP() << "no AVX-512 here: the AVX-512 tier was not compared";
}

// A score of -inf everywhere but one slot: p = 1 there, the output is that slot's value exactly.
TEST(CpuAttention, OneVisibleSlotReturnsItsValue) {
  const int64_t head_dim = 64, kv_len = 40;
  std::vector<float> k(size_t(kv_len * head_dim), 0.5f), v(k.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 97) - 40.0f;
  std::vector<float> q(size_t(head_dim), 1.0f);
  std::vector<float> out(static_cast<size_t>(head_dim)), scores(static_cast<size_t>(kv_len));
  std::vector<uint8_t> vis(size_t(kv_len), 0);
  vis[17] = 1;
  const float* qs[] = {q.data()};
  const uint8_t* vs[] = {vis.data()};
  float* ss[] = {scores.data()};
  float* os[] = {out.data()};
  attention_block(1, qs, vs, k.data(), v.data(), head_dim, head_dim, kv_len, 0.125f, 0.0f, ss, os);
  for (int64_t d = 0; d < head_dim; ++d) ASSERT_EQ(out[size_t(d)], v[size_t(17 * head_dim + d)]);
}

// silu_mul: the AVX2 kernel (and the dispatch) equal the scalar loop bit for bit on ordinary
// values, the branch points (±0, the −87 cut-off of the exponential), huge, infinite, NaN and
// subnormal inputs, for lengths with and without an eight-wide tail; and silu_exp stays within a
// few ulp of libm's silu where the result is a normal number.
TEST(CpuActivations, SiluMulEqualsTheReferenceBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> g, u;
  for (float s : {0.0f, -0.0f, 1.0f, -1.0f, 86.9f, -86.9f, 87.0f, -87.0f, 87.5f, -87.5f, 100.0f, -100.0f, 1e30f,
                  -1e30f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 0.5f, -0.5f}) {
    g.push_back(s), u.push_back(1.0f);
  }
  for (int i = 0; i < 4000; ++i) g.push_back(normal(rng) * (i % 7 == 0 ? 10.0f : 1.0f)), u.push_back(normal(rng));
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(13), int64_t(g.size())}) {
    std::vector<float> want(g.begin(), g.begin() + n), got = want, dispatched = want;
    silu_mul_ref(want.data(), u.data(), n);
    silu_mul(dispatched.data(), u.data(), n);
    ASSERT_EQ(std::memcmp(want.data(), dispatched.data(), size_t(n) * 4), 0) << "dispatch, n " << n;
    if (!isa_supported(Isa::kAvx2)) continue;
    silu_mul_avx2(got.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&want[size_t(i)], &got[size_t(i)], 4), 0)
          << "silu(" << g[size_t(i)] << ") * " << u[size_t(i)] << ": " << want[size_t(i)] << " vs " << got[size_t(i)];
    }
  }
  EXPECT_TRUE(std::isnan(silu(NAN)));
  EXPECT_EQ(silu(INFINITY), INFINITY);
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_EQ(silu(-100.0f), 0.0f);
  for (float x = -80.0f; x <= 80.0f; x += 0.0371f) {
    const double want = double(x) / (1.0 + std::exp(-double(x)));
    if (std::fabs(want) < 1e-30) continue;
    EXPECT_NEAR(double(silu(x)), want, 4e-7 * std::fabs(want)) << "x " << x;
  }
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "no AVX2 here: only the dispatching (scalar) path was compared";
}

// The rotation table (computed once per position for all its heads in engine/model/forward.cpp) applied
// to a head equals the documented rotation written out here in the same float steps, for both
// pair orders, with LongRoPE's per-pair factors and attention factor and without them; a slip
// between cos and sin, or between a pair's two positions, changes the bits.
TEST(Rope, TableAppliedToEachHeadIsTheDocumentedRotation) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t kHeadDim = 64, kRot = 48;  // a partial rotation: the last 16 dims stay
  std::vector<float> factors(kRot / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.37f * float(i);
  for (RopeOrder order : {RopeOrder::kNormal, RopeOrder::kNeox}) {
    for (bool longrope : {false, true}) {
      const std::span<const float> f = longrope ? std::span<const float>(factors) : std::span<const float>();
      const float pos = 1234.0f, base = 10000.0f, freq_scale = 0.5f, mscale = longrope ? 1.19f : 1.0f;
      std::vector<float> cs(kRot);
      rope_table(kRot, pos, base, freq_scale, f, mscale, cs.data());
      for (int head = 0; head < 3; ++head) {
        std::vector<float> x(kHeadDim);
        for (float& v : x) v = normal(rng);
        std::vector<float> want = x, table = x, whole = x;
        for (int64_t i = 0; i < kRot / 2; ++i) {
          float theta = pos * freq_scale * std::pow(base, -2.0f * float(i) / float(kRot));
          if (longrope) theta /= factors[size_t(i)];
          const float c = std::cos(theta) * mscale, s = std::sin(theta) * mscale;
          const int64_t a = order == RopeOrder::kNormal ? 2 * i : i;
          const int64_t b = order == RopeOrder::kNormal ? 2 * i + 1 : i + kRot / 2;
          const float x0 = x[size_t(a)] * c, x1s = x[size_t(b)] * s, x0s = x[size_t(a)] * s, x1c = x[size_t(b)] * c;
          want[size_t(a)] = x0 - x1s;
          want[size_t(b)] = x0s + x1c;
        }
        rope_apply(table.data(), kRot, order, cs.data());
        rope_f32(whole.data(), kRot, order, pos, base, freq_scale, f, mscale);
        EXPECT_EQ(0, std::memcmp(want.data(), table.data(), sizeof(float) * kHeadDim))
            << "order " << int(order) << " longrope " << longrope << " head " << head;
        EXPECT_EQ(0, std::memcmp(want.data(), whole.data(), sizeof(float) * kHeadDim));
      }
    }
  }
}

}  // namespace
}  // namespace bitsplit::cpu

namespace bitsplit {
namespace {

// dot_f32_rows is dot_f32 on each row, bit for bit: widths that are and are not multiples of 8,
// row counts around the block of 8, a stride wider than the width.
TEST(CpuDotRows, EqualsDotF32OnEveryRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n;
  for (int64_t width : {1, 7, 8, 16, 24, 576, 577}) {
    for (int64_t count : {1, 7, 8, 9, 17}) {
      const int64_t stride = width + 3;
      std::vector<float> x(static_cast<size_t>(width)), rows(static_cast<size_t>(count * stride));
      for (float& v : x) v = n(rng);
      for (float& v : rows) v = n(rng);
      std::vector<float> got(static_cast<size_t>(count));
      cpu::dot_f32_rows(x.data(), rows.data(), stride, width, count, got.data());
      for (int64_t t = 0; t < count; ++t) {
        const float want = cpu::dot_f32(rows.data() + t * stride, x.data(), width);
        ASSERT_EQ(std::memcmp(&got[size_t(t)], &want, 4), 0) << "width " << width << " count " << count << " row " << t;
      }
    }
  }
}

}  // namespace
}  // namespace bitsplit
