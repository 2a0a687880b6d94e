// Hugging Face tokenizer.json on small hand-written files: byte-level and SentencePiece-style
// BPE, added tokens, tokenizer_config.json, and the errors for what is not supported.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "bitsplit/tokenizer.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;

const std::string kSpace = "\xe2\x96\x81";  // "▁"

// GPT-2's byte characters, written out from the rule (bytes outside the printable ranges map
// to U+0100 onwards, in order).
std::string byte_char(int b) {
  static std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    auto utf8 = [](uint32_t cp) {
      std::string s;
      if (cp < 0x80) {
        s += char(cp);
      } else {
        s += char(0xc0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3f));
      }
      return s;
    };
    uint32_t next = 256;
    for (int i = 0; i < 256; ++i) {
      const bool self = (i >= 0x21 && i <= 0x7e) || (i >= 0xa1 && i <= 0xac) || (i >= 0xae && i <= 0xff);
      t[size_t(i)] = utf8(self ? uint32_t(i) : next++);
    }
    return t;
  }();
  return table[size_t(b)];
}

json byte_level_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const Strings extra = {"he", "ll", "hell", "hello", byte_char(' ') + "hello"};
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + int(i);
  json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", json::array({json::array({"h", "e"}), json::array({"l", "l"}), json::array({"he", "ll"}),
                                        json::array({"hell", "o"}), json::array({byte_char(' '), "hello"})})}};
  j["added_tokens"] = json::array({{{"id", 262}, {"content", "<|endoftext|>"}, {"special", true}},
                                   {{"id", 263}, {"content", "<tool>"}, {"special", false}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  return j;
}

Result<std::unique_ptr<Tokenizer>> load(const testing::TempDir& dir, const json& j) {
  const std::string path = dir.file("tokenizer.json");
  std::ofstream(path) << j.dump();
  return Tokenizer::from_hf_json(path);
}

std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.vocab().tokens[size_t(id)]);
  return out;
}

std::string error_of(const json& j) {
  testing::TempDir dir("hfjson-err");
  auto t = load(dir, j);
  return t.is_ok() ? std::string("(no error)") : t.status().message();
}

TEST(TokenizerJson, ByteLevelBpeWithAddedTokens) {
  testing::TempDir dir("hfjson");
  auto t = load(dir, byte_level_json());
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  const Tokenizer& tok = **t;
  EXPECT_EQ(pieces(tok, tok.encode("hello hello")), (Strings{"hello", byte_char(' ') + "hello"}));
  EXPECT_EQ(tok.vocab().size(), 264);
  EXPECT_EQ(tok.vocab().types[262], TokenType::kControl);
  EXPECT_EQ(tok.vocab().types[263], TokenType::kUserDefined);
  // Non-special added tokens are always split out; special ones with parse_special only.
  EXPECT_EQ(tok.encode("he<tool>").back(), 263);
  EXPECT_EQ(tok.encode("<|endoftext|>", {.parse_special = true}), std::vector<int32_t>{262});
  EXPECT_GT(tok.encode("<|endoftext|>").size(), 1u);
  EXPECT_EQ(tok.decode(tok.encode("héllo, wörld <tool>\n")), "héllo, wörld <tool>\n");
  EXPECT_FALSE(tok.vocab().add_bos);
  EXPECT_NE(tok.describe().find("tokenizer.json (byte-level BPE"), std::string::npos) << tok.describe();
}

TEST(TokenizerJson, TokenizerConfigNamesBosAndEos) {
  testing::TempDir dir("hfjson");
  std::ofstream(dir.file("tokenizer_config.json"))
      << json({{"add_bos_token", true}, {"bos_token", {{"content", "<|endoftext|>"}}}, {"eos_token", "<|endoftext|>"}})
             .dump();
  auto t = load(dir, byte_level_json());
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ((*t)->vocab().bos, 262);
  EXPECT_EQ((*t)->vocab().eos, 262);
  EXPECT_EQ((*t)->encode("he").front(), 262);
}

TEST(TokenizerJson, StringMergesSplitPatternsAndIdHoles) {
  json j = byte_level_json();
  j["model"]["merges"] = {"h e", "l l", "he ll", "hell o"};
  j["model"]["vocab"]["far"] = 300;  // ids 264..299 are unused
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Isolated"}},
                          {{"type", "Digits"}, {"individual_digits", true}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  testing::TempDir dir("hfjson");
  auto t = load(dir, j);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  // "." is a literal here, not "any character"; digits come one by one.
  EXPECT_EQ(pieces(**t, (*t)->encode("hello.hello42")), (Strings{"hello", ".", "hello", "4", "2"}));
  EXPECT_EQ((*t)->vocab().tokens[280], "[PAD280]");
  EXPECT_EQ((*t)->vocab().types[280], TokenType::kUnused);
}

TEST(TokenizerJson, SentencePieceStyleWithByteFallback) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const std::string& p : {kSpace, std::string("h"), std::string("i"), std::string("t"), std::string("e"),
                               std::string("r"), kSpace + "h", kSpace + "hi", kSpace + "t", kSpace + "th",
                               kSpace + "the", kSpace + "ther", kSpace + "there"}) {
    vocab[p] = next++;
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"unk_token", "<unk>"}, {"byte_fallback", true},
                {"merges", {kSpace + " h", kSpace + "h i", kSpace + " t", kSpace + "t h", kSpace + "th e",
                            kSpace + "the r", kSpace + "ther e"}}};
  j["added_tokens"] = json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                   {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "always"}, {"split", true}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  testing::TempDir dir("hfjson");
  auto t = load(dir, j);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  const Tokenizer& tok = **t;
  const auto ids = tok.encode("hi there\xc3\xa9");  // é has no piece: byte fallback
  EXPECT_EQ(pieces(tok, ids), (Strings{"<s>", kSpace + "hi", kSpace + "there", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(tok.decode(ids), "hi there\xc3\xa9");
  EXPECT_EQ(tok.vocab().unk, 0);
  EXPECT_EQ(tok.vocab().types[3 + 0x41], TokenType::kByte);
  EXPECT_NE(tok.describe().find("SentencePiece-style BPE with byte fallback"), std::string::npos) << tok.describe();

  // Malformed special_tokens entries (fuzz finding tokenizer_json/post-processor-special-token-
  // without-ids: a missing "ids" was read through const operator[], undefined behaviour) fall
  // back to the token's name; a SpecialToken that is not an object names no token.
  j["post_processor"]["special_tokens"] = {{"<s>", {{"no_ids", 1}}}, {"</s>", 7}};
  auto lenient = load(dir, j);
  ASSERT_TRUE(lenient.is_ok()) << lenient.status().message();
  EXPECT_EQ((*lenient)->vocab().bos, 1);
  j["post_processor"]["single"][0] = {{"SpecialToken", 5}};
  auto no_bos = load(dir, j);
  ASSERT_TRUE(no_bos.is_ok()) << no_bos.status().message();
  EXPECT_FALSE((*no_bos)->vocab().add_bos);
}

TEST(TokenizerJson, UnsupportedContentIsReported) {
  testing::TempDir dir("hfjson");
  auto missing = Tokenizer::from_hf_json(dir.file("nope.json"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  std::ofstream(dir.file("bad.json")) << "{ not json";
  EXPECT_NE(Tokenizer::from_hf_json(dir.file("bad.json")).status().message().find("not valid JSON"), std::string::npos);

  EXPECT_NE(error_of(json::object()).find("no \"model\" object"), std::string::npos);
  json j = byte_level_json();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(error_of(j).find("model.type 'Unigram' is not supported (supported: BPE)"), std::string::npos) << error_of(j);
  j = byte_level_json();
  j["model"]["merges"] = {"nospace"};
  EXPECT_NE(error_of(j).find("model.merges[0] = 'nospace' has no space"), std::string::npos) << error_of(j);
  j = byte_level_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(error_of(j).find("pre_tokenizer 'Whitespace' is not supported (supported: Sequence, ByteLevel"),
            std::string::npos) << error_of(j);
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Removed"}};
  EXPECT_NE(error_of(j).find("behavior 'Removed'"), std::string::npos) << error_of(j);
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(x"}}}, {"behavior", "Isolated"}},
                                           {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  EXPECT_NE(error_of(j).find("does not compile"), std::string::npos) << error_of(j);
  j["pre_tokenizer"] = nullptr;
  EXPECT_NE(error_of(j).find("without a ByteLevel pre-tokenizer"), std::string::npos) << error_of(j);
  j = byte_level_json();
  j["model"]["vocab"]["huge"] = 1 << 30;
  EXPECT_NE(error_of(j).find("token id 1073741824 is far beyond the"), std::string::npos) << error_of(j);
  // Below the absolute id limit but sparse: two entries must not pad out 16M tokens (a fuzzer's
  // out-of-memory find).
  j = byte_level_json();
  j["added_tokens"] = json::array({{{"id", (1 << 24) - 1}, {"content", "<far>"}, {"special", true}}});
  EXPECT_NE(error_of(j).find("token id 16777215 is far beyond the"), std::string::npos) << error_of(j);
  j = byte_level_json();
  j["model"]["vocab"]["negative"] = -3;
  EXPECT_NE(error_of(j).find("token id -3 for 'negative' is out of range"), std::string::npos) << error_of(j);
  j = byte_level_json();
  j["added_tokens"] = json::array({{{"content", "x"}}});
  EXPECT_NE(error_of(j).find("added_tokens has an entry without"), std::string::npos) << error_of(j);
  j = byte_level_json();
  j["model"]["vocab"] = json::array();
  EXPECT_NE(error_of(j).find("model.vocab is not an object"), std::string::npos) << error_of(j);
  j = byte_level_json();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(error_of(j).find("normalizer 'Lowercase' is not supported"), std::string::npos) << error_of(j);
}

}  // namespace
}  // namespace bitsplit
