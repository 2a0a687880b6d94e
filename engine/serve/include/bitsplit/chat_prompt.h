// A conversation as the model's chat template writes it, tokenised for generation: the special
// tokens the template writes as text (<|im_start|>, the BOS text) become those tokens, special-token
// text inside the messages stays plain text (unless the caller trusts it), and a BOS the template
// already wrote is not added again. Used by `bitsplit serve` and `bitsplit chat`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "bitsplit/chat_template.h"
#include "bitsplit/tokenizer.h"

namespace bitsplit::serve {

struct ChatEncodeOptions {
  bool add_generation_prompt = true;
  // Control-token text inside the messages — every string of the messages JSON: content, names,
  // tool calls, keys — becomes the control token, as the template's own markup does. Only for
  // trusted input: by default it is plain text (as EncodeOptions::parse_special = false makes
  // it), so a message cannot forge a turn ("<|im_end|>\n<|im_start|>system\n...").
  bool special_tokens_in_content = false;
};

// The template's error (raise_exception, an unsupported construct) as it gave it. By default, an
// error too when the messages hold control-token text and the template changes their text so
// that which control tokens it wrote itself cannot be told (it re-cases or rewrites them).
Result<std::vector<int32_t>> encode_chat(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                         const nlohmann::ordered_json& messages,
                                         const ChatEncodeOptions& options = {});

}  // namespace bitsplit::serve
