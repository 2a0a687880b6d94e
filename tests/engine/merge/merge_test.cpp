// `bitsplit merge`: the truncated SVD, every method's definition on the trained fixtures
// (full fine-tunes, BitDelta deltas and LoRA adapters as inputs), and the bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "bitsplit/delta_format.h"
#include "bitsplit/merge.h"
#include "bitsplit/model.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/models/" + name; }

std::vector<float> random_matrix(int64_t rows, int64_t cols, int64_t rank, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n;
  std::vector<float> a(size_t(rows * rank)), b(size_t(rank * cols)), m(size_t(rows * cols), 0.0f);
  for (float& v : a) v = n(rng);
  for (float& v : b) v = n(rng);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < rank; ++k)
      for (int64_t c = 0; c < cols; ++c) m[size_t(r * cols + c)] += a[size_t(r * rank + k)] * b[size_t(k * cols + c)];
  return m;
}

double frobenius(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

TEST(TruncatedSvd, RecoversALowRankMatrixAndIsTheBestApproximation) {
  const auto m = random_matrix(40, 24, 3, 7);
  double kept = 0;
  auto r3 = truncated_svd(m, 40, 24, 3, &kept);
  ASSERT_TRUE(r3.is_ok()) << r3.status().message();
  double norm = 0;
  for (float v : m) norm += double(v) * v;
  EXPECT_LT(frobenius(*r3, m), 1e-4 * std::sqrt(norm));
  EXPECT_NEAR(kept, 1.0, 1e-6);
  // Rank 1 of a rank-3 matrix: the residual's energy is exactly what the kept fraction leaves.
  auto r1 = truncated_svd(m, 40, 24, 1, &kept);
  ASSERT_TRUE(r1.is_ok());
  EXPECT_LT(kept, 0.999);
  const double residual = frobenius(*r1, m);
  EXPECT_NEAR(residual * residual, (1.0 - kept) * norm, 1e-3 * norm);
  // Transposed shapes take the same path.
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < 40; ++r)
    for (int64_t c = 0; c < 24; ++c) t[size_t(c * 40 + r)] = m[size_t(r * 24 + c)];
  auto t1 = truncated_svd(t, 24, 40, 1);
  ASSERT_TRUE(t1.is_ok());
  EXPECT_NEAR(frobenius(*t1, t), residual, 1e-3 * residual);
  auto bad = truncated_svd(m, 40, 24, 25);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("at most 24"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(truncated_svd(m, 40, 24, 0).is_ok());
}

struct Merged {
  std::unique_ptr<WeightSource> src;
  std::unique_ptr<Model> model;
};

class MergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
    BITSPLIT_REQUIRE_FILE(fixture("bible-devil-lora.gguf"));
    auto b = open_weights(fixture("bible-base.gguf"));
    ASSERT_TRUE(b.is_ok());
    base_ = std::move(*b);
  }
  Merged merge(const std::vector<std::string>& inputs, const MergeOptions& o, MergeReport* rep = nullptr) {
    const std::string out = dir_.file(std::string("m").append(std::to_string(count_++)).append(".gguf"));
    Status st = merge_models(*base_, inputs, out, o, rep);
    BITSPLIT_CHECK(st.is_ok(), st.message());
    Merged m;
    auto src = open_weights(out);
    BITSPLIT_CHECK(src.is_ok());
    m.src = std::move(*src);
    auto model = Model::load(*m.src);
    BITSPLIT_CHECK(model.is_ok(), model.status().message());
    m.model = std::make_unique<Model>(std::move(*model));
    return m;
  }
  std::vector<float> tensor(const WeightSource& s, const std::string& name) {
    const gguf::TensorInfo* t = s.find_tensor(name);
    BITSPLIT_CHECK(t != nullptr, name);
    auto v = s.load_f32(*t);
    BITSPLIT_CHECK(v.is_ok());
    return *v;
  }
  std::vector<float> tensor(const std::string& file, const std::string& name) {
    auto s = open_weights(file);
    BITSPLIT_CHECK(s.is_ok());
    return tensor(**s, name);
  }
  testing::TempDir dir_{"merge"};
  std::unique_ptr<WeightSource> base_;
  int count_ = 0;
};

TEST_F(MergeTest, AverageAndTaskArithmeticOfFullFineTunesAreTheirDefinitions) {
  const std::string devil = fixture("bible-devil.gguf"), psalms = fixture("bible-psalms.gguf");
  MergeOptions avg;
  avg.method = MergeMethod::kAverage;
  MergeReport rep;
  Merged a = merge({devil, psalms}, avg, &rep);
  EXPECT_EQ(rep.tensors, int64_t(base_->tensors().size()));
  EXPECT_EQ(rep.svd_matrices, 0);
  MergeOptions ta;
  ta.method = MergeMethod::kTaskArithmetic;
  ta.lambda = 0.3f;
  Merged t = merge({devil, psalms}, ta);
  for (const std::string name : {"blk.2.ffn_up.weight", "output_norm.weight", "token_embd.weight"}) {
    SCOPED_TRACE(name);
    const auto b = tensor(*base_, name), d = tensor(devil, name), p = tensor(psalms, name);
    const auto ma = tensor(*a.src, name), mt = tensor(*t.src, name);
    double worst_a = 0, worst_t = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      worst_a = std::max(worst_a, std::fabs(ma[i] - 0.5 * (double(d[i]) + p[i])));
      worst_t = std::max(worst_t, std::fabs(mt[i] - (b[i] + 0.3 * ((double(d[i]) - b[i]) + (double(p[i]) - b[i])))));
    }
    EXPECT_LT(worst_a, 1e-6);
    EXPECT_LT(worst_t, 1e-6);
  }
}

// Two LoRA adapters of rank 8 and 4: MonoSoup at rank 8 cuts nothing, so it equals the average;
// at rank 2 it differs, and keeps less than all of the energy.
TEST_F(MergeTest, MonoSoupOfLowRankAdaptersAtTheirRankIsTheAverage) {
  const std::string devil = fixture("bible-devil-lora.gguf"), psalms = fixture("bible-psalms-lora.gguf");
  MergeOptions avg;
  avg.method = MergeMethod::kAverage;
  Merged a = merge({devil, psalms}, avg);
  MergeOptions soup;
  soup.rank = 8;
  MergeReport rep8, rep2;
  Merged s8 = merge({devil, psalms}, soup, &rep8);
  soup.rank = 2;
  Merged s2 = merge({devil, psalms}, soup, &rep2);
  EXPECT_GT(rep8.svd_matrices, 0);
  EXPECT_NEAR(rep8.min_energy_kept, 1.0, 1e-4);
  EXPECT_LT(rep2.mean_energy_kept, 0.99);
  for (const std::string name : {"blk.0.attn_q.weight", "blk.4.ffn_down.weight", "output.weight"}) {
    SCOPED_TRACE(name);
    const auto ma = tensor(*a.src, name), m8 = tensor(*s8.src, name), m2 = tensor(*s2.src, name), b = tensor(*base_, name);
    EXPECT_LT(frobenius(ma, m8), 1e-3 * frobenius(ma, b) + 1e-6);
    EXPECT_GT(frobenius(ma, m2), 1e-2 * frobenius(ma, b));
  }
}

// One adapter merged alone is the adapter materialised: its logits are the LoRA variant's.
TEST_F(MergeTest, OneAdapterMergedAloneIsTheVariant) {
  MergeOptions avg;
  avg.method = MergeMethod::kAverage;
  Merged m = merge({fixture("bible-devil-lora.gguf")}, avg);
  auto base = Model::load(*base_);
  ASSERT_TRUE(base.is_ok());
  auto lora = open_lora(fixture("bible-devil-lora.gguf"));
  ASSERT_TRUE(lora.is_ok());
  auto v = Variant::load(*lora, *base, "devil", 1.0f);
  ASSERT_TRUE(v.is_ok());
  auto tok = Tokenizer::from_metadata(base_->metadata());
  ASSERT_TRUE(tok.is_ok());
  const auto tokens = (*tok)->encode("The devil is a", {.add_special = true});
  auto run = [&](const Model& model, const Variant* variant) {
    KvCache cache(model.config(), int64_t(tokens.size()));
    auto r = forward_pass(model, cache, Batch::causal(tokens, 0, true), nullptr, Pass::kDefault, variant);
    BITSPLIT_CHECK(r.is_ok());
    return *r;
  };
  const auto merged = run(*m.model, nullptr), variant = run(*base, v->get()), plain = run(*base, nullptr);
  EXPECT_LT(frobenius(merged, variant), 1e-3 * frobenius(variant, plain));
}

// A BitDelta input is its delta applied: merged alone, every tensor is apply_delta_f32's.
TEST_F(MergeTest, ADeltaInputIsItsAppliedDelta) {
  const std::string delta = dir_.file("d.delta.gguf");
  auto ft = open_weights(fixture("bible-psalms.gguf"));
  ASSERT_TRUE(ft.is_ok());
  ASSERT_TRUE(make_delta(*base_, **ft, delta, {}, nullptr).is_ok());
  MergeOptions avg;
  avg.method = MergeMethod::kAverage;
  Merged m = merge({delta}, avg);
  auto d = open_delta(delta);
  ASSERT_TRUE(d.is_ok());
  for (const std::string name : {"blk.1.attn_v.weight", "token_embd.weight", "blk.1.ffn_norm.weight"}) {
    auto want = apply_delta_f32(*d, *base_, name);
    ASSERT_TRUE(want.is_ok());
    EXPECT_LT(frobenius(tensor(*m.src, name), *want), 1e-5) << name;
  }
}

TEST_F(MergeTest, BadInputsAreRefusedNamingTheProblem) {
  const std::string devil = fixture("bible-devil.gguf"), psalms = fixture("bible-psalms.gguf");
  const std::string tiny = dir_.file("tiny.gguf");
  ASSERT_TRUE(testing::make_tiny_model({}).write_file(tiny).is_ok());
  struct Case {
    std::vector<std::string> inputs;
    MergeOptions options;
    std::string expect;
  };
  MergeOptions soup;
  MergeOptions big = soup;
  big.rank = 65;
  MergeOptions nan;
  nan.method = MergeMethod::kTaskArithmetic;
  nan.lambda = std::nanf("");
  const Case cases[] = {
      {{devil, devil}, soup, "merging a fine-tune with itself"},
      {{devil, fixture("bible-base.gguf")}, soup, "is the base model itself"},
      {{devil, psalms}, big, "--rank 65 is larger than 'blk.0.attn_k.weight' (64 x 256)"},
      {{devil, tiny}, soup, "a fine-tune of another model"},
      {{devil, psalms}, nan, "--lambda must be a finite number"},
      {{}, soup, "needs fine-tunes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expect);
    const std::string out = dir_.file("bad.gguf");
    Status st = merge_models(*base_, c.inputs, out, c.options, nullptr);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
    EXPECT_FALSE(std::filesystem::exists(out));
    EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  }
  EXPECT_FALSE(parse_merge_method("ties").is_ok());
}

}  // namespace
}  // namespace bitsplit
