// Conformance with llama.cpp's tokenizer test suite (../shared/models/vocab/*.inp/.out):
// every input must encode to exactly the ids llama.cpp produced.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "bitsplit/gguf.h"
#include "bitsplit/tokenizer.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

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

class VocabConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabConformance, EncodesEveryCaseLikeLlamaCpp) {
  const std::string shared = testing::shared_dir();
  const std::string base = shared.empty() ? "" : shared + "/models/vocab/ggml-vocab-" + GetParam() + ".gguf";
  BITSPLIT_REQUIRE_FILE(base);
  auto file = gguf::File::open(base);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_metadata(file->metadata());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const auto cases = read_cases(base + ".inp", base + ".out");
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const Case& c : cases) {
    // llama.cpp's test-tokenizer-0 encodes without BOS and without parsing special tokens.
    const auto ids = (*tok)->encode(c.text, {.add_special = false, .parse_special = false});
    EXPECT_EQ(ids, c.ids) << "input: '" << c.text << "'";
    failures += ids != c.ids;
    // Decoding gives the text back (SentencePiece loses nothing here but the added space).
    if (ids == c.ids) {
      EXPECT_EQ((*tok)->decode(ids), c.text) << "input: '" << c.text << "'";
    }
  }
  RecordProperty("failures", failures);
}

INSTANTIATE_TEST_SUITE_P(SentencePiece, VocabConformance, ::testing::Values("llama-spm", "phi-3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace bitsplit
