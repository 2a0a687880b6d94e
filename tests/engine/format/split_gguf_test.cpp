// Split GGUF sets: a missing part, a part of another set, a later part given first or a renamed
// first part are errors naming the file; part names follow gguf-split. That a set opens as one
// source that runs exactly like the single file: tests/engine/decode/split_gguf_decoding_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "bitsplit/split_gguf.h"
#include "split_gguf_testing.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

const std::string kBase = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
const std::string kOther = BITSPLIT_SOURCE_DIR "/tests/models/bible-devil.gguf";

using testing::split;
using testing::SplitGguf;

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
