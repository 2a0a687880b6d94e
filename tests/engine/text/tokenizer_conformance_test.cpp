// llama.cpp's tokenizer test suite (../shared/models/vocab/*.inp/.out): exactly its ids, from
// each GGUF vocabulary and from a tokenizer.json built from it here, in a temp dir.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bitsplit/gguf.h"
#include "bitsplit/tokenizer.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using nlohmann::json;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// .inp: cases separated by "\n__ggml_vocab_test__\n"; .out: one line of ids per case.
struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const std::string& inp, const std::string& out) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  const std::string text = read_all(inp);
  std::vector<Case> cases;
  for (size_t pos = 0;;) {
    const size_t at = text.find(sep, pos);
    if (at == std::string::npos) break;
    cases.push_back({text.substr(pos, at - pos), {}});
    pos = at + sep.size();
  }
  std::istringstream lines(read_all(out));
  std::string line;
  for (size_t i = 0; i < cases.size() && std::getline(lines, line); ++i) {
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].ids.push_back(id);
  }
  return cases;
}

std::string vocab_path(const std::string& name) {
  const std::string shared = testing::shared_dir();
  return shared.empty() ? "" : shared + "/models/vocab/ggml-vocab-" + name + ".gguf";
}

// Encodes every case as llama.cpp's test-tokenizer-0 does (no BOS, no special-token parsing)
// and checks the ids, and that decoding gives the text back. Returns the cases that matched.
int check_cases(const Tokenizer& tok, const std::vector<Case>& cases, const std::string& label) {
  int passed = 0;
  for (const Case& c : cases) {
    const auto ids = tok.encode(c.text, {.add_special = false, .parse_special = false});
    EXPECT_EQ(ids, c.ids) << label << " input: '" << c.text << "'";
    if (ids != c.ids) continue;
    ++passed;
    EXPECT_EQ(tok.decode(ids), c.text) << label << " input: '" << c.text << "'";
  }
  std::cout << "[ conformance ] " << label << ": " << passed << "/" << cases.size() << " cases\n";
  return passed;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n) if (ch == '-') ch = '_';
  return n;
}

class VocabConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabConformance, EncodesEveryCaseLikeLlamaCpp) {
  const std::string base = vocab_path(GetParam());
  BITSPLIT_REQUIRE_FILE(base);
  if (GetParam() == "bert-bge") {
    GTEST_SKIP() << "bert-bge is a WordPiece (BERT) vocabulary; bitsplit implements SentencePiece and BPE only";
  }
  auto file = gguf::File::open(base);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_metadata(file->metadata());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const auto cases = read_cases(base + ".inp", base + ".out");
  ASSERT_EQ(cases.size(), 46u);
  RecordProperty("passed", check_cases(**tok, cases, GetParam() + " (GGUF)"));
}

INSTANTIATE_TEST_SUITE_P(SentencePiece, VocabConformance, ::testing::Values("llama-spm", "phi-3"), param_name);
INSTANTIATE_TEST_SUITE_P(Bpe, VocabConformance,
                         ::testing::Values("gpt-2", "deepseek-coder", "deepseek-llm", "falcon", "mpt", "refact",
                                           "starcoder", "bert-bge"),
                         param_name);

// ---- tokenizer.json built from the GGUF vocabulary ------------------------------------------

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}
json split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json digits(bool individual) { return {{"type", "Digits"}, {"individual_digits", individual}}; }
json sequence(std::vector<json> items) { return {{"type", "Sequence"}, {"pretokenizers", std::move(items)}}; }

// The pre_tokenizer sections of the models' own tokenizer.json files, in HF's syntax (regexes
// with \x{...} code points where the originals have the characters).
json hf_pre_tokenizer(const std::string& name) {
  const std::string cjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
  if (name == "gpt-2" || name == "mpt") return byte_level(true);
  if (name == "starcoder" || name == "refact") return sequence({digits(true), byte_level(true)});
  if (name == "falcon") {
    return sequence({{{"type", "Punctuation"}, {"behavior", "Contiguous"}}, byte_level(true), digits(false),
                     split("[0-9][0-9][0-9]")});
  }
  if (name == "deepseek-coder") {
    return sequence({split(R"([\r\n])"), split(R"(\s?\p{L}+)"), split(R"(\s?\p{P}+)"), split(cjk), digits(true),
                     byte_level(false)});
  }
  if (name == "deepseek-llm") {
    const std::string letters =
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
        R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
        R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
        R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
        R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
        R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
        R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
        R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
        R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
        R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
        R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
        R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
        R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
    const std::string punct = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
    return sequence({split(R"([\r\n])"), split(letters), split(punct), split(R"(\s+$)"), split(cjk), digits(false),
                     byte_level(false)});
  }
  return nullptr;
}

// SentencePiece vocabularies carry scores, not merges; HF's converter derives the merges from
// every split of a piece into two pieces, ordered by the joined piece's score.
json spm_merges(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                const std::vector<int64_t>& types) {
  std::map<std::string, size_t> id;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 1) id.emplace(tokens[i], i);
  }
  struct Merge {
    float score;
    size_t piece, left, right;
  };
  std::vector<Merge> merges;
  for (const auto& [text, piece] : id) {
    for (size_t k = 1; k < text.size(); ++k) {
      if ((static_cast<unsigned char>(text[k]) & 0xc0) == 0x80) continue;  // not a character boundary
      auto l = id.find(text.substr(0, k)), r = id.find(text.substr(k));
      if (l != id.end() && r != id.end()) merges.push_back({scores[piece], piece, l->second, r->second});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.piece != b.piece) return a.piece < b.piece;
    return a.left != b.left ? a.left < b.left : a.right < b.right;
  });
  json out = json::array();
  for (const Merge& m : merges) out.push_back(json::array({tokens[m.left], tokens[m.right]}));
  return out;
}

json hf_json_from_gguf(const gguf::Metadata& m, const std::string& name) {
  const auto tokens = *m.get_string_array("tokenizer.ggml.tokens");
  const auto types = *m.get_int_array("tokenizer.ggml.token_type");
  const std::string model = *m.get_string("tokenizer.ggml.model");
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array();
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    if (types[i] == 2 || types[i] == 3 || types[i] == 4) {
      j["added_tokens"].push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", types[i] != 4}});
    }
  }
  json& mdl = j["model"];
  mdl = {{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}};
  mdl["vocab"] = std::move(vocab);
  if (model == "llama") {
    const auto scores = *m.get_float_array("tokenizer.ggml.scores");
    mdl["merges"] = spm_merges(tokens, scores, types);
    mdl["unk_token"] = "<unk>";
    mdl["fuse_unk"] = true;
    mdl["byte_fallback"] = true;
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}},
                                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}}}}};
    j["pre_tokenizer"] = nullptr;
    const int64_t bos = *m.get_int_or("tokenizer.ggml.bos_token_id", 1);
    const std::string bos_text = tokens[size_t(bos)];
    json single = json::array();
    single.push_back({{"SpecialToken", {{"id", bos_text}, {"type_id", 0}}}});
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    json special = json::object();
    special[bos_text] = {{"id", bos_text}, {"ids", json::array({bos})}, {"tokens", json::array({bos_text})}};
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}};
  } else {
    mdl["merges"] = *m.get_string_array("tokenizer.ggml.merges");  // the "a b" form
    mdl["unk_token"] = nullptr;
    mdl["byte_fallback"] = false;
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = hf_pre_tokenizer(name);
    j["post_processor"] = byte_level(false);
    j["decoder"] = byte_level(true);
  }
  return j;
}

class HfJsonConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(HfJsonConformance, TokenizerJsonEncodesLikeTheGguf) {
  const std::string base = vocab_path(GetParam());
  BITSPLIT_REQUIRE_FILE(base);
  auto file = gguf::File::open(base);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const json j = hf_json_from_gguf(file->metadata(), GetParam());
  testing::TempDir dir("hfjson");
  const std::string path = dir.file("tokenizer.json");
  std::ofstream(path) << j.dump();
  auto tok = Tokenizer::from_hf_json(path);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const auto cases = read_cases(base + ".inp", base + ".out");
  ASSERT_EQ(cases.size(), 46u);
  RecordProperty("passed", check_cases(**tok, cases, GetParam() + " (tokenizer.json)"));
  if (file->metadata().get_string("tokenizer.ggml.model").value() == "llama") {
    EXPECT_TRUE((*tok)->vocab().add_bos);
    EXPECT_EQ((*tok)->vocab().bos, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(FromGguf, HfJsonConformance,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder", "deepseek-llm", "falcon",
                                           "mpt", "refact", "starcoder"),
                         param_name);

}  // namespace
}  // namespace bitsplit
