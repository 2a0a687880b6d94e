// A delta file against a converted base: the base is identified by the original it was made
// from (bitsplit.source_sha256), a converted file is not a valid input to make_delta. The rest of
// the delta files' checks: tests/engine/format/delta_format_test.cpp.
#include <gtest/gtest.h>

#include "bitsplit/convert.h"
#include "bitsplit/delta_format.h"
#include "delta_testing.h"
#include "gguf_testing.h"

namespace bitsplit {
namespace {

using testing::DeltaFileTest;

TEST_F(DeltaFileTest, BaseIdentityChecksOriginalAndConvertedBases) {
  testing::TinyModelSpec spec;
  spec.embd = 64;
  spec.ff = 128;
  const std::string base_path = dir_.file("base.gguf"), ft_path = dir_.file("ft.gguf"), out = dir_.file("v.delta.gguf");
  ASSERT_TRUE(testing::make_tiny_model(spec).write_file(base_path).is_ok());
  auto base = open_weights(base_path);
  ASSERT_TRUE(finetune(**base, 9).write_file(ft_path).is_ok());
  auto ft = open_weights(ft_path);
  ASSERT_TRUE(make_delta(**base, **ft, out, {}, nullptr).is_ok());
  auto d = open_delta(out);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_TRUE(check_delta_base(*d, **base).is_ok());

  const Status wrong = check_delta_base(*d, **ft);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.message().find(d->base_sha256), std::string::npos) << wrong.message();
  EXPECT_NE(wrong.message().find(*(*ft)->content_sha256()), std::string::npos) << wrong.message();

  // A converted base is identified by the original it was made from.
  ASSERT_TRUE(convert_model(**base, dir_.file("base.split.gguf"), {}, nullptr, nullptr).is_ok());
  ASSERT_TRUE(convert_model(**ft, dir_.file("ft.split.gguf"), {}, nullptr, nullptr).is_ok());
  auto base_split = open_weights(dir_.file("base.split.gguf"));
  auto ft_split = open_weights(dir_.file("ft.split.gguf"));
  EXPECT_TRUE(check_delta_base(*d, **base_split).is_ok());
  const Status wrong_split = check_delta_base(*d, **ft_split);
  ASSERT_FALSE(wrong_split.is_ok());
  EXPECT_NE(wrong_split.message().find("bitsplit.source_sha256"), std::string::npos) << wrong_split.message();

  // A converted file is not a valid input to make_delta; an ordinary model is not a delta.
  EXPECT_FALSE(make_delta(**base_split, **ft, dir_.file("x.gguf"), {}, nullptr).is_ok());
  const auto not_delta = open_delta(base_path);
  ASSERT_FALSE(not_delta.is_ok());
  EXPECT_NE(not_delta.status().message().find("not a delta file"), std::string::npos);
}

}  // namespace
}  // namespace bitsplit
