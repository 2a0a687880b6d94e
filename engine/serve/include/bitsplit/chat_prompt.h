// A conversation as the model's chat template writes it, tokenised for generation: the special
// tokens the template writes as text (<|im_start|>, the BOS text) become those tokens, and a BOS
// the template already wrote is not added again. Used by `bitsplit serve` and `bitsplit chat`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "bitsplit/chat_template.h"
#include "bitsplit/tokenizer.h"

namespace bitsplit::serve {

// The template's error (raise_exception, an unsupported construct) as it gave it.
Result<std::vector<int32_t>> encode_chat(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                         const nlohmann::ordered_json& messages, bool add_generation_prompt = true);

}  // namespace bitsplit::serve
