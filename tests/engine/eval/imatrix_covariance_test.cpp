// The input covariances collect_imatrix gathers (engine/eval) fed to convert's draft fit
// (engine/convert, the layer below): a test of both, so it sits with eval.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "bitsplit/convert.h"
#include "bitsplit/quality.h"
#include "convert_testing.h"

namespace bitsplit {
namespace {

using testing::ConvertTest;
using testing::logits_of;

// `imatrix --covariance` and convert's error feedback: the inputs' second moments are collected
// (one matrix per distinct input), written and read back shared, and change the drafts convert
// writes; a malformed covariance is an error naming it.
TEST_F(ConvertTest, InputCovariancesRoundTripSharedAndFeedTheDraftFit) {
  auto source = open_weights(write_tiny({}));
  ASSERT_TRUE(source.is_ok());
  auto model = Model::load(**source);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  std::vector<int32_t> tokens;
  for (int i = 0; i < 60; ++i) tokens.push_back(3 + (i * 7 + i / 3) % 40);
  InputCovariances cov;
  int64_t n = 0;
  auto im = collect_imatrix(*model, tokens, 16, 1, nullptr, &n, &cov);
  ASSERT_TRUE(im.is_ok()) << im.status().message();
  ASSERT_EQ(cov.size(), im->size());
  EXPECT_EQ(cov.at("blk.0.attn_q.weight"), cov.at("blk.0.attn_k.weight"));  // one input, one matrix
  EXPECT_EQ(cov.at("blk.0.attn_q.weight"), cov.at("blk.0.attn_v.weight"));
  EXPECT_EQ(cov.at("blk.0.ffn_gate.weight"), cov.at("blk.0.ffn_up.weight"));
  EXPECT_NE(cov.at("blk.0.attn_q.weight"), cov.at("blk.0.attn_output.weight"));
  for (const auto& [name, c] : cov) {
    const auto& diag = im->at(name);
    const auto cols = int64_t(diag.size());
    ASSERT_EQ(c->n, cols) << name;
    for (int64_t i = 0; i < cols; ++i) {
      ASSERT_NEAR(c->data[i * cols + i], diag[size_t(i)], 1e-4f * (1.0f + diag[size_t(i)])) << name << " " << i;
      for (int64_t j = 0; j < i; ++j) ASSERT_EQ(c->data[i * cols + j], c->data[j * cols + i]) << name;
    }
  }

  ASSERT_TRUE(write_imatrix(*im, &cov, n, "text.txt", path("cov.gguf")).is_ok());
  auto back = read_input_covariances(path("cov.gguf"));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  ASSERT_EQ(back->size(), cov.size());
  for (const auto& [name, c] : cov) {
    const Covariance& got = *back->at(name);
    ASSERT_EQ(got.n, c->n) << name;
    EXPECT_TRUE(std::equal(got.data, got.data + got.n * got.n, c->data)) << name;
  }
  EXPECT_EQ(back->at("blk.1.attn_q.weight"), back->at("blk.1.attn_v.weight"));
  auto columns = read_imatrix(path("cov.gguf"));
  ASSERT_TRUE(columns.is_ok()) << columns.status().message();
  EXPECT_EQ(*columns, *im);
  auto both = read_imatrix_file(path("cov.gguf"));  // what convert and eval read: one opening
  ASSERT_TRUE(both.is_ok()) << both.status().message();
  EXPECT_EQ(both->columns, *im);
  EXPECT_EQ(both->covariances.size(), cov.size());
  EXPECT_EQ(both->covariances.at("blk.1.attn_q.weight"), both->covariances.at("blk.1.attn_v.weight"));

  // Convert with and without the covariances: the drafts differ, both files load and run.
  ConvertOptions plain;
  plain.imatrix = &*columns;
  ConvertOptions fed = plain;
  fed.covariances = &*back;
  ASSERT_TRUE(convert_model(**source, path("plain.gguf"), plain, nullptr, nullptr).is_ok());
  const Status st = convert_model(**source, path("fed.gguf"), fed, nullptr, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.message();
  auto a = open_weights(path("plain.gguf")), b = open_weights(path("fed.gguf"));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  const auto* ta = (*a)->find_tensor("blk.0.ffn_down.draft_codes");
  const auto* tb = (*b)->find_tensor("blk.0.ffn_down.draft_codes");
  ASSERT_TRUE(ta && tb);
  auto ba = (*a)->raw_bytes(*ta), bb = (*b)->raw_bytes(*tb);
  ASSERT_TRUE(ba.is_ok() && bb.is_ok());
  EXPECT_FALSE(std::equal(ba->begin(), ba->end(), bb->begin(), bb->end()));
  auto logits = logits_of(**b);
  ASSERT_TRUE(logits.is_ok()) << logits.status().message();
  for (float v : *logits) ASSERT_TRUE(std::isfinite(v));
  // A covariance of the wrong width (or none) for a projection is an error, as a missing
  // importance entry is, not a silent fall back to the ordinary fit.
  InputCovariances wrong = *back;
  wrong["blk.0.ffn_down.weight"] = Covariance::holding(std::vector<float>(16, 0.0f), 4);
  ConvertOptions bad = plain;
  bad.covariances = &wrong;
  Status mismatch = convert_model(**source, path("bad.gguf"), bad, nullptr, nullptr);
  EXPECT_NE(mismatch.message().find("covariance of 'blk.0.ffn_down.weight' is 4 x 4"), std::string::npos)
      << mismatch.message();
  wrong.erase("blk.0.ffn_down.weight");
  mismatch = convert_model(**source, path("bad.gguf"), bad, nullptr, nullptr);
  EXPECT_NE(mismatch.message().find("no input covariance for 'blk.0.ffn_down.weight'"), std::string::npos)
      << mismatch.message();

  // Malformed covariance files.
  auto bad_file = [&](const std::string& name, std::vector<int64_t> dims, float diag, const std::string& same_as) {
    gguf::Writer w;
    w.metadata().set("general.type", gguf::Value::string("bitsplit.imatrix"));
    if (!same_as.empty()) w.metadata().set("imatrix.same_input.blk.0.attn_k.weight", gguf::Value::string(same_as));
    std::vector<float> v(size_t(dims[0] * dims[1]), 0.0f);
    v[0] = diag;
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    EXPECT_TRUE(w.add_tensor("blk.0.attn_q.weight.cov", gguf::TensorType::F32, dims, std::move(bytes)).is_ok());
    EXPECT_TRUE(w.write_file(path(name)).is_ok());
    return read_input_covariances(path(name));
  };
  auto not_square = bad_file("ns.gguf", {4, 3}, 1.0f, "");
  ASSERT_FALSE(not_square.is_ok());
  EXPECT_NE(not_square.status().message().find("square"), std::string::npos) << not_square.status().message();
  auto negative = bad_file("neg.gguf", {4, 4}, -1.0f, "");
  ASSERT_FALSE(negative.is_ok());
  EXPECT_NE(negative.status().message().find("diagonal"), std::string::npos) << negative.status().message();
  auto dangling = bad_file("dangling.gguf", {4, 4}, 1.0f, "blk.9.attn_q.weight");
  ASSERT_FALSE(dangling.is_ok());
  EXPECT_NE(dangling.status().message().find("no covariance"), std::string::npos) << dangling.status().message();
  EXPECT_TRUE(bad_file("good.gguf", {4, 4}, 1.0f, "blk.0.attn_q.weight").is_ok());
}

}  // namespace
}  // namespace bitsplit
