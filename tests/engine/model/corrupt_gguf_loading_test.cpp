// GGUF files with random byte flips: whatever still parses is read tensor by tensor and handed
// to the tokenizer and the model loader, which may refuse it but never crash (the GGUF reader's
// own errors: tests/engine/format/gguf_corrupt_test.cpp). Also runs under ASan/UBSan in CI.
#include <gtest/gtest.h>

#include <random>

#include "bitsplit/gguf.h"
#include "bitsplit/model.h"
#include "bitsplit/tokenizer.h"
#include "gguf_testing.h"

namespace bitsplit::gguf {
namespace {

// Everything a model consumer does with a file that parsed: read every tensor, build the
// tokenizer and the model. Any of it may fail, none of it may crash.
void exercise(const File& f) {
  for (const auto& t : f.tensors()) (void)f.read_f32(t);
  (void)Tokenizer::from_metadata(f.metadata());
  (void)Model::load(*weights_from_gguf(f));
}

TEST(GgufCorrupt, SeededRandomByteFlipsNeverCrash) {
  const auto full = testing::tiny_model_bytes({});
  std::mt19937_64 rng(20261130);
  int parsed = 0, rejected = 0;
  for (int c = 0; c < 600; ++c) {
    auto bytes = full;
    // Half the cases hit the header (where the structure is), half anywhere.
    const size_t span = c % 2 ? bytes.size() : std::min<size_t>(bytes.size(), 2048);
    const int flips = 1 + int(rng() % 8);
    for (int i = 0; i < flips; ++i) bytes[rng() % span] ^= uint8_t(1u << (rng() % 8));
    auto f = File::parse(storage_from_bytes(bytes), "bad.gguf");
    if (f.is_ok()) {
      ++parsed;
      exercise(*f);
    } else {
      ++rejected;
      ASSERT_FALSE(f.status().message().empty());
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace bitsplit::gguf
