// Test helper of the delta file tests (tests/engine/format/delta_format_test.cpp and
// tests/engine/convert/delta_base_identity_test.cpp): their fixture, which makes fine-tunes of a
// tiny base in a folder of its own.
#pragma once

#include <gtest/gtest.h>

#include <random>

#include "bitsplit/gguf.h"
#include "bitsplit/weights.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit::testing {

class DeltaFileTest : public ::testing::Test {
 protected:
  // A "fine-tune" of the tiny base: every projection and the embedding moved by a small
  // random delta, attn_norm of layer 0 changed, ffn_norm of layer 1 left identical.
  static gguf::Writer finetune(const WeightSource& base, uint64_t seed) {
    gguf::Writer w;
    for (const auto& [k, v] : base.metadata().entries())
      if (k != "general.alignment") w.metadata().set(k, v);
    w.metadata().set("general.name", gguf::Value::string("tiny-ft"));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (const auto& t : base.tensors()) {
      auto v = base.load_f32(t);
      BITSPLIT_CHECK(v.is_ok());
      if (t.name != "blk.1.ffn_norm.weight")
        for (auto& x : *v) x += dist(rng);
      BITSPLIT_CHECK(w.add_tensor(t.name, gguf::TensorType::F32, t.dims, testing::encode_tensor(gguf::TensorType::F32, *v))
                         .is_ok());
    }
    return w;
  }
  testing::TempDir dir_{"delta"};
};

}  // namespace bitsplit::testing
