// Shared by the device-draft tests (emulated on the CPU, and on a GPU): a prompt batch and a
// tree level after it, and the comparison of a DeviceDraft's logits with the CPU draft's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "bitsplit/device_draft.h"
#include "bitsplit/draft_description.h"
#include "bitsplit/model.h"

namespace bitsplit::testing {

// The prompt as one causal batch (all logits), then a tree level of three rows after it: two
// siblings at the next position and a child of the first.
inline std::vector<Batch> prompt_then_tree_level(const std::vector<int32_t>& prompt) {
  const int32_t n = int32_t(prompt.size());
  Batch tree;
  tree.tokens = {17, 300, 45};
  tree.positions = {n, n, n + 1};
  tree.slots = {n, n + 1, n + 2};
  tree.kv_len = n + 3;
  tree.want_logits = {1, 1, 1};
  tree.mask.assign(static_cast<size_t>(3 * tree.kv_len), 0);
  for (int r = 0; r < 3; ++r) std::fill_n(tree.mask.begin() + r * tree.kv_len, n, 1);
  tree.mask[size_t(n)] = 1;                      // sibling 0 sees itself
  tree.mask[size_t(tree.kv_len + n + 1)] = 1;    // sibling 1 sees itself
  tree.mask[size_t(2 * tree.kv_len + n)] = 1;    // the child sees its parent
  tree.mask[size_t(2 * tree.kv_len + n + 2)] = 1;  // and itself
  return {Batch::causal(prompt, 0, true), tree};
}

// The whole draft of `m` (with a variant) on m's backend device, as speculative decoding asks
// for it (engine/decode/draft_source.cpp), for a sequence of `slots` positions (a KvCache of that size).
inline Result<std::shared_ptr<DeviceDraft>> device_draft_of(const Model& m, int64_t slots, const Variant* variant = nullptr) {
  return m.backend().make_device_draft([&] { return describe_device_draft(m, variant, slots); }, slots,
                                       variant ? nullptr : &m);
}

// Both batches through the CPU draft (forward_pass, Pass::kDraft, the variant if any) and
// the device draft: every row's logits within rel_tol of the row's largest |logit| (0: bitwise), the same
// argmax, and the device's top-1 that argmax.
inline void expect_device_draft_matches_cpu(const Model& m, DeviceDraft& dev, const std::vector<int32_t>& prompt,
                                            int64_t slots, float rel_tol, const Variant* variant = nullptr) {
  KvCache cache(m.config(), slots);
  const int64_t vocab = m.config().n_vocab;
  for (const Batch& b : prompt_then_tree_level(prompt)) {
    auto want = forward_pass(m, cache, b, nullptr, Pass::kDraft, variant);
    ASSERT_TRUE(want.is_ok()) << want.status().message();
    DraftTopK top;
    std::vector<float> got;
    ASSERT_TRUE(dev.forward(draft_rows(b), 4, top, &got).is_ok());
    ASSERT_EQ(got.size(), want->size());
    for (int64_t r = 0; r < b.size(); ++r) {
      const float* w = want->data() + r * vocab;
      const float* g = got.data() + r * vocab;
      float scale = 0, diff = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        scale = std::max(scale, std::fabs(w[i]));
        diff = std::max(diff, std::fabs(w[i] - g[i]));
      }
      EXPECT_LE(diff, rel_tol * scale) << "row " << r << " of a " << b.size() << "-row batch";
      const int32_t best = int32_t(std::max_element(g, g + vocab) - g);
      EXPECT_EQ(best, int32_t(std::max_element(w, w + vocab) - w)) << "row " << r;
      EXPECT_EQ(top.tokens[size_t(r * 4)], best) << "row " << r;
    }
  }
}

// Batch invariance: two sibling rows after the prompt give bit-identical logits whether they
// run together or each alone (every kernel computes a row independently of its batch).
inline void expect_device_draft_batch_invariant(DeviceDraft& dev, const std::vector<int32_t>& prompt, int64_t vocab) {
  DraftTopK top;
  std::vector<float> ignored, both, alone;
  ASSERT_TRUE(dev.forward(draft_rows(Batch::causal(prompt, 0, true)), 1, top, &ignored).is_ok());  // K/V of the prompt
  const int32_t n = int32_t(prompt.size());
  auto siblings = [&](std::vector<int32_t> rows) {
    Batch b;
    b.kv_len = n + 2;
    for (int32_t r : rows) {
      b.tokens.push_back(r == 0 ? 17 : 300);
      b.positions.push_back(n);
      b.slots.push_back(n + r);
      b.want_logits.push_back(1);
      std::vector<uint8_t> mask(static_cast<size_t>(b.kv_len), 0);
      std::fill_n(mask.begin(), n, 1);
      mask[size_t(n + r)] = 1;
      b.mask.insert(b.mask.end(), mask.begin(), mask.end());
    }
    return b;
  };
  ASSERT_TRUE(dev.forward(draft_rows(siblings({0, 1})), 1, top, &both).is_ok());
  for (int32_t r : {0, 1}) {
    ASSERT_TRUE(dev.forward(draft_rows(siblings({r})), 1, top, &alone).is_ok());
    ASSERT_EQ(alone.size(), size_t(vocab));
    EXPECT_EQ(0, std::memcmp(alone.data(), both.data() + r * vocab, size_t(vocab) * sizeof(float)))
        << "row " << r << " alone differs from the same row in a batch of two";
  }
}

}  // namespace bitsplit::testing
