// A Hugging Face folder's byte-level BPE tokenizer.json + tokenizer_config.json (engine/format/
// hf_tokenizer.cpp) against the GGUF tokenizer it stands for: a GGUF's vocabulary is written out in
// tokenizer.json's layout (model.vocab, model.merges, added_tokens for control and user-defined
// tokens, the pre-tokenizer the published files of that family carry) with a chat template in
// tokenizer_config.json; the folder's translated metadata must then give the GGUF's token ids for
// a set of strings, its merges, BOS/EOS and pre-tokenizer name, and the template, and so must
// Tokenizer::from_hf_json reading the same file. GPT-2's vocabulary comes from
// ../shared/models/vocab; SmolLM2's and Qwen2.5's from the real models in BITSPLIT_REAL_MODELS
// (skipped without it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bitsplit/gguf.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/weights.h"
#include "safetensors_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using nlohmann::json;

// The Split regexes of Llama 3's and Qwen2's published tokenizer.json files.
const char* kQwen2Regex = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kLlama3Regex = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json pre_tokenizer(const std::string& pre) {
  if (pre == "gpt-2") return byte_level(true);
  if (pre == "smollm") {
    return {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  }
  const json split = {{"type", "Split"}, {"pattern", {{"Regex", pre == "qwen2" ? kQwen2Regex : kLlama3Regex}}},
                      {"behavior", "Isolated"}, {"invert", false}};
  return {{"type", "Sequence"}, {"pretokenizers", {split, byte_level(false)}}};
}

const char* kTemplate = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";

// Writes the GGUF's tokenizer as tokenizer.json + tokenizer_config.json, and a one-tensor llama
// config.json and model.safetensors so that the folder opens.
void write_folder(const gguf::Metadata& m, const std::string& dir) {
  const auto tokens = *m.get_string_array("tokenizer.ggml.tokens");
  const auto types = *m.get_int_array("tokenizer.ggml.token_type");
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 3 || types[i] == 4) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", types[i] == 4}, {"special", types[i] == 3}});
    }
    if (types[i] != 5) vocab[tokens[i]] = i;
  }
  json merges = json::array();
  const auto merge_texts = *m.get_string_array("tokenizer.ggml.merges");
  for (const std::string& s : merge_texts) {  // the newer [a, b] form
    const size_t sp = s.find(' ');
    merges.push_back({s.substr(0, sp), s.substr(sp + 1)});
  }
  const json tj = {{"version", "1.0"},
                   {"added_tokens", added},
                   {"normalizer", nullptr},
                   {"pre_tokenizer", pre_tokenizer(*m.get_string("tokenizer.ggml.pre"))},
                   {"decoder", byte_level(true)},
                   {"model", {{"type", "BPE"}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}}}};
  testing::write_text(dir + "/tokenizer.json", tj.dump());
  json config = {{"add_bos_token", *m.get_bool_or("tokenizer.ggml.add_bos_token", false)}, {"chat_template", kTemplate}};
  if (auto bos = m.get_int("tokenizer.ggml.bos_token_id")) config["bos_token"] = tokens[size_t(*bos)];
  if (auto eos = m.get_int("tokenizer.ggml.eos_token_id")) config["eos_token"] = {{"content", tokens[size_t(*eos)]}, {"special", true}};
  testing::write_text(dir + "/tokenizer_config.json", config.dump());
  testing::write_text(dir + "/config.json", json{{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 4}, {"num_hidden_layers", 1},
                                                 {"intermediate_size", 8}, {"num_attention_heads", 2}, {"tie_word_embeddings", true},
                                                 {"vocab_size", tokens.size() + 2}}.dump());  // an embedding wider than the vocabulary
  testing::write_bytes(dir + "/model.safetensors",
                       testing::safetensors_bytes({{"model.embed_tokens.weight", "F32", {2, 4}, testing::f32_bytes({1, 2, 3, 4, 5, 6, 7, 8})}}));
}

const std::vector<std::string> kTexts = {
    "Hello world",
    " In the beginning God created the heaven and the earth.",
    "I'll say it's what they've done; we'd LL'VE",
    "def f(x):\n    return x**2  # square\n\n\n\tif x >= 10_000: print(3.14159)",
    "1234567890 12 345 6789",
    "h\xc3\xa9llo w\xc3\xb6rld \xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
    "   leading spaces and trailing   \n\n",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80 \xd8\xb3\xd9\x84\xd8\xa7\xd9\x85 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87",
    "<|im_start|>user\nhi<|im_end|> <|endoftext|> <s></s>",
    "",
};

void expect_same_tokenizer(const std::string& gguf_path) {
  auto file = gguf::File::open(gguf_path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const gguf::Metadata& g = file->metadata();
  ASSERT_EQ(*g.get_string("tokenizer.ggml.model"), "gpt2");
  testing::TempDir dir("hf-tokenizer");
  write_folder(g, dir.path().string());
  auto folder = open_weights(dir.path().string());
  ASSERT_TRUE(folder.is_ok()) << folder.status().message();
  const gguf::Metadata& f = (*folder)->metadata();

  EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f.get_string("tokenizer.ggml.pre"), *g.get_string("tokenizer.ggml.pre"));
  EXPECT_EQ(*f.get_string_array("tokenizer.ggml.merges"), *g.get_string_array("tokenizer.ggml.merges"));
  EXPECT_EQ(*f.get_string("tokenizer.chat_template"), kTemplate);
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    if (g.contains(key)) EXPECT_EQ(*f.get_int(key), *g.get_int(key)) << key;
  }
  const auto gt = *g.get_string_array("tokenizer.ggml.tokens"), ft = *f.get_string_array("tokenizer.ggml.tokens");
  const auto gty = *g.get_int_array("tokenizer.ggml.token_type"), fty = *f.get_int_array("tokenizer.ggml.token_type");
  // Padded to config.json's vocab_size as llama.cpp's converter pads: unused [PADn] tokens.
  ASSERT_EQ(ft.size(), gt.size() + 2);
  EXPECT_EQ(ft.back(), "[PAD" + std::to_string(gt.size() + 1) + "]");
  EXPECT_EQ(fty.back(), 5);
  size_t differ = 0;
  for (size_t i = 0; i < gt.size(); ++i) differ += gty[i] != 5 && (ft[i] != gt[i] || fty[i] != gty[i]);
  EXPECT_EQ(differ, 0u) << "tokens or token types that differ from the GGUF's";

  auto from_gguf = Tokenizer::from_metadata(g), from_folder = Tokenizer::from_metadata(f);
  auto from_json = Tokenizer::from_hf_json(dir.file("tokenizer.json"));
  ASSERT_TRUE(from_gguf.is_ok()) << from_gguf.status().message();
  ASSERT_TRUE(from_folder.is_ok()) << from_folder.status().message();
  ASSERT_TRUE(from_json.is_ok()) << from_json.status().message();
  size_t nonempty = 0;
  for (const std::string& text : kTexts) {
    for (bool special : {false, true}) {
      SCOPED_TRACE(text + (special ? " (special tokens parsed)" : ""));
      EncodeOptions o;
      o.parse_special = special;
      const auto want = (*from_gguf)->encode(text, o);
      nonempty += !want.empty();
      EXPECT_EQ((*from_folder)->encode(text, o), want);
      EXPECT_EQ((*from_json)->encode(text, o), want);
      EXPECT_EQ((*from_folder)->decode((*from_folder)->encode(text, o)), (*from_gguf)->decode(want));
    }
  }
  EXPECT_GE(nonempty, 2 * (kTexts.size() - 1));
}

TEST(HfTokenizer, Gpt2VocabularyEncodesAsTheGguf) {
  const std::string shared = testing::shared_dir();
  const std::string path = shared + "/models/vocab/ggml-vocab-gpt-2.gguf";
  if (shared.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "test data not found: ../shared/models/vocab/ggml-vocab-gpt-2.gguf";
  expect_same_tokenizer(path);
}

class HfTokenizerReal : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerReal, EncodesAsTheGguf) {
  const char* dir = std::getenv("BITSPLIT_REAL_MODELS");
  if (!dir || !*dir) GTEST_SKIP() << "set BITSPLIT_REAL_MODELS to the folder of fetch-real-models.sh";
  const std::string path = std::string(dir) + "/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  expect_same_tokenizer(path);
}

INSTANTIATE_TEST_SUITE_P(Models, HfTokenizerReal,
                         ::testing::Values("smollm2-135m-instruct.q4_1.gguf", "qwen2.5-coder-0.5b-instruct.gguf"),
                         [](const auto& info) {
                           std::string s = info.param.substr(0, info.param.find('-'));
                           std::erase(s, '.');
                           return s;
                         });

}  // namespace
}  // namespace bitsplit
