// Test helper of the split GGUF tests (tests/engine/format/split_gguf_test.cpp and
// tests/engine/decode/split_gguf_decoding_test.cpp): a weight source written as a split set, and
// their fixture (skipped without the trained fixture base; a folder of its own).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "bitsplit/split_gguf.h"
#include "bitsplit/weights.h"
#include "test_paths.h"

namespace bitsplit::testing {

// Writes `source` as a split set of `parts` parts (by tensor count) under prefix; returns the paths.
inline std::vector<std::string> split(const WeightSource& source, const std::string& prefix, int parts) {
  gguf::Writer w;
  for (const auto& [key, value] : source.metadata().entries()) w.metadata().set(key, value);
  for (const auto& t : source.tensors()) EXPECT_TRUE(w.add_tensor_info(t.name, t.type, t.dims).is_ok());
  const SplitLimits limits{.max_tensors = (source.tensors().size() + size_t(parts) - 1) / size_t(parts)};
  auto paths = write_split_set(w, prefix, limits, [&](size_t i, const gguf::TensorInfo&) -> Result<std::vector<uint8_t>> {
    BITSPLIT_ASSIGN_OR_RETURN(auto bytes, source.raw_bytes(source.tensors()[i]));
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  });
  EXPECT_TRUE(paths.is_ok()) << paths.status().message();
  return paths ? *paths : std::vector<std::string>{};
}

class SplitGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
    if (!std::filesystem::exists(base)) GTEST_SKIP() << base << " is missing";
  }
  TempDir dir{"split-gguf"};
};

}  // namespace bitsplit::testing
