// The fuzz harnesses (tests/fuzz/harness_*.h) over their seeds and over every input the fuzzers
// once failed on (tests/data/fuzz/<target>/), so the normal and sanitizer builds replay the
// corpus without clang or libFuzzer; and each finding pinned down by a direct test.
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <fstream>
#include <sstream>

#include "bitsplit/cpu.h"
#include "bitsplit/model.h"
#include "bitsplit/planes.h"
#include "bitsplit/sampling.h"
#include "bitsplit/spec.h"
#include "harnesses.h"
#include "seeds.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return {s.begin(), s.end()};
}

// Committed inputs of a target: hand-made seeds and the inputs of past findings.
std::vector<fuzz::Seed> committed_inputs(const std::string& target) {
  std::vector<fuzz::Seed> out;
  for (const std::string& dir : {testing::source_dir() + "/tests/fuzz/seeds/" + target,
                                testing::source_dir() + "/tests/data/fuzz/" + target}) {
    if (!std::filesystem::is_directory(dir)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& p : files) out.push_back({p.string(), read_bytes(p)});
  }
  return out;
}

class FuzzCorpus : public ::testing::TestWithParam<std::string> {};

// The split-set seeds are real two-part sets written by write_split_set (one per model kind):
// the harness then starts from sets that open, not only from noise.
TEST(FuzzSeeds, SplitSetSeedsAreTwoPartSetsThatOpen) {
  const auto seeds = fuzz::make_seeds("split_set", "");
  ASSERT_EQ(seeds.size(), 2u);
  for (const auto& s : seeds) {
    SCOPED_TRACE(s.name);
    ASSERT_GT(s.bytes.size(), 4u);
    uint32_t first = 0;
    std::memcpy(&first, s.bytes.data(), 4);
    ASSERT_LT(size_t(first) + 4, s.bytes.size());
    fuzz::run_split_set(s.bytes.data(), s.bytes.size());
    auto set = open_weights(split_part_path(fuzz::split_set_dir() + "/s", 0, 2));
    ASSERT_TRUE(set.is_ok()) << set.status().message();
    EXPECT_NE((*set)->describe().find("split in 2 parts"), std::string::npos);
  }
}

// The LongRoPE seed is a file that loads (the fuzzer then mutates the factors, their context and
// attention factor from a working start).
TEST(FuzzSeeds, LongRopeSeedLoads) {
  for (const auto& s : fuzz::make_seeds("model", "")) {
    if (s.name != "phi3-longrope") continue;
    auto file = gguf::File::parse(gguf::storage_from_bytes(s.bytes), "phi3-longrope.gguf");
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    const auto source = weights_from_gguf(std::move(*file));
    auto model = Model::load(*source);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    EXPECT_EQ(model->config().rope_original_context, 4);
    EXPECT_EQ(model->rope_freq_factors(5).size(), 4u);
    return;
  }
  FAIL() << "no phi3-longrope seed";
}

// The importance-matrix seed carries a covariance and a weight sharing it, so the fuzzer mutates
// that reader from a file it accepts.
TEST(FuzzSeeds, ImatrixSeedHasSharedCovariances) {
  const auto seeds = fuzz::make_seeds("imatrix", "");
  ASSERT_FALSE(seeds.empty());
  fuzz::MemFile mem(seeds[0].bytes.data(), seeds[0].bytes.size());
  auto cov = read_input_covariances(mem.path());
  ASSERT_TRUE(cov.is_ok()) << cov.status().message();
  ASSERT_EQ(cov->size(), 2u);
  EXPECT_EQ(cov->at("blk.0.attn_k.weight"), cov->at("blk.0.attn_v.weight"));
  EXPECT_EQ(cov->at("blk.0.attn_k.weight")->n, 8);
  EXPECT_EQ(cov->at("blk.0.attn_k.weight")->data[9], 2.0f);
}

// A failing property aborts with its message (harness_common.h), as under libFuzzer.
TEST_P(FuzzCorpus, SeedsAndPastFindingsRunClean) {
  const std::string target = GetParam();
  const fuzz::Harness run = fuzz::harness(target);
  ASSERT_NE(run, nullptr) << target;
  std::vector<fuzz::Seed> inputs = fuzz::make_seeds(target, testing::shared_dir());
  ASSERT_FALSE(inputs.empty()) << "no seeds for " << target;
  for (auto& s : committed_inputs(target)) inputs.push_back(std::move(s));
  for (const auto& input : inputs) {
    SCOPED_TRACE(input.name);
    run(input.bytes.data(), input.bytes.size());
    // Every prefix of the small seeds too: truncations are what corrupt files look like most.
    if (input.bytes.size() <= 512) {
      for (size_t n = 0; n < input.bytes.size(); ++n) run(input.bytes.data(), n);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(fuzz::fuzz_targets()),
                         [](const auto& info) { return info.param; });

// Finding (fuzz_model, tests/data/fuzz/model/nan-activation-quantized-to-int8): a model file with
// non-finite weights makes NaN activations, which the scalar quantiser converted to int8
// (undefined behaviour; UBSan: "-nan is outside the range of representable values"). NaN now
// becomes -127, as in the SIMD tiers.
TEST(FuzzFindings, NanActivationQuantizesToTheLowerBound) {
  std::vector<float> x = {1.0f, NAN, -0.5f, 0.25f};
  x.resize(32, 0.125f);
  cpu::QuantizedActivations qa;
  cpu::quantize_activations_ref(x.data(), 1, int64_t(x.size()), 32, qa);
  EXPECT_EQ(qa.q[0], 127);
  EXPECT_EQ(qa.q[1], -127);
  EXPECT_EQ(qa.q[2], -64);  // -63.5 rounds away from zero
  EXPECT_FLOAT_EQ(qa.scale[0], 1.0f / 127.0f);
}

// Finding (fuzz_options, tests/data/fuzz/options/subnormal-repeat-penalty-nan-distribution): a
// repetition penalty of 1.5e-39 passed validation; a logit divided by it overflowed to inf and
// the distribution became NaN (inf - inf). The penalty is now bounded to [0.001, 1000].
TEST(FuzzFindings, RepetitionPenaltyThatOverflowsLogitsIsRejected) {
  for (float penalty : {1.5e-39f, 1e-30f, 1e-4f, 1e4f, 1e38f, INFINITY, NAN}) {
    SamplingParams p;
    p.repeat_penalty = penalty;
    const Status s = p.validate();
    ASSERT_FALSE(s.is_ok()) << penalty;
    EXPECT_NE(s.message().find("repetition penalty"), std::string::npos) << s.message();
  }
  for (float penalty : {kMinRepeatPenalty, 0.5f, 1.0f, 1.3f, kMaxRepeatPenalty}) {
    SamplingParams p;
    p.repeat_penalty = penalty;
    EXPECT_TRUE(p.validate().is_ok()) << penalty;
    // The extremes keep a distribution over large logits finite.
    p.temperature = 1.0f;
    p.repeat_last_n = 4;
    Sampler sampler(p);
    const std::vector<float> logits = {30.0f, -30.0f, 5.0f};
    const std::vector<int32_t> history = {0, 1};
    double sum = 0;
    for (float q : sampler.distribution(logits, history)) {
      ASSERT_TRUE(std::isfinite(q)) << penalty;
      sum += q;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << penalty;
  }
}

// Finding (fuzz_options, tests/data/fuzz/options/tree-level-size-int-overflow): a tree policy
// with top_k near 2^30 passes validate(), and DraftPolicy::level_sizes multiplied the frontier by
// it in int32 (signed overflow; a wrapped product of 0 gave empty levels). Now in 64 bits.
TEST(FuzzFindings, TreeLevelSizesWithAHugeTopK) {
  spec::DraftPolicy p;
  p.shape = spec::DraftShape::kTree;
  p.budget = 16;
  p.max_depth = 8;
  p.top_k = 1 << 30;
  p.width = 4;
  ASSERT_TRUE(p.validate().is_ok());
  EXPECT_EQ(p.level_sizes(16), (std::vector<int32_t>{4, 4, 4, 4}));
}

// Finding (fuzz_options, tests/data/fuzz/options/byte-size-9e18-formats-above-the-bound):
// "9e18" parsed (the bound was 9e18 bytes) and format_bytes printed it as "8185452.32 TiB",
// rounded up past the bound, so a printed size did not parse again. The bound is now 2^63,
// which no rounding of a size in range can pass.
TEST(FuzzFindings, APrintedByteSizeParsesAgain) {
  for (const char* text : {"9e18", "9223372036854775808", "8388607.999T"}) {
    auto r = parse_byte_size(text);
    ASSERT_TRUE(r.is_ok()) << text << ": " << r.status().message();
    std::string compact;
    for (char c : format_bytes(*r)) if (c != ' ') compact += c;
    auto again = parse_byte_size(compact);
    EXPECT_TRUE(again.is_ok()) << text << " -> " << compact << ": " << again.status().message();
  }
  EXPECT_FALSE(parse_byte_size("9223372036854777856").is_ok()) << "the next double above 2^63";
  EXPECT_FALSE(parse_byte_size("8388609T").is_ok());
}

std::unique_ptr<WeightSource> seed_model(const std::string& name) {
  for (auto& seed : fuzz::make_seeds("model", "")) {
    if (seed.name != name) continue;
    auto f = gguf::File::parse(gguf::storage_from_bytes(std::move(seed.bytes)), name);
    BITSPLIT_CHECK(f.is_ok(), f.status().message());
    return weights_from_gguf(std::move(*f));
  }
  BITSPLIT_CHECK(false, "no seed " + name);
  return nullptr;
}

// `source`'s tensors under the metadata `m`, as an in-memory weight source ("broken.gguf").
void rewrite_metadata(WeightSource& source, const gguf::Metadata& m, std::unique_ptr<WeightSource>& out) {
  gguf::Writer w;
  for (const auto& [k, v] : m.entries()) w.metadata().set(k, v);
  for (const auto& t : source.tensors()) {
    auto bytes = source.raw_bytes(t);
    ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, {bytes->begin(), bytes->end()}).is_ok());
  }
  out = weights_from_gguf(*gguf::File::parse(gguf::storage_from_bytes(w.to_bytes()), "broken.gguf"));
}

// Finding (fuzz_model, tests/data/fuzz/model/huge-block-count): block_count = 1.4e12 in a file
// of 17 KB made Model::load resize its layer table to it (a 1.4 TB allocation) before loading any
// layer. The block count is now checked against the file's tensors (and bounded to 2^31, as
// every dimension); 2^30 here (a 360 GB layer table before the fix) meets the first check.
TEST(FuzzFindings, BlockCountTheFileCannotHoldIsRejected) {
  auto source = seed_model("llama-f32");
  ASSERT_TRUE(read_model_config(*source).is_ok());
  gguf::Metadata m = source->metadata();
  m.set("llama.block_count", gguf::Value::u64(uint64_t(1) << 30));
  std::unique_ptr<WeightSource> broken;
  ASSERT_NO_FATAL_FAILURE(rewrite_metadata(*source, m, broken));
  auto config = read_model_config(*broken);
  ASSERT_FALSE(config.is_ok());
  EXPECT_NE(config.status().message().find("llama.block_count 1073741824 is more layers than the file has tensors"), std::string::npos)
      << config.status().message();
}

// Found while fuzzing the bit-split path (tests/data/fuzz/model/bitsplit-feed-forward-length-2p40):
// load_split_planes sized a projection's buffers from (in, out), which come from the metadata,
// before checking that the file's planes have that shape (feed_forward_length = 2^40: an 8 TB
// allocation). The planes are now checked first; the configuration also bounds every
// dimension to 2^31.
TEST(FuzzFindings, SplitPlanesAreCheckedBeforeAnythingIsSized) {
  auto source = seed_model("bitsplit-g32-d2-r8");
  auto format = read_split_format(source->metadata());
  ASSERT_TRUE(format.is_ok() && format->has_value());
  ASSERT_TRUE(load_split_planes(*source, "blk.0.ffn_gate", 32, 32, **format).is_ok());
  auto planes = load_split_planes(*source, "blk.0.ffn_gate", 32, int64_t(1) << 40, **format);
  ASSERT_FALSE(planes.is_ok());
  EXPECT_NE(planes.status().message().find("blk.0.ffn_gate.draft_codes"), std::string::npos) << planes.status().message();

  gguf::Metadata m = source->metadata();
  m.set("llama.feed_forward_length", gguf::Value::u64(uint64_t(1) << 40));
  std::unique_ptr<WeightSource> broken;
  ASSERT_NO_FATAL_FAILURE(rewrite_metadata(*source, m, broken));
  auto config = read_model_config(*broken);
  ASSERT_FALSE(config.is_ok());
  EXPECT_NE(config.status().message().find("feed_forward_length is 1099511627776, more than 2^31"), std::string::npos)
      << config.status().message();
}

}  // namespace
}  // namespace bitsplit
