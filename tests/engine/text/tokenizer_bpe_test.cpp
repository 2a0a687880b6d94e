// Byte-level BPE behaviour: merge order, pre-tokenizer regexes, special tokens, metadata errors,
// and fuzzing (random bytes never crash; valid UTF-8 round-trips) on every shared vocabulary.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "../../../engine/text/tokenizer_bpe.h"
#include "../../../engine/text/tokenizer_pretok.h"
#include "bitsplit/gguf.h"
#include "bitsplit/tokenizer.h"
#include "test_paths.h"
#include "tokenizer_testing.h"

namespace bitsplit {
namespace {

using gguf::Value;

// Byte-level characters of a UTF-8 string ("Ġ" for a space, ...).
std::string mapped(std::string_view text) {
  std::string out;
  for (unsigned char c : text) out += gpt2_byte_to_unicode()[c];
  return out;
}

// A byte-level vocabulary: the 256 byte characters, the given merges (and their results), a
// control token and a user-defined one.
gguf::Metadata small_metadata(const std::vector<std::string>& merges, const std::string& pre = "gpt-2",
                              const std::vector<std::string>& extra_tokens = {}) {
  return testing::byte_level_bpe_metadata(merges, pre, extra_tokens);
}

std::unique_ptr<Tokenizer> make(const gguf::Metadata& m) {
  auto t = Tokenizer::from_metadata(m);
  BITSPLIT_CHECK(t.is_ok(), t.status().message());
  return std::move(*t);
}

std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.vocab().tokens[size_t(id)]);
  return out;
}

std::vector<std::string> split(const std::vector<std::string>& patterns, std::string_view text) {
  auto pre = PreTokenizer::compile(patterns);
  BITSPLIT_CHECK(pre.is_ok(), pre.status().message());
  std::vector<std::string_view> parts;
  pre->split(text, parts);
  return {parts.begin(), parts.end()};
}

using Strings = std::vector<std::string>;

TEST(BpeTokenizer, MergesLowestRankFirstAndLeftmostOnTies) {
  auto t = make(small_metadata({"h e", "l l", "he ll", "hell o", "a a", "b c", "a b"}));
  EXPECT_EQ(pieces(*t, t->encode("hello", {.add_special = false})), Strings{"hello"});
  // "a a" (rank 4) applies to the leftmost pair first.
  EXPECT_EQ(pieces(*t, t->encode("aaa", {.add_special = false})), (Strings{"aa", "a"}));
  // "b c" (rank 5) beats "a b" (rank 6), and "a bc" is not a merge.
  EXPECT_EQ(pieces(*t, t->encode("abc", {.add_special = false})), (Strings{"a", "bc"}));
  // Pieces never merge across the pre-tokenizer's split: " hello" is "Ġ" + "hello" here.
  EXPECT_EQ(pieces(*t, t->encode(" hello hello", {.add_special = false})),
            (Strings{mapped(" "), "hello", mapped(" "), "hello"}));
  EXPECT_EQ(t->decode(t->encode(" hello hello")), " hello hello");
}

TEST(BpeTokenizer, LinearAndHeapMergesAgree) {
  // The same vocabulary with every word merged by linear scan, and by heap.
  std::mt19937 rng(3);
  std::vector<std::string> merges;
  std::vector<std::string> known = {"a", "b", "c", "d"};
  for (int i = 0; i < 60; ++i) {
    const std::string& l = known[rng() % known.size()];
    const std::string& r = known[rng() % known.size()];
    if (l.size() + r.size() > 6) continue;
    const std::string joined = l + r;
    if (std::find(known.begin(), known.end(), joined) != known.end()) continue;
    merges.push_back(l + " " + r);
    known.push_back(joined);
  }
  Vocabulary v;
  v.family = TokenizerFamily::kBytePairEncoding;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(gpt2_byte_to_unicode()[size_t(b)]);
  for (size_t i = 4; i < known.size(); ++i) v.tokens.push_back(known[i]);
  for (const std::string& m : merges) v.merges.emplace_back(m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1));
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < v.tokens.size(); ++i) v.token_to_id.emplace(v.tokens[i], int32_t(i));
  v.add_space_prefix = false;
  auto linear = BpeTokenizer::create(v, {.patterns = {}, .linear_merge_limit = 1 << 30});
  auto heap = BpeTokenizer::create(v, {.patterns = {}, .linear_merge_limit = 0});
  ASSERT_TRUE(linear.is_ok() && heap.is_ok());
  for (int c = 0; c < 3000; ++c) {
    std::string word(1 + rng() % 80, 'a');
    for (char& ch : word) ch = char('a' + rng() % 5);  // 'e' has no merges
    ASSERT_EQ((*linear)->encode(word), (*heap)->encode(word)) << word;
  }
}

TEST(BpeTokenizer, IgnoreMergesTakesWholeTokensForLlama3) {
  const auto m3 = small_metadata({"a b"}, "llama-bpe", {"abc"});
  auto llama3 = make(m3);
  EXPECT_EQ(pieces(*llama3, llama3->encode("abc", {.add_special = false})), Strings{"abc"});
  EXPECT_TRUE(llama3->vocab().add_bos) << "llama.cpp adds BOS for llama3 vocabularies unless the key says no";
  auto gpt2 = make(small_metadata({"a b"}, "gpt-2", {"abc"}));
  EXPECT_EQ(pieces(*gpt2, gpt2->encode("abc", {.add_special = false})), (Strings{"ab", "c"}));
  EXPECT_FALSE(gpt2->vocab().add_bos);
  EXPECT_EQ(gpt2->encode("ab"), gpt2->encode("ab", {.add_special = false}));
  auto m = small_metadata({"a b"}, "gpt-2");
  m.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  auto with_bos = make(m);
  EXPECT_EQ(with_bos->encode("ab").front(), with_bos->vocab().bos);
}

TEST(BpeTokenizer, SpecialAndUserDefinedTokens) {
  auto t = make(small_metadata({"h e"}));
  const int32_t eot = t->vocab().find("<|endoftext|>"), user = t->vocab().find("<|user|>");
  const auto plain = t->encode("he<|endoftext|>", {.add_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(t->decode(plain), "he<|endoftext|>");
  const auto special = t->encode("he<|endoftext|>he", {.add_special = false, .parse_special = true});
  EXPECT_EQ(pieces(*t, special), (Strings{"he", "<|endoftext|>", "he"}));
  EXPECT_EQ(t->decode(special), "hehe");
  EXPECT_EQ(t->decode(special, /*render_special=*/true), "he<|endoftext|>he");
  // User-defined tokens are matched even without parse_special and render as their text.
  const auto u = t->encode("x<|user|>", {.add_special = false});
  EXPECT_EQ(u.back(), user);
  EXPECT_EQ(t->decode(u), "x<|user|>");
  // Long texts go through the byte-pair / prefix tables that skip absent special tokens.
  std::string filler;
  while (filler.size() < 6000) filler += "he said hello. ";
  std::vector<int32_t> expected = t->encode(filler, {.add_special = false});
  expected.push_back(user);
  for (int32_t id : t->encode(filler, {.add_special = false})) expected.push_back(id);
  expected.push_back(eot);
  expected.push_back(user);
  const std::string long_text = filler + "<|user|>" + filler + "<|endoftext|><|user|>";
  EXPECT_EQ(t->encode(long_text, {.add_special = false, .parse_special = true}), expected);
}

TEST(BpeTokenizer, DescribeNamesTheFamily) {
  auto t = make(small_metadata({"h e"}, "qwen2"));
  const std::string d = t->describe();
  EXPECT_NE(d.find("gpt2 (byte-level BPE, pre-tokenizer qwen2, 1 merges)"), std::string::npos) << d;
  EXPECT_EQ(d.find("SentencePiece"), std::string::npos) << d;
}

TEST(BpeTokenizer, BadMetadataIsReported) {
  auto m = small_metadata({"h e"}, "no-such-pre");
  auto r = Tokenizer::from_metadata(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.pre: pre-tokenizer 'no-such-pre' is not supported"),
            std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("llama-bpe"), std::string::npos) << "the error lists what is supported";
  m = small_metadata({"h e"});
  m.set("tokenizer.ggml.merges", Value::string_array({"he"}));
  EXPECT_NE(Tokenizer::from_metadata(m).status().message().find("merges[0] = 'he' is not two tokens"),
            std::string::npos);
  gguf::Metadata no_merges;
  no_merges.set("tokenizer.ggml.model", Value::string("gpt2"));
  no_merges.set("tokenizer.ggml.tokens", Value::string_array({"a", "b"}));
  EXPECT_NE(Tokenizer::from_metadata(no_merges).status().message().find("tokenizer.ggml.merges is missing"),
            std::string::npos);
  m = small_metadata({"h e"});
  m.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  m.set("tokenizer.ggml.bos_token_id", Value::u32(UINT32_MAX));
  EXPECT_NE(Tokenizer::from_metadata(m).status().message().find("bos_token_id is not set"), std::string::npos);
}

TEST(PreTokenizer, Gpt2PatternSplitsLikeLlamaCpp) {
  const Strings gpt2 = {kGpt2Pattern};
  EXPECT_EQ(split(gpt2, "Hello world"), (Strings{"Hello", " world"}));
  // \s+(?!\S): the last space of a run stays with the word after it; a run at the end is whole.
  EXPECT_EQ(split(gpt2, "a   b  "), (Strings{"a", "  ", " b", "  "}));
  EXPECT_EQ(split(gpt2, "I'll 42x"), (Strings{"I", "'ll", " 42", "x"}));
  EXPECT_EQ(split(gpt2, "\t\tx"), (Strings{"\t", "\t", "x"}));
  // U+180E is not White_Space (Unicode >= 6.3), though PCRE2's own \s says it is.
  EXPECT_EQ(split({R"(\s+)"}, "a\xe1\xa0\x8e" "b\xc2\xa0" "c"), (Strings{"a\xe1\xa0\x8e" "b", "\xc2\xa0", "c"}));
  // Patterns apply in sequence, each to the pieces of the one before (starcoder: digits first).
  EXPECT_EQ(split({R"(\p{N})", kGpt2Pattern}, " 123 ab"), (Strings{" ", "1", "2", "3", " ab"}));
}

TEST(PreTokenizer, RegexEdgeCases) {
  // `$` is the end of the piece (ECMAScript / Rust), not "before a final newline".
  EXPECT_EQ(split({R"(\s+$)"}, "a \n"), (Strings{"a", " \n"}));
  EXPECT_EQ(split({R"([\r\n])", R"(\s+$)"}, "a  \nb"), (Strings{"a", "  ", "\n", "b"}));
  // An empty match splits the gap before it, as std::regex_iterator does in llama.cpp.
  EXPECT_EQ(split({"(?=(\\d{3})+(?!\\d))"}, "1234567"), (Strings{"1", "234", "567"}));
  // \Q...\E and classes with \s inside survive the whitespace rewrite.
  EXPECT_EQ(split({R"(\Q.\s\E|[x\s]+)"}, "a.\\sb x c"), (Strings{"a", ".\\s", "b", " x ", "c"}));
  auto bad = PreTokenizer::compile({"(unclosed"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("does not compile"), std::string::npos);
}

TEST(PreTokenizer, InvalidUtf8BytesArePiecesOfTheirOwn) {
  const Strings gpt2 = {kGpt2Pattern};
  EXPECT_EQ(split(gpt2, "ab\xff" "cd"), (Strings{"ab", "\xff", "cd"}));
  // Truncated, overlong and surrogate sequences are invalid byte by byte.
  EXPECT_EQ(split(gpt2, "x\xe4\xb8"), (Strings{"x", "\xe4", "\xb8"}));
  EXPECT_EQ(split(gpt2, "\xc0\xaf"), (Strings{"\xc0", "\xaf"}));
  EXPECT_EQ(split(gpt2, "\xed\xa0\x80"), (Strings{"\xed", "\xa0", "\x80"}));
  EXPECT_EQ(valid_utf8_prefix("\xf4\x8f\xbf\xbf"), 4u);
  EXPECT_EQ(valid_utf8_prefix("\xf4\x90\x80\x80"), 0u);
}

TEST(PreTokenizer, LongRunsDoNotExhaustTheMatcher) {
  for (const char* pre : {"gpt-2", "llama3", "qwen2", "deepseek-llm", "default"}) {
    auto spec = pretokenizer_spec(pre);
    ASSERT_TRUE(spec.is_ok());
    for (const std::string& run : {std::string(200000, ' '), std::string(200000, 'a'), std::string(200000, '7'),
                                   std::string(100000, '\n') + "x", std::string(100000, '!')}) {
      auto p = split(spec->patterns, run);
      size_t total = 0;
      for (const auto& s : p) total += s.size();
      EXPECT_EQ(total, run.size()) << pre;
    }
  }
}

// ---- every shared vocabulary -------------------------------------------------------------

const char* const kVocabs[] = {"gpt-2", "deepseek-coder", "deepseek-llm", "falcon", "mpt",
                               "refact", "starcoder", "llama-spm", "phi-3"};

std::unique_ptr<Tokenizer> shared_tokenizer(const std::string& name) {
  const std::string shared = testing::shared_dir();
  if (shared.empty()) return nullptr;
  auto f = gguf::File::open(shared + "/models/vocab/ggml-vocab-" + name + ".gguf");
  if (!f) return nullptr;
  auto t = Tokenizer::from_metadata(f->metadata());
  return t ? std::move(*t) : nullptr;
}

using testing::append_utf8;

std::string random_utf8(std::mt19937& rng) {
  std::string s;
  const int n = int(rng() % 24);
  for (int i = 0; i < n; ++i) {
    uint32_t cp;
    switch (rng() % 6) {
      case 0: cp = uint32_t(" \t\n'abcXYZ019.,!?"[rng() % 17]); break;
      case 1: cp = 0x20 + rng() % 0x5f; break;
      case 2: cp = 0x80 + rng() % 0x780; break;
      case 3: cp = 0x3000 + rng() % 0x7000; break;  // CJK and neighbours
      case 4: cp = 0x800 + rng() % (0xd800 - 0x800); break;
      default: cp = 0x10000 + rng() % 0x100000; break;
    }
    append_utf8(s, cp);
  }
  return s;
}

// Every supported pre-tokenizer, on a vocabulary with all 256 byte characters: any bytes at
// all (invalid UTF-8 included) encode without crashing and decode back unchanged.
TEST(BpeFuzz, EveryPreTokenizerRoundTripsRandomBytes) {
  std::vector<std::string> names;
  const std::string list = supported_pretokenizers();
  for (size_t pos = 0; pos < list.size();) {
    const size_t comma = std::min(list.find(", ", pos), list.size());
    names.push_back(list.substr(pos, comma - pos));
    pos = comma + 2;
  }
  ASSERT_GE(names.size(), 10u);
  for (const std::string& name : names) {
    auto t = make(small_metadata({"h e", "l l", "he ll", "hell o", "\xc4\xa0 hello", "1 2", "12 3"}, name));
    std::mt19937 rng(31);
    for (int c = 0; c < 300; ++c) {
      std::string s(rng() % 40, '\0');
      static constexpr std::string_view kAlphabet = " \t\n\r'hello123!.,\xc3\xa9\xe4\xb8\xad\xf0\x9f\xa6\x99\xe2\x80\x83";
      for (char& ch : s) ch = c % 2 == 0 ? char(rng() % 256) : kAlphabet[rng() % kAlphabet.size()];
      const auto ids = t->encode(s, {.add_special = false, .parse_special = c % 3 == 0});
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t->vocab().size()) << name;
      if (c % 3 != 0) {
        ASSERT_EQ(t->decode(ids), s) << name << " case " << c;
      }
    }
  }
}

TEST(BpeFuzz, RandomBytesNeverCrashOnAnyVocabulary) {
  BITSPLIT_REQUIRE_FILE(testing::shared_dir());
  for (const char* name : kVocabs) {
    auto t = shared_tokenizer(name);
    ASSERT_NE(t, nullptr) << name;
    std::mt19937 rng(21);
    for (int c = 0; c < 600; ++c) {
      std::string s(rng() % 48, '\0');
      static constexpr std::string_view kAlphabet = " a\xc3\xa9\xe4\xb8\xad<|>\n\xf0\x9f\x98\x80\xff";
      for (char& ch : s) ch = c % 3 == 0 ? char(rng() % 256) : kAlphabet[rng() % kAlphabet.size()];
      const auto ids = t->encode(s, {.add_special = c % 2 == 0, .parse_special = c % 4 < 2});
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t->vocab().size()) << name;
      // The stream decoder passes every byte through, only later.
      Utf8StreamDecoder stream;
      std::string streamed, joined;
      for (int32_t id : ids) {
        streamed += stream.push(t->token_to_piece(id));
        joined += t->token_to_piece(id);
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, joined) << name;
      EXPECT_LE(t->decode(ids).size(), joined.size()) << name;
    }
  }
}

// Byte-level BPE covers every byte its vocabulary has a character for, so valid UTF-8 made of
// such bytes comes back unchanged (falcon, mpt, refact, starcoder lack a few byte characters).
TEST(BpeFuzz, ValidUtf8RoundTripsOnEveryVocabulary) {
  BITSPLIT_REQUIRE_FILE(testing::shared_dir());
  for (const char* name : kVocabs) {
    auto t = shared_tokenizer(name);
    ASSERT_NE(t, nullptr) << name;
    const bool byte_level = t->vocab().family == TokenizerFamily::kBytePairEncoding;
    std::array<bool, 256> covered{};
    for (int b = 0; b < 256; ++b) covered[size_t(b)] = !byte_level || t->vocab().find(gpt2_byte_to_unicode()[size_t(b)]) >= 0;
    std::mt19937 rng(22);
    int checked = 0;
    for (int c = 0; c < 1500; ++c) {
      const std::string s = random_utf8(rng);
      if (!std::all_of(s.begin(), s.end(), [&](char ch) { return covered[static_cast<unsigned char>(ch)]; })) continue;
      ++checked;
      ASSERT_EQ(t->decode(t->encode(s, {.add_special = false})), s) << name << " case " << c;
    }
    EXPECT_GT(checked, 500) << name;
  }
}

TEST(BpeFuzz, Gpt2RoundTripsEvenInvalidUtf8) {
  auto t = shared_tokenizer("gpt-2");
  if (t == nullptr) GTEST_SKIP() << "test data not found: ../shared/models/vocab/ggml-vocab-gpt-2.gguf";
  std::mt19937 rng(23);
  for (int c = 0; c < 2000; ++c) {
    std::string s(rng() % 40, '\0');
    for (char& ch : s) ch = char(rng() % 256);
    ASSERT_EQ(t->decode(t->encode(s, {.add_special = false})), s) << "case " << c;
  }
  // Large, repetitive inputs go through the long-word (heap) merge path and the word cache.
  std::string big;
  for (int i = 0; i < 2000; ++i) big += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + "  # 注释 🦙\n";
  big += std::string(5000, 'z') + std::string(3000, ' ') + std::string(4000, '9');
  EXPECT_EQ(t->decode(t->encode(big, {.add_special = false})), big);
}

// Bytes that cannot occur in UTF-8 (and a sequence cut short) are never dropped: a byte-level
// vocabulary with every byte character (gpt-2) gives them back unchanged; one trained without the
// bytes UTF-8 never uses (starcoder, as SmolLM2) encodes such a byte as U+FFFD, never as its
// unknown token (<|endoftext|> there, a control token) and never as nothing.
TEST(BpeTokenizer, BytesOutsideUtf8AreKept) {
  auto gpt2 = shared_tokenizer("gpt-2");
  auto starcoder = shared_tokenizer("starcoder");
  if (gpt2 == nullptr || starcoder == nullptr) GTEST_SKIP() << "test data not found: ../shared/models/vocab";
  const std::string replaced = "\xef\xbf\xbd";  // U+FFFD
  const struct {
    std::string text, starcoder_decoded;
  } cases[] = {
      {"a\xfe" "b", "a" + replaced + "b"},
      {"\xff", replaced},
      {"\xc3", "\xc3"},  // a lead byte without its continuation: starcoder has its character
      {"ok\xe2\x82", "ok\xe2\x82"},
      {"\xfe\xff x", replaced + replaced + " x"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.text));
    EXPECT_EQ(gpt2->decode(gpt2->encode(c.text, {.add_special = false})), c.text);
    const auto ids = starcoder->encode(c.text, {.add_special = false});
    EXPECT_EQ(starcoder->decode(ids), c.starcoder_decoded);
    for (int32_t id : ids) EXPECT_NE(starcoder->vocab().types[size_t(id)], TokenType::kControl) << id;
  }
}

TEST(BpeTokenizer, Gpt2SpecialTokensAndDescribe) {
  auto t = shared_tokenizer("gpt-2");
  if (t == nullptr) GTEST_SKIP() << "test data not found: ../shared/models/vocab/ggml-vocab-gpt-2.gguf";
  EXPECT_EQ(t->encode("a<|endoftext|>", {.add_special = true, .parse_special = true}), (std::vector<int32_t>{64, 50256}));
  EXPECT_NE(t->encode("<|endoftext|>").size(), 1u);
  EXPECT_EQ(t->token_to_piece(50256), "");
  EXPECT_EQ(t->token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(t->vocab().eos, 50256);
  EXPECT_FALSE(t->vocab().add_bos);
  EXPECT_NE(t->describe().find("byte-level BPE, pre-tokenizer gpt-2, 50000 merges"), std::string::npos) << t->describe();
  // A character split across tokens reaches a terminal whole: every prefix streamed out is
  // valid UTF-8.
  const std::string text = "天～🦙";
  const auto ids = t->encode(text, {.add_special = false});
  ASSERT_GT(ids.size(), 3u) << "the emoji needs several byte tokens";
  Utf8StreamDecoder stream;
  std::string so_far;
  for (int32_t id : ids) {
    so_far += stream.push(t->token_to_piece(id));
    EXPECT_TRUE(text.starts_with(so_far));
    for (size_t i = 0; i < so_far.size();) {
      const size_t len = valid_utf8_prefix(std::string_view(so_far).substr(i));
      ASSERT_GT(len, 0u) << "half a character was streamed";
      i += len;
    }
  }
  EXPECT_EQ(so_far + stream.flush(), text);
  EXPECT_EQ(t->decode(ids), text);
}

}  // namespace
}  // namespace bitsplit
