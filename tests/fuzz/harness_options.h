// Fuzz harness for the small parsers of user-given options: the input's first byte picks one,
// the rest is its text or raw field values.
// - parse_byte_size ("512M", "1.5GiB"): a result is at most 2^63 and formats back to a size
//   that parses again;
// - spec::parse_budget: "auto" or 1..kMaxBudget, and a number comes back as its text;
// - DraftPolicy::validate: a valid policy's level sizes are positive and sum to at most its budget;
// - SamplingParams::validate: a valid setting gives a Sampler whose distribution over finite
//   logits sums to 1 and whose sample has non-zero probability.
#pragma once

#include <cmath>

#include "bitsplit/sampling.h"
#include "bitsplit/spec.h"
#include "bitsplit/vram_plan.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

using spec::DraftPolicy;
using spec::DraftShape;
using spec::kMaxBudget;
using spec::parse_budget;

inline void fuzz_byte_size(const std::string& text) {
  auto r = parse_byte_size(text);
  if (!r) {
    BITSPLIT_FUZZ_ASSERT(r.status().message().find(text) != std::string::npos || text.find('\0') != std::string::npos,
                         "the error does not name the text");
    return;
  }
  BITSPLIT_FUZZ_ASSERT(*r <= (uint64_t(1) << 63), "byte size above the documented bound");
  const std::string formatted = format_bytes(*r);
  std::string compact;  // "1.50 GiB" -> "1.50GiB"
  for (char c : formatted) if (c != ' ') compact += c;
  auto again = parse_byte_size(compact);
  BITSPLIT_FUZZ_ASSERT(again.is_ok(), "format_bytes gave '" + formatted + "', which does not parse");
}

inline void fuzz_budget(const std::string& text) {
  auto r = parse_budget(text);
  if (!r) return;
  if (!r->has_value()) {
    BITSPLIT_FUZZ_ASSERT(text == "auto", "nullopt for a text other than 'auto'");
    return;
  }
  const int32_t b = **r;
  BITSPLIT_FUZZ_ASSERT(b >= 1 && b <= kMaxBudget, "budget outside 1..kMaxBudget");
  BITSPLIT_FUZZ_ASSERT(std::to_string(b) == text, "budget does not come back as its text");
}

inline void fuzz_draft_policy(ByteReader& in) {
  DraftPolicy p;
  p.shape = (in.take<uint8_t>() & 1) ? DraftShape::kChain : DraftShape::kTree;
  p.budget = in.take<int32_t>();
  p.max_depth = in.take<int32_t>();
  p.top_k = in.take<int32_t>();
  p.width = in.take<int32_t>();
  const bool allow_no_draft = in.take<uint8_t>() & 1;
  if (!p.validate(allow_no_draft)) return;
  int64_t sum = 0;
  for (int32_t n : p.level_sizes(p.budget)) {
    BITSPLIT_FUZZ_ASSERT(n > 0, "an empty or negative level");
    sum += n;
  }
  BITSPLIT_FUZZ_ASSERT(sum <= p.budget, "levels hold more nodes than the budget");
}

inline void fuzz_sampling(ByteReader& in) {
  SamplingParams p;
  p.temperature = in.take<float>();
  p.top_k = in.take<int32_t>();
  p.top_p = in.take<float>();
  p.min_p = in.take<float>();
  p.repeat_penalty = in.take<float>();
  p.repeat_last_n = in.take<int32_t>();
  p.seed = in.take<uint64_t>();
  if (!p.validate()) return;
  // Finite logits (a model's output), at least one; a short history of token ids, some outside.
  const size_t n = 1 + in.take<uint8_t>() % 64;
  std::vector<float> logits(n);
  for (float& l : logits) {
    l = float(in.take<int16_t>()) / 256.0f;
  }
  std::vector<int32_t> history(in.take<uint8_t>() % 16);
  for (int32_t& t : history) t = in.take<int8_t>();
  Sampler sampler(p);
  const auto dist = sampler.distribution(logits, history);
  BITSPLIT_FUZZ_ASSERT(dist.size() == n, "distribution of the wrong size");
  double sum = 0;
  for (float q : dist) {
    BITSPLIT_FUZZ_ASSERT(q >= 0.0f && std::isfinite(q), "a negative or non-finite probability");
    sum += q;
  }
  BITSPLIT_FUZZ_ASSERT(std::fabs(sum - 1.0) < 1e-4, "probabilities sum to " + std::to_string(sum));
  const int32_t token = sampler.sample(logits, history);
  BITSPLIT_FUZZ_ASSERT(token >= 0 && size_t(token) < n && dist[size_t(token)] > 0.0f, "sampled a token of probability 0");
}

inline int run_options(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  ByteReader in(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: fuzz_byte_size(in.rest()); break;
    case 1: fuzz_budget(in.rest()); break;
    case 2: fuzz_draft_policy(in); break;
    default: fuzz_sampling(in); break;
  }
  return 0;
}

}  // namespace bitsplit::fuzz
