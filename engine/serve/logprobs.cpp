// Log-probabilities in the two OpenAI response formats.
#include "bitsplit/logprobs.h"

#include <algorithm>
#include <cmath>

#include "bitsplit/sampling.h"

namespace bitsplit::serve {

using nlohmann::json;

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t top) {
  float max = -INFINITY;
  for (float x : logits) max = std::max(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - double(max));
  const double log_sum = double(max) + std::log(sum);
  TokenLogprob r;
  r.token = token;
  r.logprob = float(double(logits[size_t(token)]) - log_sum);
  for (const auto& [logit, id] : top_logits(logits, top)) r.top.push_back({id, float(double(logit) - log_sum)});
  return r;
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

json completion_logprobs(std::span<const TokenLogprob> tokens, const PieceOf& piece, int64_t& offset) {
  json text = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& t : tokens) {
    const std::string p = piece(t.token);
    text.push_back(p);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) {
      const std::string q = piece(id);
      if (!top.contains(q)) top[q] = lp;  // pieces that print alike: the most probable one's
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += int64_t(p.size());
  }
  return {{"tokens", text}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs(std::span<const TokenLogprob> tokens, const PieceOf& piece) {
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    const std::string p = piece(t.token);
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string q = piece(id);
      top.push_back({{"token", q}, {"logprob", lp}, {"bytes", bytes_of(q)}});
    }
    content.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}, {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

}  // namespace bitsplit::serve
