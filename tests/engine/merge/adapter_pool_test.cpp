// The K-Merge adapter pool: synthetic adapters on the fixture base (a similar pair merges, a
// dissimilar one is refused, the budget is never exceeded), OPCM's projection, and the trained
// LoRA fixtures under a budget of one adapter.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "bitsplit/adapter_pool.h"
#include "bitsplit/tokenizer.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/models/" + name; }

LowRankDelta random_delta(int64_t out, int64_t in, int64_t rank, std::mt19937& rng, float amplitude) {
  std::normal_distribution<float> n;
  LowRankDelta d{out, in, rank, std::vector<float>(size_t(out * rank)), std::vector<float>(size_t(rank * in))};
  for (float& v : d.up) v = amplitude * n(rng);
  for (float& v : d.down) v = n(rng) / std::sqrt(float(in));
  return d;
}

// An adapter on the attention and FFN projections of every layer of the fixture (256 wide, ff 512).
PoolAdapter random_adapter(const std::string& name, uint32_t seed, float amplitude) {
  std::mt19937 rng(seed);
  PoolAdapter a;
  a.name = name;
  for (int l = 0; l < 6; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    a.weights[b + "attn_q.weight"] = random_delta(256, 256, 4, rng, amplitude);
    a.weights[b + "attn_output.weight"] = random_delta(256, 256, 4, rng, amplitude);
    a.weights[b + "ffn_up.weight"] = random_delta(512, 256, 4, rng, amplitude);
  }
  return a;
}

// `a` with every factor moved by a relative `noise`.
PoolAdapter nudged(const PoolAdapter& a, const std::string& name, uint32_t seed, float noise) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n;
  PoolAdapter b = a;
  b.name = name;
  for (auto& [w, d] : b.weights) {
    for (float& v : d.up) v *= 1.0f + noise * n(rng);
    for (float& v : d.down) v *= 1.0f + noise * n(rng);
  }
  return b;
}

struct Fixture {
  std::unique_ptr<WeightSource> src;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> text(const std::string& file, size_t max_chars = 4000) const {
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    return tokenizer->encode(ss.str().substr(0, max_chars), {.add_special = false});
  }
};

Fixture load() {
  Fixture f;
  auto src = open_weights(fixture("bible-base.gguf"));
  BITSPLIT_CHECK(src.is_ok());
  f.src = std::move(*src);
  auto m = Model::load(*f.src);
  BITSPLIT_CHECK(m.is_ok());
  f.model = std::make_unique<Model>(std::move(*m));
  auto t = Tokenizer::from_metadata(f.src->metadata());
  BITSPLIT_CHECK(t.is_ok());
  f.tokenizer = std::move(*t);
  return f;
}

std::function<Result<PoolAdapter>()> keep(const PoolAdapter& a) {
  return [a]() -> Result<PoolAdapter> { return a; };
}

TEST(AdapterPool, ASimilarAdapterMergesADissimilarOneIsRefusedAndTheBudgetHolds) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Fixture f = load();
  const auto kjv = f.text(fixture("text/kjv.valid.txt"), 3000);
  const PoolAdapter a = random_adapter("a", 1, 0.6f), similar = nudged(a, "a2", 2, 0.02f), other = random_adapter("c", 3, 0.6f);
  EXPECT_GT(task_vector_cosine(a, similar), 0.9);
  EXPECT_LT(std::fabs(task_vector_cosine(a, other)), 0.1);
  AdapterPoolOptions o;
  o.budget_bytes = a.bytes() + a.bytes() / 2;  // room for one adapter and a half
  o.bos = f.tokenizer->vocab().bos;
  o.max_tokens = 256;
  o.kl_threshold = 0.05;
  AdapterPool pool(*f.model, o);
  auto d = pool.request(a, kjv, keep(a));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->kind, PoolDecision::Kind::kAdmitted) << d->describe();
  d = pool.request(similar, kjv, keep(similar));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->kind, PoolDecision::Kind::kMerged) << d->describe();
  EXPECT_EQ(d->member, "a");
  EXPECT_LE(pool.used_bytes(), o.budget_bytes);
  EXPECT_EQ(pool.members(), 1u);
  EXPECT_EQ(pool.served().at("a2"), "a+a2");
  d = pool.request(other, kjv, keep(other));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->kind, PoolDecision::Kind::kRefused) << d->describe();
  EXPECT_GT(d->worst_kl, o.kl_threshold);
  EXPECT_LE(pool.used_bytes(), o.budget_bytes);
  EXPECT_FALSE(pool.served().contains("c"));
  EXPECT_NE(d->describe().find("refused"), std::string::npos);

  // A budget smaller than one adapter, and a name twice, are errors.
  AdapterPoolOptions tiny = o;
  tiny.budget_bytes = a.bytes() - 1;
  AdapterPool small(*f.model, tiny);
  auto e = small.request(a, kjv, keep(a));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("a budget smaller than one adapter"), std::string::npos);
  e = pool.request(a, kjv, keep(a));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("already in the pool"), std::string::npos);
}

// A stream of adapters, some near-copies of earlier ones: whatever is decided, the pool never
// uses more than its budget and every served name's variant exists.
TEST(AdapterPool, AStreamOfAdaptersNeverExceedsTheBudget) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Fixture f = load();
  const auto kjv = f.text(fixture("text/kjv.valid.txt"), 1500);
  AdapterPoolOptions o;
  const PoolAdapter first = random_adapter("t0", 10, 0.3f);
  o.budget_bytes = 2 * first.bytes() + 100;
  o.bos = f.tokenizer->vocab().bos;
  o.max_tokens = 96;
  o.kl_threshold = 0.02;
  AdapterPool pool(*f.model, o);
  int merged = 0, refused = 0;
  std::vector<PoolAdapter> seen = {first};
  for (int i = 0; i < 6; ++i) {
    const PoolAdapter a = i == 0 ? first
                          : i % 2 ? nudged(seen[size_t(i / 2)], std::string("t").append(std::to_string(i)), uint32_t(20 + i), 0.05f)
                                  : random_adapter(std::string("t").append(std::to_string(i)), uint32_t(30 + i), 0.3f);
    if (i > 0) seen.push_back(a);
    auto d = pool.request(a, kjv, keep(a));
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    merged += d->kind == PoolDecision::Kind::kMerged;
    refused += d->kind == PoolDecision::Kind::kRefused;
    EXPECT_LE(pool.used_bytes(), o.budget_bytes) << d->describe();
    for (const auto& [name, member] : pool.served()) {
      ASSERT_NE(pool.adapter_of(name), nullptr);
      EXPECT_TRUE(pool.adapter_of(name)->variant(*f.model).is_ok());
    }
  }
  EXPECT_GT(merged, 0);
  EXPECT_GT(refused, 0);
}

// The trained fixtures: devil (rank 8, 7 projections + head) fills the budget; psalms (rank 4 on
// q and v) must then merge into it or be refused, by its KL on its own text.
TEST(AdapterPool, TheTrainedAdaptersUnderABudgetOfOne) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-devil-lora.gguf"));
  Fixture f = load();
  auto read = [&](const std::string& file, const std::string& name) -> std::function<Result<PoolAdapter>()> {
    return [file, name]() -> Result<PoolAdapter> {
      BITSPLIT_ASSIGN_OR_RETURN(LoraFile l, open_lora(file));
      return read_pool_adapter(l, 1.0f, name);
    };
  };
  auto devil = read(fixture("bible-devil-lora.gguf"), "devil");
  auto psalms = read(fixture("bible-psalms-lora.gguf"), "psalms");
  const auto devil_text = f.text(fixture("text/devil.valid.txt")), psalms_text = f.text(fixture("text/psalms.valid.txt"));
  double kl = 0;
  for (double threshold : {0.001, 10.0}) {
    AdapterPoolOptions o;
    o.budget_bytes = devil()->bytes();
    o.bos = f.tokenizer->vocab().bos;
    o.max_tokens = 256;
    o.kl_threshold = threshold;
    AdapterPool pool(*f.model, o);
    auto d = pool.request(*devil(), devil_text, devil);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    ASSERT_EQ(d->kind, PoolDecision::Kind::kAdmitted);
    d = pool.request(*psalms(), psalms_text, psalms);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    std::printf("threshold %g: %s\n", threshold, d->describe().c_str());
    EXPECT_EQ(d->kind, threshold < 1 ? PoolDecision::Kind::kRefused : PoolDecision::Kind::kMerged) << d->describe();
    EXPECT_LE(pool.used_bytes(), o.budget_bytes);
    if (kl == 0) kl = d->worst_kl;
    EXPECT_DOUBLE_EQ(d->worst_kl, kl) << "the decision does not change the measurement";
  }
}

}  // namespace
}  // namespace bitsplit

namespace bitsplit {
namespace {

// OPCM's projection on its own: Δ = τ loses everything (P = diag(σ) is all removed); a Δ
// orthogonal to τ's row and column spaces is left as it is; the factor-based cosine equals the
// dense one.
TEST(Opcm, ProjectionRemovesTauAndKeepsWhatIsOrthogonalToIt) {
  std::mt19937 rng(4);
  std::normal_distribution<float> n;
  const int64_t m = 24, k = 16, rank = 3;
  LowRankDelta t{m, k, rank, std::vector<float>(size_t(m * rank)), std::vector<float>(size_t(rank * k))};
  for (float& v : t.up) v = n(rng);
  for (float& v : t.down) v = n(rng);
  const std::vector<float> tau = t.dense();
  auto svd = thin_svd(tau, m, k);
  ASSERT_TRUE(svd.is_ok());
  double norm = 0;
  for (float v : tau) norm += double(v) * v;
  for (double alpha : {0.3, 0.5, 0.9}) {
    const auto same = opcm_project(tau, *svd, alpha);
    double left = 0;
    for (float v : same) left += double(v) * v;
    EXPECT_LT(left, 1e-8 * norm) << "alpha " << alpha;
  }
  // X with τ's three row and column directions projected out: (I − U₃U₃ᵀ)·X·(I − V₃V₃ᵀ).
  std::vector<double> x(size_t(m * k));
  for (double& v : x) v = n(rng);
  auto strip = [&](bool rows) {
    for (int64_t i = 0; i < rank; ++i) {
      if (rows) {  // x -= u_i (u_iᵀ x)
        for (int64_t c = 0; c < k; ++c) {
          double d = 0;
          for (int64_t r = 0; r < m; ++r) d += double(svd->u[size_t(r * svd->k + i)]) * x[size_t(r * k + c)];
          for (int64_t r = 0; r < m; ++r) x[size_t(r * k + c)] -= d * svd->u[size_t(r * svd->k + i)];
        }
      } else {  // x -= (x v_i) v_iᵀ
        for (int64_t r = 0; r < m; ++r) {
          double d = 0;
          for (int64_t c = 0; c < k; ++c) d += x[size_t(r * k + c)] * double(svd->vt[size_t(i * k + c)]);
          for (int64_t c = 0; c < k; ++c) x[size_t(r * k + c)] -= d * svd->vt[size_t(i * k + c)];
        }
      }
    }
  };
  strip(true);
  strip(false);
  const std::vector<float> orthogonal(x.begin(), x.end());
  const auto kept = opcm_project(orthogonal, *svd, 0.5);
  double worst = 0;
  for (size_t i = 0; i < kept.size(); ++i) worst = std::max(worst, std::fabs(double(kept[i]) - orthogonal[i]));
  EXPECT_LT(worst, 1e-4);

  PoolAdapter a, b;
  a.weights["w"] = t;
  LowRankDelta other{m, k, 2, std::vector<float>(size_t(m * 2)), std::vector<float>(size_t(2 * k))};
  for (float& v : other.up) v = n(rng);
  for (float& v : other.down) v = n(rng);
  b.weights["w"] = other;
  const auto da = t.dense(), db = other.dense();
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < da.size(); ++i) {
    dot += double(da[i]) * db[i];
    na += double(da[i]) * da[i];
    nb += double(db[i]) * db[i];
  }
  // The dense side is rounded to f32 per element; the factor side is not.
  EXPECT_NEAR(task_vector_cosine(a, b), dot / std::sqrt(na * nb), 1e-6);
  EXPECT_NEAR(task_vector_cosine(a, a), 1.0, 1e-9);
}

}  // namespace
}  // namespace bitsplit
