// A split GGUF set opens as one source that runs exactly like the single file: the same tensors
// and bytes, the same greedy text from a session, for the original model and its conversion
// (a set converts to one file). The set's errors: tests/engine/format/split_gguf_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "bitsplit/convert.h"
#include "bitsplit/session.h"
#include "split_gguf_testing.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

using testing::split;
using testing::SplitGguf;

const std::string kBase = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";

std::vector<int32_t> greedy(const WeightSource& source, int n) {
  auto model = Model::load(source);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model) return {};
  Session session(*model, nullptr, {});
  SamplingParams p;
  p.temperature = 0;
  Sampler sampler(p);
  std::vector<int32_t> out;
  auto r = session.generate(std::vector<int32_t>{1, 40, 7, 300}, n, -1, sampler, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return out;
}

TEST_F(SplitGguf, ThreePartsRunLikeTheSingleFile) {
  auto whole = open_weights(kBase);
  ASSERT_TRUE(whole.is_ok());
  const auto paths = split(**whole, dir.file("bible"), 3);
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(fs::path(paths[0]).filename(), "bible-00001-of-00003.gguf");
  for (const auto& p : paths) EXPECT_FALSE(fs::exists(p + ".partial")) << p;
  auto set = open_weights(paths[0]);
  ASSERT_TRUE(set.is_ok()) << set.status().message();
  EXPECT_NE((*set)->describe().find("split in 3 parts"), std::string::npos) << (*set)->describe();
  ASSERT_EQ((*set)->tensors().size(), (*whole)->tensors().size());
  for (const auto& t : (*whole)->tensors()) {
    const gguf::TensorInfo* s = (*set)->find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    auto a = (*whole)->raw_bytes(t);
    auto b = (*set)->raw_bytes(*s);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_TRUE(std::equal(a->begin(), a->end(), b->begin(), b->end())) << t.name;
  }
  EXPECT_EQ(greedy(**set, 24), greedy(**whole, 24));
  // Converting the set writes one file: the parts' split keys are not copied into it.
  const std::string from_set = dir.file("from-set.bitsplit.gguf");
  ASSERT_TRUE(convert_model(**set, from_set, {}, nullptr, nullptr).is_ok());
  auto one = open_weights(from_set);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  EXPECT_EQ((*one)->describe().find("split"), std::string::npos) << (*one)->describe();

  // A converted (bit-split) model split in 3 decodes speculatively like its single file.
  const std::string converted = dir.file("bible.bitsplit.gguf");
  ASSERT_TRUE(convert_model(**whole, converted, {}, nullptr, nullptr).is_ok());
  auto conv = open_weights(converted);
  ASSERT_TRUE(conv.is_ok());
  const auto conv_paths = split(**conv, dir.file("bible.bitsplit"), 3);
  auto conv_set = open_weights(conv_paths.at(0));
  ASSERT_TRUE(conv_set.is_ok()) << conv_set.status().message();
  const auto want = greedy(**conv, 24);
  EXPECT_EQ(want.size(), 24u);
  EXPECT_EQ(greedy(**conv_set, 24), want);
}

}  // namespace
}  // namespace bitsplit
