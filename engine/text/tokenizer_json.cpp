// Hugging Face tokenizer.json (the safetensors route): BPE models, byte-level or SentencePiece-
// style with byte fallback, read into the same Vocabulary and tokenizers as GGUF vocabularies.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bitsplit/tokenizer.h"
#include "tokenizer_bpe.h"
#include "tokenizer_pretok.h"

namespace bitsplit {
namespace {

using nlohmann::json;

constexpr std::string_view kMetaspace = "\xe2\x96\x81";
// HF's Punctuation pre-tokenizer: ASCII punctuation or Unicode category P.
constexpr const char* kPunctuation = R"([\p{P}!-/:-@\[-`{-~])";
// Metaspace with split: pieces start at each "▁" (HF's MergedWithNext).
constexpr const char* kMetaspaceSplit = R"(\x{2581}[^\x{2581}]*|[^\x{2581}]+)";
constexpr int64_t kMaxTokenId = 1 << 24;
constexpr uint64_t kMaxIdSlack = 1024;

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(path + ": cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::error(path + ": read error");
  return ss.str();
}

std::string type_of(const json& j) {
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A "bos_token"-style entry of tokenizer_config.json: a string or {"content": ...}.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

struct PipelineInfo {
  std::vector<std::string> patterns;
  size_t mapped_from = SIZE_MAX;  // patterns after ByteLevel see HF's byte-mapped text
  bool byte_level = false;
  bool metaspace = false;       // spaces become "▁"
  bool prepend_space = false;   // a "▁" in front of the text
};

// Normalizers: the SentencePiece-style pair (Prepend "▁", Replace " " -> "▁"); NFC is ignored,
// as llama.cpp ignores it.
Status read_normalizer(const json& n, PipelineInfo& info) {
  if (n.is_null()) return Status::ok();
  const std::string type = type_of(n);
  if (type == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array()) return Status::error("normalizer Sequence has no list");
    for (const json& item : n["normalizers"]) BITSPLIT_RETURN_IF_ERROR(read_normalizer(item, info));
    return Status::ok();
  }
  if (type == "Prepend" && n.value("prepend", "") == kMetaspace) {
    info.prepend_space = true;
    return Status::ok();
  }
  if (type == "Replace" && n.contains("pattern") && n["pattern"].value("String", "") == " " &&
      n.value("content", "") == kMetaspace) {
    info.metaspace = true;
    return Status::ok();
  }
  if (type == "NFC") return Status::ok();
  return Status::error("normalizer '" + type + "' is not supported (supported: Sequence, Prepend \"\u2581\", " +
                       "Replace \" \" -> \"\u2581\", NFC)");
}

std::string quote_literal(const std::string& s) {
  std::string out = "\\Q";
  for (size_t at = 0;;) {  // "\E" inside the literal must end the quote, be written, and restart it
    const size_t e = s.find("\\E", at);
    out += s.substr(at, e == std::string::npos ? std::string::npos : e - at);
    if (e == std::string::npos) break;
    out += "\\E\\\\E\\Q";
    at = e + 2;
  }
  return out + "\\E";
}

Status read_pre_tokenizer(const json& p, PipelineInfo& info) {
  if (p.is_null()) return Status::ok();
  const std::string type = type_of(p);
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) {
      return Status::error("pre_tokenizer Sequence has no list");
    }
    for (const json& item : p["pretokenizers"]) BITSPLIT_RETURN_IF_ERROR(read_pre_tokenizer(item, info));
    return Status::ok();
  }
  if (type == "ByteLevel") {
    if (p.value("add_prefix_space", false)) {
      return Status::error("pre_tokenizer ByteLevel with add_prefix_space is not supported");
    }
    info.byte_level = true;
    if (p.value("use_regex", true)) info.patterns.push_back(kGpt2Pattern);
    info.mapped_from = std::min(info.mapped_from, info.patterns.size());
    return Status::ok();
  }
  if (type == "Split") {
    const std::string behavior = p.value("behavior", "Isolated");
    if (behavior != "Isolated" || p.value("invert", false)) {
      return Status::error("pre_tokenizer Split with behavior '" + behavior + "'" +
                           (p.value("invert", false) ? " and invert" : "") + " is not supported (supported: Isolated)");
    }
    const json& pattern = p.contains("pattern") ? p["pattern"] : json();
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      info.patterns.push_back(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      info.patterns.push_back(quote_literal(pattern["String"].get<std::string>()));
    } else {
      return Status::error("pre_tokenizer Split has no Regex or String pattern");
    }
    return Status::ok();
  }
  if (type == "Digits") {
    info.patterns.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    return Status::ok();
  }
  if (type == "Punctuation") {
    const std::string behavior = p.value("behavior", "Isolated");
    if (behavior != "Isolated" && behavior != "Contiguous" && behavior != "contiguous" && behavior != "isolated") {
      return Status::error("pre_tokenizer Punctuation with behavior '" + behavior + "' is not supported");
    }
    info.patterns.push_back(std::string(kPunctuation) + (behavior[0] == 'C' || behavior[0] == 'c' ? "+" : ""));
    return Status::ok();
  }
  if (type == "Metaspace") {
    if (p.value("replacement", std::string(kMetaspace)) != kMetaspace) {
      return Status::error("pre_tokenizer Metaspace with a replacement other than \"\u2581\" is not supported");
    }
    info.metaspace = true;
    const std::string scheme = p.contains("prepend_scheme") && p["prepend_scheme"].is_string()
                                   ? p["prepend_scheme"].get<std::string>()
                                   : (p.value("add_prefix_space", true) ? "always" : "never");
    // "first" prepends only at the very start in HF; like llama.cpp's SentencePiece handling we
    // prepend at the start of every fragment between special tokens.
    info.prepend_space = scheme != "never";
    if (p.value("split", true)) info.patterns.push_back(kMetaspaceSplit);
    return Status::ok();
  }
  return Status::error("pre_tokenizer '" + type + "' is not supported (supported: Sequence, ByteLevel, Split, " +
                       "Digits, Punctuation, Metaspace)");
}

// TemplateProcessing says whether a special token goes before / after a single sequence.
void read_post_processor(const json& p, const Vocabulary& v, int32_t* bos, int32_t* eos) {
  if (!p.is_object()) return;
  const std::string type = type_of(p);
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& item : p["processors"]) read_post_processor(item, v, bos, eos);
    return;
  }
  if (type != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array() || p["single"].empty()) return;
  // (const json's operator[] on a missing key is undefined behaviour: every lookup goes through find.)
  auto special_id = [&](const json& item) -> int32_t {
    if (!item.is_object()) return -1;
    const auto token = item.find("SpecialToken");
    if (token == item.end() || !token->is_object()) return -1;
    const auto id_field = token->find("id");
    const std::string name = id_field != token->end() && id_field->is_string() ? id_field->get<std::string>() : "";
    const auto specials = p.find("special_tokens");
    if (specials != p.end() && specials->is_object()) {
      const auto entry = specials->find(name);
      if (entry != specials->end() && entry->is_object()) {
        const auto ids = entry->find("ids");
        if (ids != entry->end() && ids->is_array() && !ids->empty() && (*ids)[0].is_number_integer()) {
          const int64_t id = (*ids)[0].get<int64_t>();
          if (id >= 0 && id < v.size()) return int32_t(id);
        }
      }
    }
    return v.find(name);
  };
  *bos = special_id(p["single"].front());
  *eos = p["single"].size() > 1 ? special_id(p["single"].back()) : -1;
}

// The model must be a plain BPE (no word prefixes or suffixes) with a vocabulary object.
Status check_model(const json& j) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return Status::error("no \"model\" object (is this a tokenizer.json?)");
  }
  const json& model = j["model"];
  const std::string model_type = type_of(model).empty() && model.contains("merges") ? "BPE" : type_of(model);
  if (model_type != "BPE") {
    return Status::error("model.type '" + model_type + "' is not supported (supported: BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return Status::error(std::string("model.") + key + " is not supported");
    }
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return Status::error("model.vocab is not an object");
  return Status::ok();
}

// Ids may leave holes (llama.cpp's converter pads them), but a few entries naming huge ids would
// otherwise allocate millions of padding tokens: the largest id must stay within twice the
// number of entries (plus kMaxIdSlack).
Status check_id_range(const json& j) {
  const json& vocab = j["model"]["vocab"];
  const bool has_added = j.contains("added_tokens") && j["added_tokens"].is_array();
  size_t entries = vocab.size() + (has_added ? j["added_tokens"].size() : 0);
  int64_t largest = -1;
  for (const auto& [text, id] : vocab.items()) {
    if (id.is_number_integer()) largest = std::max(largest, id.get<int64_t>());
  }
  if (has_added) {
    for (const json& t : j["added_tokens"]) {
      if (t.is_object() && t.contains("id") && t["id"].is_number_integer()) largest = std::max(largest, t["id"].get<int64_t>());
    }
  }
  if (largest >= 0 && uint64_t(largest) >= 2 * uint64_t(entries) + kMaxIdSlack) {
    return Status::error("token id " + std::to_string(largest) + " is far beyond the " + std::to_string(entries) +
                         " vocabulary entries (ids may leave at most " + std::to_string(entries + kMaxIdSlack) +
                         " unused; is the tokenizer.json corrupt?)");
  }
  return Status::ok();
}

// Fills a Vocabulary's tokens by id: model.vocab, then added_tokens (which may replace entries),
// then names the holes.
class VocabularyFiller {
 public:
  explicit VocabularyFiller(Vocabulary& v) : v_(v) {}

  Status place(int64_t id, const std::string& text, TokenType type) {
    if (id < 0 || id >= kMaxTokenId) {
      return Status::error("token id " + std::to_string(id) + " for '" + text + "' is out of range");
    }
    if (size_t(id) >= v_.tokens.size()) {
      v_.tokens.resize(size_t(id) + 1);
      v_.types.resize(size_t(id) + 1, TokenType::kUnused);
      have_.resize(size_t(id) + 1, false);
    }
    v_.tokens[size_t(id)] = text;
    v_.types[size_t(id)] = type;
    have_[size_t(id)] = true;
    return Status::ok();
  }

  // Ids nobody uses, named as llama.cpp's converter names them; then scores and the text index.
  void finish() {
    for (size_t i = 0; i < v_.tokens.size(); ++i) {
      if (!have_[i]) v_.tokens[i] = "[PAD" + std::to_string(i) + "]";
    }
    v_.scores.assign(v_.tokens.size(), 0.0f);
    v_.token_to_id.reserve(v_.tokens.size());
    for (size_t i = 0; i < v_.tokens.size(); ++i) v_.token_to_id.emplace(v_.tokens[i], int32_t(i));
  }

 private:
  Vocabulary& v_;
  std::vector<bool> have_;
};

Status read_tokens(const json& j, Vocabulary& v) {
  VocabularyFiller filler(v);
  for (const auto& [text, id] : j["model"]["vocab"].items()) {
    if (!id.is_number_integer()) return Status::error("model.vocab['" + text + "'] is not an integer id");
    BITSPLIT_RETURN_IF_ERROR(filler.place(id.get<int64_t>(), text, TokenType::kNormal));
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string()) {
        return Status::error("added_tokens has an entry without an integer id and a content string");
      }
      const bool special = t.value("special", false);
      BITSPLIT_RETURN_IF_ERROR(filler.place(t["id"].get<int64_t>(), t["content"].get<std::string>(),
                                            special ? TokenType::kControl : TokenType::kUserDefined));
    }
  }
  if (v.tokens.empty()) return Status::error("the vocabulary is empty");
  filler.finish();
  return Status::ok();
}

// model.merges: "a b" strings or ["a", "b"] pairs.
Status read_merges(const json& model, Vocabulary& v) {
  if (!model.contains("merges") || !model["merges"].is_array()) return Status::error("model.merges is not a list");
  const json& merges = model["merges"];
  v.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return Status::error("model.merges[" + std::to_string(i) + "] = '" + s + "' has no space");
      v.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return Status::error("model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return Status::ok();
}

// The normalizer and pre-tokenizer, which must handle spaces one way: byte-level or "▁".
Result<PipelineInfo> read_pipeline(const json& j) {
  PipelineInfo info;
  BITSPLIT_RETURN_IF_ERROR(read_normalizer(j.contains("normalizer") ? j["normalizer"] : json(), info).with_context("normalizer"));
  BITSPLIT_RETURN_IF_ERROR(read_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), info));
  if (info.byte_level == info.metaspace) {
    return Status::error(info.byte_level ? "mixes ByteLevel and Metaspace handling"
                                         : "BPE without a ByteLevel pre-tokenizer or a \"\u2581\" space normalizer "
                                           "is not supported");
  }
  return info;
}

// The unknown token, and with SentencePiece-style byte fallback the <0xXX> byte tokens.
void mark_token_types(const json& model, const PipelineInfo& info, bool byte_fallback, Vocabulary& v) {
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    v.unk = v.find(model["unk_token"].get<std::string>());
    if (v.unk >= 0) v.types[size_t(v.unk)] = TokenType::kUnknown;
  }
  if (info.metaspace && byte_fallback) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const std::string& t = v.tokens[i];
      if (v.types[i] == TokenType::kNormal && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        v.types[i] = TokenType::kByte;
      }
    }
  }
  v.add_space_prefix = info.metaspace && info.prepend_space;
}

// BOS / EOS: the post-processor's template, overridden by tokenizer_config.json beside the file.
Status read_bos_eos(const json& j, const std::string& path, Vocabulary& v) {
  int32_t bos = -1, eos = -1;
  read_post_processor(j.contains("post_processor") ? j["post_processor"] : json(), v, &bos, &eos);
  v.add_bos = bos >= 0;
  v.add_eos = eos >= 0;
  v.bos = bos;
  v.eos = eos;
  // tokenizer_config.json names the tokens outright and overrides the template's choice.
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config, ec)) {
    auto text = read_file(config.string());
    if (!text) return text.status();
    const json c = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (c.is_discarded() || !c.is_object()) return Status::error(config.string() + ": not valid JSON");
    if (c.contains("bos_token")) {
      const int32_t id = v.find(token_text(c["bos_token"]));
      if (id >= 0) v.bos = id;
    }
    if (c.contains("eos_token")) {
      const int32_t id = v.find(token_text(c["eos_token"]));
      if (id >= 0) v.eos = id;
    }
    if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) v.add_bos = c["add_bos_token"].get<bool>();
    if (c.contains("add_eos_token") && c["add_eos_token"].is_boolean()) v.add_eos = c["add_eos_token"].get<bool>();
  }
  if (v.add_bos && v.bos < 0) return Status::error("BOS is to be added but no BOS token is named");
  if (v.add_eos && v.eos < 0) return Status::error("EOS is to be added but no EOS token is named");
  return Status::ok();
}

Result<std::unique_ptr<Tokenizer>> build(const json& j, const std::string& path) {
  BITSPLIT_RETURN_IF_ERROR(check_model(j));
  BITSPLIT_RETURN_IF_ERROR(check_id_range(j));
  const json& model = j["model"];
  Vocabulary v;
  v.family = TokenizerFamily::kBytePairEncoding;
  v.model = "tokenizer.json";
  BITSPLIT_RETURN_IF_ERROR(read_tokens(j, v));
  BITSPLIT_RETURN_IF_ERROR(read_merges(model, v));
  BITSPLIT_ASSIGN_OR_RETURN(PipelineInfo info, read_pipeline(j));
  const bool byte_fallback = model.value("byte_fallback", false);
  mark_token_types(model, info, byte_fallback, v);
  BITSPLIT_RETURN_IF_ERROR(read_bos_eos(j, path, v));

  BpeOptions options;
  options.patterns = std::move(info.patterns);
  options.mapped_from = info.mapped_from;
  options.byte_level = info.byte_level;
  options.byte_fallback = byte_fallback;
  options.ignore_merges = model.value("ignore_merges", false);
  options.pre_name = "from tokenizer.json (" + std::to_string(options.patterns.size()) + " regexes)";
  return BpeTokenizer::create(std::move(v), std::move(options));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(const std::string& path) {
  auto text = read_file(path);
  if (!text) return text.status();
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::error(path + ": not valid JSON");
  try {
    auto t = build(j, path);
    if (!t) return t.status().with_context(path);
    return t;
  } catch (const json::exception& e) {  // a value of an unexpected type deep inside
    return Status::error(path + ": unexpected content: " + e.what());
  }
}

}  // namespace bitsplit
