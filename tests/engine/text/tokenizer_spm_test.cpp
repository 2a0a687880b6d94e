// SentencePiece tokenizer behaviour on small hand-made vocabularies and on stories260K.
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/tokenizer.h"
#include "tokenizer_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using gguf::Value;

// A vocabulary with byte fallback for every byte and a few merges.
std::unique_ptr<Tokenizer> small_tokenizer(bool add_bos = true) {
  gguf::Metadata m = testing::spm_byte_fallback_metadata(
      {{"\xe2\x96\x81", -1}, {"h", -2}, {"e", -2}, {"l", -2}, {"o", -2}, {"w", -2}, {"r", -2}, {"d", -2},
       {"he", -3}, {"ll", -3}, {"llo", -4}, {"hello", -5}, {"\xe2\x96\x81hello", -6}, {"\xe2\x96\x81w", -7},
       {"or", -8}, {"\xe2\x96\x81wor", -9}, {"ld", -10}, {"\xc3\xa9", -11}});
  m.set("tokenizer.ggml.add_bos_token", Value::boolean(add_bos));
  auto t = Tokenizer::from_metadata(m);
  BITSPLIT_CHECK(t.is_ok(), t.status().message());
  return std::move(*t);
}

std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.vocab().tokens[size_t(id)]);
  return out;
}

TEST(SpmTokenizer, MergesByScoreWithLeadingSpaceAndBos) {
  auto t = small_tokenizer();
  const auto ids = t->encode("hello world");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(pieces(*t, {ids.begin() + 1, ids.end()}),
            (std::vector<std::string>{"\xe2\x96\x81hello", "\xe2\x96\x81wor", "ld"}));
  EXPECT_EQ(t->decode(ids), "hello world");
}

TEST(SpmTokenizer, ByteFallbackForUnknownCharacters) {
  auto t = small_tokenizer(false);
  const std::string text = "h\xe4\xb8\xad";  // 'h' + U+4E2D, which has no piece
  const auto ids = t->encode(text);
  EXPECT_EQ(pieces(*t, ids), (std::vector<std::string>{"\xe2\x96\x81", "h", "<0xE4>", "<0xB8>", "<0xAD>"}));
  EXPECT_EQ(t->decode(ids), text);
}

TEST(SpmTokenizer, SpecialTokensOnlyWhenAsked) {
  auto t = small_tokenizer(false);
  const auto plain = t->encode("<s>hello");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0) << "control text must not become a control token";
  const auto special = t->encode("<s>hello", {.add_special = false, .parse_special = true});
  ASSERT_FALSE(special.empty());
  EXPECT_EQ(special[0], 1);
  EXPECT_EQ(pieces(*t, {special.begin() + 1, special.end()}), (std::vector<std::string>{"\xe2\x96\x81hello"}));
  // User-defined tokens are always matched (as llama.cpp does).
  const auto user = t->encode("hello<|user|>", {.add_special = false});
  EXPECT_EQ(user.back(), 3);
  EXPECT_EQ(t->token_to_piece(1), "");
  EXPECT_EQ(t->token_to_piece(1, /*render_special=*/true), "<s>");
}

// EncodeOptions::special_ranges (a chat prompt's template markup): control text not wholly inside
// them stays plain text, exactly as without parse_special; user-defined tokens are tokens anyway.
TEST(SpmTokenizer, SpecialTokensOnlyInsideTheGivenRanges) {
  auto t = small_tokenizer(false);
  const std::string text = "<s>hello<s>world<|user|>";  // the second <s> is bytes [8, 11)
  auto with_ranges = [&](const std::vector<std::pair<size_t, size_t>>& ranges) {
    return t->encode(text, {.add_special = false, .parse_special = true, .special_ranges = &ranges});
  };
  std::vector<int32_t> first_only = {1};
  for (int32_t id : t->encode("hello<s>world<|user|>", {.add_special = false})) first_only.push_back(id);
  EXPECT_EQ(with_ranges({{0, 5}}), first_only);
  EXPECT_EQ(with_ranges({{0, 3}, {9, 24}}), first_only) << "a range holding part of a control token's text";
  EXPECT_EQ(with_ranges({{0, 3}, {8, 11}}), t->encode(text, {.add_special = false, .parse_special = true}));
  EXPECT_EQ(with_ranges({{0, text.size()}}), t->encode(text, {.add_special = false, .parse_special = true}));
  EXPECT_EQ(with_ranges({}), t->encode(text, {.add_special = false}));
}

TEST(SpmTokenizer, EmptyAndWhitespaceInputs) {
  auto t = small_tokenizer();
  EXPECT_EQ(t->encode(""), std::vector<int32_t>{1});
  EXPECT_TRUE(t->encode("", {.add_special = false}).empty());
  EXPECT_EQ(t->decode(t->encode("  ")), "  ");
}

TEST(SpmTokenizer, RandomBytesNeverCrash) {
  auto t = small_tokenizer(false);
  std::mt19937 rng(11);
  for (int c = 0; c < 2000; ++c) {
    std::string s(rng() % 40, '\0');
    for (char& ch : s) ch = char(rng() % 256);
    const auto ids = t->encode(s, {.add_special = false, .parse_special = c % 2 == 0});
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t->vocab().size());
    (void)t->decode(ids);
  }
}

using testing::append_utf8;

// With byte fallback for every byte, valid UTF-8 always comes back unchanged (invalid UTF-8
// need not: a broken lead byte swallows the bytes of the escaped space after it).
TEST(SpmTokenizer, ValidUtf8RoundTrips) {
  auto t = small_tokenizer(false);
  std::mt19937 rng(12);
  for (int c = 0; c < 2000; ++c) {
    std::string s;
    const int n = int(rng() % 20);
    for (int i = 0; i < n; ++i) {
      uint32_t cp;
      switch (rng() % 4) {
        case 0: cp = uint32_t(" abcdehlorw"[rng() % 11]); break;
        case 1: cp = 0x80 + rng() % 0x780; break;
        case 2: cp = 0x800 + rng() % (0xd800 - 0x800); break;
        default: cp = 0x10000 + rng() % 0x100000; break;
      }
      append_utf8(s, cp);
    }
    const auto ids = t->encode(s, {.add_special = false});
    ASSERT_EQ(t->decode(ids), s) << "case " << c;
  }
}

TEST(SpmTokenizer, BadMetadataIsReported) {
  gguf::Metadata m;
  auto missing = Tokenizer::from_metadata(m);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("tokenizer.ggml.model"), std::string::npos);
  m.set("tokenizer.ggml.model", Value::string("bert"));
  EXPECT_NE(Tokenizer::from_metadata(m).status().message().find("WordPiece) is not supported"), std::string::npos);
  m.set("tokenizer.ggml.model", Value::string("llama"));
  m.set("tokenizer.ggml.tokens", Value::string_array({"a", "b"}));
  m.set("tokenizer.ggml.scores", Value::f32_array({1.0f}));
  EXPECT_NE(Tokenizer::from_metadata(m).status().message().find("1 entries for 2 tokens"), std::string::npos);
  m.set("tokenizer.ggml.scores", Value::f32_array({1.0f, 2.0f}));
  m.set("tokenizer.ggml.bos_token_id", Value::u32(9));
  EXPECT_NE(Tokenizer::from_metadata(m).status().message().find("outside the vocabulary"), std::string::npos);
}

TEST(Utf8StreamDecoder, HoldsBackIncompleteCharacters) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("a\xe4"), "a");
  EXPECT_EQ(d.push("\xb8"), "");
  EXPECT_EQ(d.push("\xad!"), "\xe4\xb8\xad!");
  EXPECT_EQ(d.push("\xf0\x9f"), "");
  EXPECT_EQ(d.push("\x98\x80"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(d.push("\xff"), "\xff");  // not UTF-8 at all: passed through, never stuck
  EXPECT_EQ(d.push("\xc3"), "");
  EXPECT_EQ(d.flush(), "\xc3");
}

TEST(SpmTokenizer, Stories260KPromptMatchesLlamaCpp) {
  const std::string shared = testing::shared_dir();
  const std::string path = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.is_ok());
  auto t = Tokenizer::from_metadata(f->metadata());
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ((*t)->encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
}

}  // namespace
}  // namespace bitsplit
