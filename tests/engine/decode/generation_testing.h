// Greedy decoding for the tests of decoding: plain and speculative, the tokens collected. The
// speculative helper takes the options as the test sets them (shape, budget, depth, variant…).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "bitsplit/generate.h"
#include "bitsplit/speculative.h"

namespace bitsplit::testing {

// n tokens of plain greedy decoding (of the variant, when given).
inline std::vector<int32_t> plain_greedy(const Model& m, const std::vector<int32_t>& prompt, int n,
                                         const Variant* variant = nullptr) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  GenerateOptions o;
  o.n_predict = n;
  o.variant = variant;
  std::vector<int32_t> out;
  auto r = generate(m, prompt, o, s, [&](int32_t t) { out.push_back(t); return true; });
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return out;
}

// Greedy speculative decoding of `target` drafted by `draft` (o.n_predict tokens, appended to
// *out); the result for the test to check (acceptance, draft pass, transfers).
inline Result<SpeculativeResult> speculative_greedy(const Model& target, const Model& draft,
                                                    const std::vector<int32_t>& prompt, const SpeculativeOptions& o,
                                                    std::vector<int32_t>* out) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  return generate_speculative(target, draft, prompt, o, s, [&](int32_t t) { out->push_back(t); return true; });
}

}  // namespace bitsplit::testing
