// Chat prompts (chat_prompt.h).
#include "bitsplit/chat_prompt.h"

namespace bitsplit::serve {

Result<std::vector<int32_t>> encode_chat(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                         const nlohmann::ordered_json& messages, bool add_generation_prompt) {
  const auto& vocab = tokenizer.vocab();
  const std::string bos = vocab.bos >= 0 ? tokenizer.token_to_piece(vocab.bos) : "";
  const std::string eos = vocab.eos >= 0 ? tokenizer.token_to_piece(vocab.eos) : "";
  BITSPLIT_ASSIGN_OR_RETURN(std::string text, chat_template.render_chat(messages, add_generation_prompt, bos, eos));
  EncodeOptions enc;
  enc.parse_special = true;
  enc.add_special = bos.empty() || !text.starts_with(bos);
  return tokenizer.encode(text, enc);
}

}  // namespace bitsplit::serve
