// Split GGUF sets: a model written as 3 parts opens as one source that runs exactly like the
// single file (original and converted models); a missing part, a part of another set, a later
// part given first or a renamed first part are errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>

#include "bitsplit/convert.h"
#include "bitsplit/session.h"
#include "bitsplit/split_gguf.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

const std::string kBase = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
const std::string kOther = BITSPLIT_SOURCE_DIR "/tests/models/bible-devil.gguf";

// Writes `source` as a split set of `parts` parts (by tensor count) under prefix; returns the paths.
std::vector<std::string> split(const WeightSource& source, const std::string& prefix, int parts) {
  gguf::Writer w;
  for (const auto& [key, value] : source.metadata().entries()) w.metadata().set(key, value);
  for (const auto& t : source.tensors()) EXPECT_TRUE(w.add_tensor_info(t.name, t.type, t.dims).is_ok());
  const SplitLimits limits{.max_tensors = (source.tensors().size() + size_t(parts) - 1) / size_t(parts)};
  auto paths = write_split_set(w, prefix, limits, [&](size_t i, const gguf::TensorInfo&) -> Result<std::vector<uint8_t>> {
    BITSPLIT_ASSIGN_OR_RETURN(auto bytes, source.raw_bytes(source.tensors()[i]));
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  });
  EXPECT_TRUE(paths.is_ok()) << paths.status().message();
  return paths ? *paths : std::vector<std::string>{};
}

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

class SplitGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBase)) GTEST_SKIP() << kBase << " is missing";
  }
  testing::TempDir dir{"split-gguf"};
};

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

TEST_F(SplitGguf, BrokenSetsAreErrorsNamingThePart) {
  auto base = open_weights(kBase);
  auto other = open_weights(kOther);
  ASSERT_TRUE(base.is_ok() && other.is_ok());
  const auto paths = split(**base, dir.file("m"), 3);
  const auto other_paths = split(**other, dir.file("o"), 3);
  ASSERT_EQ(paths.size(), 3u);
  ASSERT_EQ(other_paths.size(), 3u);

  // A later part given first.
  auto r = open_weights(paths[1]);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("is part 2 of 3"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("m-00001-of-00003.gguf"), std::string::npos) << r.status().message();

  // A part of another model, under the right name (same count, same tensor names and shapes).
  fs::copy_file(paths[1], dir.file("saved"));
  fs::copy_file(other_paths[1], paths[1], fs::copy_options::overwrite_existing);
  r = open_weights(paths[0]);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("m-00002-of-00003.gguf: does not belong"), std::string::npos) << r.status().message();
  fs::copy_file(dir.file("saved"), paths[1], fs::copy_options::overwrite_existing);
  EXPECT_TRUE(open_weights(paths[0]).is_ok());

  // A missing part.
  fs::rename(paths[2], dir.file("away"));
  r = open_weights(paths[0]);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("part 3 of 3"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("m-00003-of-00003.gguf"), std::string::npos) << r.status().message();
  fs::rename(dir.file("away"), paths[2]);

  // The first part renamed: the others cannot be found.
  fs::copy_file(paths[0], dir.file("renamed.gguf"));
  r = open_weights(dir.file("renamed.gguf"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("PREFIX-00001-of-00003.gguf"), std::string::npos) << r.status().message();
}

TEST(SplitGgufNames, FollowGgufSplit) {
  EXPECT_EQ(split_part_path("/m/x", 0, 3), "/m/x-00001-of-00003.gguf");
  auto n = parse_split_name("/m/x-y-00002-of-00010.gguf");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->prefix, "/m/x-y");
  EXPECT_EQ(n->index, 1);
  EXPECT_EQ(n->count, 10);
  EXPECT_FALSE(parse_split_name("/m/x-00000-of-00003.gguf").has_value());
  EXPECT_FALSE(parse_split_name("/m/x-00004-of-00003.gguf").has_value());
  EXPECT_FALSE(parse_split_name("/m/x.gguf").has_value());
}

}  // namespace
}  // namespace bitsplit
