// The safetensors reader (engine/format/safetensors.h): well-formed shards and checkpoints read
// back exactly; hostile files written here (header past the end of the file, overlapping and
// out-of-range offsets, dtypes not read, a shard missing, an index naming a tensor no shard has)
// are each a clear error that names the file and the tensor.
#include <gtest/gtest.h>

#include <random>

#include "bitsplit/safetensors.h"
#include "safetensors_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using testing::StTensor;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The error of opening a shard made of `bytes`, or "" when it opens.
std::string shard_error(const std::vector<uint8_t>& bytes) {
  auto s = safetensors::parse_shard(gguf::storage_from_bytes(bytes), "x.safetensors");
  return s ? "" : s.status().message();
}

void expect_error(const std::string& message, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(message.empty()) << "expected an error";
  for (const char* p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

TEST(Safetensors, ReadsTensorsBackExactly) {
  const auto a = random_floats(3 * 7, 1), b = random_floats(5, 2);
  const std::vector<StTensor> tensors = {{"a", "F32", {3, 7}, testing::f32_bytes(a)},
                                         {"b", "BF16", {5}, testing::bf16_bytes(b)},
                                         {"empty", "F16", {0, 4}, {}}};
  auto shard = safetensors::parse_shard(gguf::storage_from_bytes(testing::safetensors_bytes(tensors)), "t.safetensors");
  ASSERT_TRUE(shard.is_ok()) << shard.status().message();
  ASSERT_EQ(shard->tensors.size(), 3u);
  const auto* ta = shard->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, safetensors::Dtype::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{3, 7}));
  const auto bytes = shard->bytes(*ta);
  ASSERT_EQ(bytes.size(), a.size() * 4);
  EXPECT_EQ(std::memcmp(bytes.data(), a.data(), bytes.size()), 0);
  const auto* tb = shard->find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, safetensors::Dtype::kBF16);
  EXPECT_EQ(testing::bf16_bytes(b), std::vector<uint8_t>(shard->bytes(*tb).begin(), shard->bytes(*tb).end()));
}

TEST(Safetensors, ReadsMetadata) {
  auto h = testing::safetensors_header({{"w", "F32", {2}, testing::f32_bytes({1, 2})}});
  h["__metadata__"] = {{"format", "pt"}};
  auto shard = safetensors::parse_shard(gguf::storage_from_bytes(testing::safetensors_bytes(h.dump(), testing::f32_bytes({1, 2}))), "m");
  ASSERT_TRUE(shard.is_ok()) << shard.status().message();
  EXPECT_EQ(shard->metadata.at("format"), "pt");
  h["__metadata__"] = {{"n", 3}};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), testing::f32_bytes({1, 2}))), {"__metadata__", "'n'"});
}

TEST(Safetensors, HeaderLongerThanTheFileIsAnError) {
  auto bytes = testing::safetensors_bytes({{"w", "F32", {2}, testing::f32_bytes({1, 2})}});
  bytes[0] = 0xff;
  bytes[1] = 0x7f;  // 32767 bytes of header in a file of ~80
  expect_error(shard_error(bytes), {"x.safetensors", "header length 32767", "runs past the end of the file"});
  std::fill(bytes.begin(), bytes.begin() + 8, uint8_t(0xff));
  expect_error(shard_error(bytes), {"more than the", "a safetensors header may have"});
  expect_error(shard_error({1, 2, 3}), {"too short"});
}

TEST(Safetensors, OffsetsOutOfRangeAreAnError) {
  const auto data = testing::f32_bytes({1, 2, 3, 4});
  nlohmann::json h = {{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {4, 20}}}}};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"tensor 'w'", "run past the end of the data area (16 bytes)"});
  h["w"]["data_offsets"] = {12, 4};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"tensor 'w'", "end before they begin"});
  h["w"]["data_offsets"] = {0, -4};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"tensor 'w'", "data_offsets"});
}

TEST(Safetensors, OverlappingTensorsAreAnError) {
  const auto data = testing::f32_bytes({1, 2, 3, 4});
  nlohmann::json h = {{"a", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}},
                      {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"'a' [0, 12)", "'b' [8, 16)", "overlap"});
}

TEST(Safetensors, ShapeThatDisagreesWithTheBytesIsAnError) {
  const auto data = testing::f32_bytes({1, 2, 3, 4});
  nlohmann::json h = {{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 16}}}}};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"tensor 'w'", "is 12 bytes", "span 16"});
  h["w"]["shape"] = {uint64_t(1) << 40, uint64_t(1) << 40};  // overflows 64 bits as a product
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"tensor 'w'", "more bytes than the data area"});
  h["w"]["shape"] = {1, 1, 1, 1, 4};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"tensor 'w'", "5 dimensions"});
  h["w"]["shape"] = "4";
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"tensor 'w'", "\"shape\""});
}

TEST(Safetensors, DtypesNotReadAreAnErrorNamingTensorAndDtype) {
  const auto data = testing::f32_bytes({1, 2});
  for (const char* dtype : {"I32", "F8_E4M3", "U8"}) {
    nlohmann::json h = {{"layer.w", {{"dtype", dtype}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
    expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)),
                 {"tensor 'layer.w'", dtype, "supported: BF16, F16, F32"});
  }
  nlohmann::json h = {{"w", {{"dtype", "Q9"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  expect_error(shard_error(testing::safetensors_bytes(h.dump(), data)), {"'Q9' (unknown)"});
}

TEST(Safetensors, HeaderThatIsNotAnObjectIsAnError) {
  expect_error(shard_error(testing::safetensors_bytes("[1, 2]", {})), {"not a JSON object"});
  expect_error(shard_error(testing::safetensors_bytes("{\"a\": ", {})), {"not valid JSON"});
  expect_error(shard_error(testing::safetensors_bytes("{\"a\": 3}", {})), {"tensor 'a'", "not an object"});
}

class SafetensorsFolder : public ::testing::Test {
 protected:
  // Two shards and their index; `w2` lives in the second.
  void write_two_shards() {
    testing::write_bytes(dir.file("model-00001-of-00002.safetensors"),
                         testing::safetensors_bytes({{"w1", "F32", {2}, testing::f32_bytes({1, 2})},
                                                     {"w0", "F32", {1}, testing::f32_bytes({5})}}));
    testing::write_bytes(dir.file("model-00002-of-00002.safetensors"),
                         testing::safetensors_bytes({{"w2", "F16", {1}, {0, 0x3c}}}));
    write_index({{"w0", "model-00001-of-00002.safetensors"},
                 {"w1", "model-00001-of-00002.safetensors"},
                 {"w2", "model-00002-of-00002.safetensors"}});
  }
  void write_index(const nlohmann::json& map) {
    testing::write_text(dir.file("model.safetensors.index.json"), nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump());
  }
  std::string open_error() {
    auto c = safetensors::open_checkpoint(dir.path().string());
    return c ? "" : c.status().message();
  }
  testing::TempDir dir{"safetensors"};
};

TEST_F(SafetensorsFolder, OpensShardsThroughTheIndex) {
  write_two_shards();
  auto c = safetensors::open_checkpoint(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  ASSERT_EQ(c->shards.size(), 2u);
  ASSERT_EQ(c->order.size(), 3u);
  // Shard order, then data order within a shard.
  EXPECT_EQ(c->entry(c->order[0]).name, "w1");
  EXPECT_EQ(c->entry(c->order[1]).name, "w0");
  EXPECT_EQ(c->entry(c->order[2]).name, "w2");
  const auto& w2 = c->by_name.at("w2");
  EXPECT_EQ(w2.shard, 1u);
  EXPECT_EQ(c->entry(w2).dtype, safetensors::Dtype::kF16);
}

TEST_F(SafetensorsFolder, OpensASingleFile) {
  testing::write_bytes(dir.file("model.safetensors"), testing::safetensors_bytes({{"w", "F32", {1}, testing::f32_bytes({3})}}));
  auto c = safetensors::open_checkpoint(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->by_name.count("w"), 1u);
}

TEST_F(SafetensorsFolder, MissingShardIsAnError) {
  write_two_shards();
  std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
  expect_error(open_error(), {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "missing"});
}

TEST_F(SafetensorsFolder, IndexNamingATensorNoShardHasIsAnError) {
  write_two_shards();
  write_index({{"w0", "model-00001-of-00002.safetensors"},
               {"w1", "model-00001-of-00002.safetensors"},
               {"w2", "model-00002-of-00002.safetensors"},
               {"lm_head.weight", "model-00002-of-00002.safetensors"}});
  expect_error(open_error(), {"tensor 'lm_head.weight'", "model-00002-of-00002.safetensors", "no such tensor"});
}

TEST_F(SafetensorsFolder, TensorTheIndexDoesNotPlaceIsAnError) {
  write_two_shards();
  write_index({{"w0", "model-00001-of-00002.safetensors"}, {"w2", "model-00002-of-00002.safetensors"}});
  expect_error(open_error(), {"tensor 'w1'", "does not name"});
}

TEST_F(SafetensorsFolder, ShardNamesOutsideTheFolderAreRefused) {
  write_two_shards();
  write_index({{"w0", "../model-00001-of-00002.safetensors"}});
  expect_error(open_error(), {"'../model-00001-of-00002.safetensors'", "not a file name in the folder"});
}

TEST_F(SafetensorsFolder, FolderWithoutWeightsIsAnError) {
  expect_error(open_error(), {"has neither model.safetensors.index.json nor model.safetensors"});
  testing::write_text(dir.file("model.safetensors.index.json"), "{\"weight_map\": 3}");
  expect_error(open_error(), {"no \"weight_map\" object"});
}

}  // namespace
}  // namespace bitsplit
