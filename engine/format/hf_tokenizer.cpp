// tokenizer.json + tokenizer_config.json -> tokenizer.ggml.* keys and tokenizer.chat_template
// (hf_mapping.h), as llama.cpp's converter writes them for byte-level BPE vocabularies: tokens by
// id (holes named [PADn]), token types, merges, BOS/EOS, and the pre-tokenizer's llama.cpp name,
// recognised from the tokenizer.json's regexes. Anything else is an error naming what was found.
#include <filesystem>

#include "bounded_file.h"
#include "hf_mapping.h"

namespace bitsplit::hf {
namespace {

using nlohmann::json;
using gguf::Value;

constexpr uint64_t kMaxTokenizerBytes = uint64_t(256) << 20;
constexpr int64_t kMaxTokenId = int64_t(1) << 24;

// The Split regexes of published byte-level tokenizers, by llama.cpp's pre-tokenizer name.
struct KnownPre {
  const char* name;
  const char* regex;
};
constexpr KnownPre kKnownPre[] = {
    {"llama-bpe", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"qwen2", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
};

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

// The pre-tokenizer steps as a signature: "ByteLevel+regex", "Split:<regex>", "Digits:individual".
void pre_steps(const json& p, std::vector<std::string>& out) {
  const std::string type = type_of(p);
  if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    for (const json& item : p["pretokenizers"]) pre_steps(item, out);
  } else if (type == "ByteLevel") {
    out.push_back(p.value("use_regex", true) ? "ByteLevel+regex" : "ByteLevel");
  } else if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex") &&
             p["pattern"]["Regex"].is_string()) {
    out.push_back("Split:" + p["pattern"]["Regex"].get<std::string>());
  } else if (type == "Digits") {
    out.push_back(p.value("individual_digits", false) ? "Digits:individual" : "Digits");
  } else {
    out.push_back(type.empty() ? p.dump() : type);
  }
}

Result<std::string> pre_name(const json& j, const std::string& path) {
  std::vector<std::string> steps;
  if (j.contains("pre_tokenizer")) pre_steps(j["pre_tokenizer"], steps);
  if (steps == std::vector<std::string>{"ByteLevel+regex"}) return std::string("gpt-2");
  if (steps == std::vector<std::string>{"Digits:individual", "ByteLevel+regex"}) return std::string("smollm");
  if (steps.size() == 2 && steps[1] == "ByteLevel") {
    for (const auto& k : kKnownPre) {
      if (steps[0] == std::string("Split:") + k.regex) return std::string(k.name);
    }
  }
  std::string seen;
  for (const auto& s : steps) seen += (seen.empty() ? "" : ", ") + s;
  return Status::error(path + ": pre_tokenizer [" + seen + "] is not one llama.cpp names (recognised: GPT-2's " +
                       "ByteLevel, SmolLM's Digits + ByteLevel, Llama 3's and Qwen2's Split + ByteLevel)");
}

struct Tokens {
  std::vector<std::string> text;
  std::vector<int32_t> type;  // llama.cpp's: 1 normal, 3 control, 4 user-defined, 5 unused
};

Status place(Tokens& t, int64_t id, const std::string& text, int32_t type, const std::string& path) {
  if (id < 0 || id >= kMaxTokenId) return Status::error(path + ": token id " + std::to_string(id) + " is out of range");
  if (size_t(id) >= t.text.size()) {
    t.text.resize(size_t(id) + 1);
    t.type.resize(size_t(id) + 1, 0);
  }
  t.text[size_t(id)] = text;
  t.type[size_t(id)] = type;
  return Status::ok();
}

Result<Tokens> read_tokens(const json& j, const std::string& path) {
  Tokens t;
  for (const auto& [text, id] : j["model"]["vocab"].items()) {
    if (!id.is_number_integer()) return Status::error(path + ": model.vocab['" + text + "'] is not an integer id");
    BITSPLIT_RETURN_IF_ERROR(place(t, id.get<int64_t>(), text, 1, path));
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string()) {
        return Status::error(path + ": added_tokens has an entry without an integer id and a content string");
      }
      BITSPLIT_RETURN_IF_ERROR(place(t, a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false) ? 3 : 4, path));
    }
  }
  if (t.text.empty()) return Status::error(path + ": the vocabulary is empty");
  for (size_t i = 0; i < t.text.size(); ++i) {
    if (t.type[i] == 0) {
      t.text[i] = "[PAD" + std::to_string(i) + "]";
      t.type[i] = 5;
    }
  }
  return t;
}

Result<std::vector<std::string>> read_merges(const json& model, const std::string& path) {
  if (!model.contains("merges") || !model["merges"].is_array()) return Status::error(path + ": model.merges is not a list");
  std::vector<std::string> out;
  for (const json& m : model["merges"]) {
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return Status::error(path + ": model.merges holds an entry that is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return out;
}

std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

int64_t find_token(const Tokens& t, const std::string& text) {
  if (text.empty()) return -1;
  for (size_t i = 0; i < t.text.size(); ++i) {
    if (t.text[i] == text) return int64_t(i);
  }
  return -1;
}

// Whether the post-processor puts a special token before a single sequence (Llama 3's BOS).
bool template_adds_bos(const json& p) {
  if (type_of(p) == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& item : p["processors"]) {
      if (template_adds_bos(item)) return true;
    }
    return false;
  }
  return type_of(p) == "TemplateProcessing" && p.contains("single") && p["single"].is_array() && !p["single"].empty() &&
         p["single"][0].is_object() && p["single"][0].contains("SpecialToken");
}

// tokenizer_config.json's chat_template (a string, or named templates of which "default"), else
// chat_template.jinja beside it.
Result<std::string> chat_template(const json& config, const std::string& folder) {
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {
      for (const json& item : t) {
        if (item.is_object() && item.value("name", "") == "default" && item.contains("template") && item["template"].is_string()) {
          return item["template"].get<std::string>();
        }
      }
    }
  }
  const std::string jinja = (std::filesystem::path(folder) / "chat_template.jinja").string();
  std::error_code ec;
  if (std::filesystem::exists(jinja, ec)) return read_bounded_file(jinja, 1 << 20);
  return std::string();
}

Result<json> read_json(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(std::string text, read_bounded_file(path, kMaxTokenizerBytes));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::error(path + ": not a JSON object");
  return j;
}

Status add_from(const json& j, const json& config, const std::string& path, const std::string& folder, int64_t vocab_size,
                gguf::Metadata& m) {
  const json& model = j.contains("model") ? j["model"] : json();
  const std::string model_type = type_of(model).empty() && model.is_object() && model.contains("merges") ? "BPE" : type_of(model);
  if (model_type != "BPE" || !model.contains("vocab") || !model["vocab"].is_object()) {
    return Status::error(path + ": model.type '" + model_type + "' is not supported (supported: byte-level BPE)");
  }
  if (model.value("byte_fallback", false)) {
    return Status::error(path + ": a SentencePiece-style BPE (byte_fallback) cannot be written as GGUF tokenizer "
                                "metadata yet; only byte-level BPE vocabularies can");
  }
  BITSPLIT_ASSIGN_OR_RETURN(std::string pre, pre_name(j, path));
  BITSPLIT_ASSIGN_OR_RETURN(Tokens tokens, read_tokens(j, path));
  // As llama.cpp's converter: the vocabulary padded to config.json's vocab_size (the embedding's
  // rows), so that every id the model can produce has a token.
  if (vocab_size > kMaxTokenId) return Status::error(path + ": config.json's vocab_size " + std::to_string(vocab_size) + " is out of range");
  for (int64_t i = int64_t(tokens.text.size()); i < vocab_size; ++i) {
    tokens.text.push_back("[PAD" + std::to_string(i) + "]");
    tokens.type.push_back(5);
  }
  BITSPLIT_ASSIGN_OR_RETURN(auto merges, read_merges(model, path));
  m.set("tokenizer.ggml.model", Value::string("gpt2"));
  m.set("tokenizer.ggml.pre", Value::string(pre));
  m.set("tokenizer.ggml.tokens", Value::string_array(tokens.text));
  m.set("tokenizer.ggml.token_type", Value::i32_array(tokens.type));
  m.set("tokenizer.ggml.merges", Value::string_array(merges));
  bool add_bos = template_adds_bos(j.contains("post_processor") ? j["post_processor"] : json());
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) add_bos = config["add_bos_token"].get<bool>();
  for (const auto& [field, key] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"},
                                   {"pad_token", "tokenizer.ggml.padding_token_id"}, {"unk_token", "tokenizer.ggml.unknown_token_id"}}) {
    if (!config.contains(field)) continue;
    const int64_t id = find_token(tokens, token_text(config[field]));
    if (id >= 0) m.set(key, Value::u32(uint32_t(id)));
  }
  if (add_bos && !m.contains("tokenizer.ggml.bos_token_id")) {
    return Status::error(path + ": BOS is to be added but tokenizer_config.json names no bos_token in the vocabulary");
  }
  m.set("tokenizer.ggml.add_bos_token", Value::boolean(add_bos));
  m.set("tokenizer.ggml.add_eos_token", Value::boolean(config.value("add_eos_token", false) == true));
  BITSPLIT_ASSIGN_OR_RETURN(std::string tmpl, chat_template(config, folder));
  if (!tmpl.empty()) m.set("tokenizer.chat_template", Value::string(tmpl));
  return Status::ok();
}

}  // namespace

Status add_tokenizer(const std::string& folder, int64_t vocab_size, gguf::Metadata& metadata) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(folder) / "tokenizer.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::ok();
  BITSPLIT_ASSIGN_OR_RETURN(json j, read_json(path));
  json config = json::object();
  const std::string config_path = (fs::path(folder) / "tokenizer_config.json").string();
  if (fs::exists(config_path, ec)) {
    BITSPLIT_ASSIGN_OR_RETURN(config, read_json(config_path));
  }
  try {
    return add_from(j, config, path, folder, vocab_size, metadata);
  } catch (const json::exception& e) {
    return Status::error(path + ": unexpected content: " + e.what());
  }
}

}  // namespace bitsplit::hf
