// Test helper of the conversion tests (tests/engine/convert/) and of the tests above them that
// convert a tiny model in process (tests/engine/eval/imatrix_covariance_test.cpp): a folder of
// its own per test, a tiny source model written into it, and a model file's logits.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bitsplit/model.h"
#include "gguf_testing.h"

namespace bitsplit::testing {

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("bitsplit_convert_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_tiny(const testing::TinyModelSpec& spec, const std::string& name = "src.gguf") {
    const std::string p = path(name);
    EXPECT_TRUE(testing::make_tiny_model(spec).write_file(p).is_ok());
    return p;
  }

  static std::vector<uint8_t> read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  std::filesystem::path dir_;
};

// The logits of a five-token prompt, the model loaded from `source` with `options`.
inline Result<std::vector<float>> logits_of(const WeightSource& source,
                                            const ModelLoadOptions& options = {.keep_planes = false}) {
  BITSPLIT_ASSIGN_OR_RETURN(Model m, Model::load(source, options));
  KvCache cache(m.config(), 5);
  return forward_pass(m, cache, Batch::causal(std::vector<int32_t>{1, 7, 3, 9, 4}, 0, true));
}

}  // namespace bitsplit::testing
