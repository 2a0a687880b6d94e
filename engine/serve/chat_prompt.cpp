// Chat prompts (chat_prompt.h). The control tokens the template wrote itself are told from
// control-token text inside the messages by rendering twice: as given, and with that text in the
// messages overwritten, byte for byte, by a filler no control token contains. Where the two
// renderings agree the template wrote the text, so only there does it become control tokens.
#include "bitsplit/chat_prompt.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace bitsplit::serve {
namespace {

using ByteRanges = std::vector<std::pair<size_t, size_t>>;

// The texts EncodeOptions::parse_special makes tokens of — control and unknown tokens' (user-
// defined tokens are tokens in any text, the messages' too) — as a byte trie, so every occurrence
// in a string is found in one pass: a vocabulary can have thousands (Gemma 3: 6249), and a
// search per text took 19 s over 2 MB of messages.
class ControlTexts {
 public:
  explicit ControlTexts(const Vocabulary& vocab) : nodes_(1) {
    for (int32_t id = 0; id < vocab.size(); ++id) {
      const TokenType type = vocab.types[size_t(id)];
      if (type == TokenType::kControl || type == TokenType::kUnknown) add(vocab.tokens[size_t(id)]);
    }
  }

  // Whether a control token's text holds byte c.
  bool uses(char c) const { return used_[static_cast<unsigned char>(c)]; }

  // Calls found(begin, length) for every occurrence in s, overlapping ones too, by begin.
  template <typename Found>
  void find_all(std::string_view s, Found found) const {
    for (size_t begin = 0; begin < s.size(); ++begin) {
      int32_t node = 0;
      for (size_t i = begin; i < s.size() && (node = child(node, s[i])) > 0; ++i)
        if (nodes_[size_t(node)].terminal) found(begin, i + 1 - begin);
    }
  }

 private:
  struct Node {
    std::vector<std::pair<char, int32_t>> next;
    bool terminal = false;
  };

  int32_t child(int32_t node, char c) const {
    for (const auto& [byte, to] : nodes_[size_t(node)].next)
      if (byte == c) return to;
    return -1;
  }

  void add(std::string_view text) {
    if (text.empty()) return;
    int32_t node = 0;
    for (char c : text) {
      used_[static_cast<unsigned char>(c)] = true;
      int32_t to = child(node, c);
      if (to < 0) {
        to = int32_t(nodes_.size());
        nodes_[size_t(node)].next.emplace_back(c, to);
        nodes_.emplace_back();
      }
      node = to;
    }
    nodes_[size_t(node)].terminal = true;
  }

  std::vector<Node> nodes_;
  std::array<bool, 256> used_{};
};

// Which bytes of `s` lie inside an occurrence of a control token's text.
std::vector<bool> control_bytes(std::string_view s, const ControlTexts& texts) {
  std::vector<bool> marked(s.size(), false);
  texts.find_all(s, [&](size_t begin, size_t length) {
    std::fill(marked.begin() + ptrdiff_t(begin), marked.begin() + ptrdiff_t(begin + length), true);
  });
  return marked;
}

// A byte that no control token contains, so none can be found across it, and that templates
// pass through as it is: printable, not white space (strip() keeps it) and escaped neither by
// tojson nor by HTML escaping.
std::optional<char> filler_byte(const ControlTexts& texts) {
  constexpr std::string_view kCandidates = "~^`#$%*@!?=+;:,.-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  for (char c : kCandidates)
    if (!texts.uses(c)) return c;
  return std::nullopt;
}

// Overwrites the control-token text in the strings of the messages, noting the first it met.
struct Shield {
  const ControlTexts& texts;
  char filler;
  std::string first_found;  // empty: the messages hold none

  std::string mask(std::string s) {
    std::vector<std::pair<size_t, size_t>> found;  // (begin, length)
    texts.find_all(s, [&](size_t begin, size_t length) { found.emplace_back(begin, length); });
    if (found.empty()) return s;
    if (first_found.empty()) {  // the longest text at the first place one begins
      size_t length = 0;
      for (size_t i = 0; i < found.size() && found[i].first == found[0].first; ++i) length = found[i].second;
      first_found = s.substr(found[0].first, length);
    }
    for (const auto& [begin, length] : found) std::fill_n(s.begin() + ptrdiff_t(begin), length, filler);
    return s;
  }

  // Every string of `value`, object keys included (a template can print a tool call's arguments).
  nlohmann::ordered_json mask_all(const nlohmann::ordered_json& value) {
    if (value.is_string()) return mask(value.get<std::string>());
    if (value.is_array()) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& item : value) out.push_back(mask_all(item));
      return out;
    }
    if (value.is_object()) {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (const auto& [key, item] : value.items()) out[mask(key)] = mask_all(item);
      return out;
    }
    return value;
  }
};

// Whether `shielded` is `text` with only control-token text overwritten: then the two renderings
// line up byte for byte. A template that re-cases or rewrites message text breaks this.
bool only_control_text_differs(std::string_view text, std::string_view shielded, const ControlTexts& texts) {
  if (text.size() != shielded.size()) return false;
  const std::vector<bool> marked = control_bytes(text, texts);
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] != shielded[i] && !marked[i]) return false;
  return true;
}

// The byte ranges where two renderings of one length agree.
ByteRanges agreeing_ranges(std::string_view a, std::string_view b) {
  ByteRanges ranges;
  for (size_t i = 0; i < a.size();) {
    if (a[i] != b[i]) {
      ++i;
      continue;
    }
    const size_t begin = i;
    while (i < a.size() && a[i] == b[i]) ++i;
    ranges.emplace_back(begin, i);
  }
  return ranges;
}

}  // namespace

Result<std::vector<int32_t>> encode_chat(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                         const nlohmann::ordered_json& messages, const ChatEncodeOptions& options) {
  const auto& vocab = tokenizer.vocab();
  const std::string bos = vocab.bos >= 0 ? tokenizer.token_to_piece(vocab.bos) : "";
  const std::string eos = vocab.eos >= 0 ? tokenizer.token_to_piece(vocab.eos) : "";
  auto render = [&](const nlohmann::ordered_json& m) {
    return chat_template.render_chat(m, options.add_generation_prompt, bos, eos);
  };
  BITSPLIT_ASSIGN_OR_RETURN(std::string text, render(messages));
  EncodeOptions enc;
  enc.parse_special = true;
  enc.add_special = bos.empty() || !text.starts_with(bos);
  if (options.special_tokens_in_content) return tokenizer.encode(text, enc);

  const ControlTexts texts(vocab);
  const std::optional<char> filler = filler_byte(texts);
  if (!filler) return Status::error("the vocabulary's control tokens use every byte a message's text could be masked with");
  Shield shield{texts, *filler, {}};
  const nlohmann::ordered_json shielded = shield.mask_all(messages);
  if (shield.first_found.empty()) return tokenizer.encode(text, enc);  // no control-token text in the messages

  auto markup = render(shielded);
  if (!markup || !only_control_text_differs(text, *markup, texts)) {
    return Status::error("a message holds the control token '" + shield.first_found +
                         "' as text, and the chat template changes the messages' text, so its own control tokens "
                         "cannot be told from text in the messages: remove that text from the messages (or, for "
                         "trusted clients only, let messages carry control tokens)");
  }
  const ByteRanges template_text = agreeing_ranges(text, *markup);
  enc.special_ranges = &template_text;
  enc.add_special = bos.empty() || !markup->starts_with(bos);  // a BOS the template wrote, not a message
  return tokenizer.encode(text, enc);
}

}  // namespace bitsplit::serve
