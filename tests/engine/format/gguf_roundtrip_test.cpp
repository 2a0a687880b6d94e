// GGUF writer -> reader round trips, tensor decoding, and the real stories260K file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit::gguf {
namespace {

Value nested_array() {
  std::vector<Value> inner1 = {Value::i32(1), Value::i32(-2)};
  std::vector<Value> inner2 = {Value::string_array({"x", "", "z"})};
  return Value::array(ValueType::kArray, {Value::array(ValueType::kInt32, inner1),
                                          Value::array(ValueType::kArray, inner2)});
}

Writer every_value_type() {
  Writer w;
  auto& m = w.metadata();
  m.set("u8", {ValueType::kUint8, uint64_t{200}});
  m.set("i8", {ValueType::kInt8, int64_t{-100}});
  m.set("u16", {ValueType::kUint16, uint64_t{65000}});
  m.set("i16", {ValueType::kInt16, int64_t{-32000}});
  m.set("u32", Value::u32(4000000000u));
  m.set("i32", Value::i32(-2000000000));
  m.set("u64", Value::u64(0xfedcba9876543210ull));
  m.set("i64", {ValueType::kInt64, int64_t{-(int64_t{1} << 62)}});
  m.set("f32", Value::f32(3.25f));
  m.set("f64", {ValueType::kFloat64, 2.718281828459045});
  m.set("bool", Value::boolean(true));
  m.set("string", Value::string("h\xc3\xa9llo\n"));
  m.set("empty_string", Value::string(""));
  m.set("strings", Value::string_array({"a", "bc", "", "\xe2\x96\x81x"}));
  m.set("floats", Value::f32_array({1.5f, -0.0f, 1e30f}));
  m.set("empty_array", Value::array(ValueType::kUint8, {}));
  m.set("nested", nested_array());
  return w;
}

TEST(GgufRoundTrip, EveryValueTypeAndNestedArrays) {
  for (uint64_t alignment : {uint64_t{32}, uint64_t{64}, uint64_t{1}}) {
    Writer w = every_value_type();
    w.set_alignment(alignment);
    std::vector<float> t1 = {1, 2, 3, 4, 5, 6};
    ASSERT_TRUE(w.add_tensor("t1", TensorType::F32, {3, 2}, testing::encode_tensor(TensorType::F32, t1)).is_ok());
    ASSERT_TRUE(w.add_tensor("t2", TensorType::F16, {5}, testing::encode_tensor(TensorType::F16, {1, 2, 3, 4, 5})).is_ok());
    const auto bytes = w.to_bytes();
    auto f = File::parse(storage_from_bytes(bytes), "mem.gguf");
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), alignment);
    // Everything we wrote reads back identically (general.alignment is added when not 32).
    for (const auto& [key, value] : w.metadata().entries()) {
      const Value* got = f->metadata().find(key);
      ASSERT_NE(got, nullptr) << key;
      EXPECT_EQ(*got, value) << key;
    }
    ASSERT_EQ(f->tensors().size(), 2u);
    EXPECT_EQ(f->tensors()[0].dims, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    EXPECT_EQ(f->tensors()[1].offset % alignment, 0u);
    auto v = f->read_f32(f->tensors()[0]);
    ASSERT_TRUE(v.is_ok());
    EXPECT_EQ(*v, t1);
  }
}

TEST(GgufRoundTrip, TypedGettersReportKeyAndType) {
  Writer w = every_value_type();
  auto f = File::parse(storage_from_bytes(w.to_bytes()), "mem.gguf");
  ASSERT_TRUE(f.is_ok());
  const Metadata& m = f->metadata();
  EXPECT_EQ(*m.get_int("u32"), 4000000000);
  EXPECT_EQ(*m.get_int("i8"), -100);
  EXPECT_DOUBLE_EQ(*m.get_float("f32"), 3.25);
  EXPECT_EQ(*m.get_string("string"), "h\xc3\xa9llo\n");
  EXPECT_EQ(*m.get_string_array("strings"), (std::vector<std::string>{"a", "bc", "", "\xe2\x96\x81x"}));
  auto bad = m.get_int("string");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'string' has type string, expected an integer"), std::string::npos);
  auto missing = m.get_string("nope");
  EXPECT_NE(missing.status().message().find("'nope' is missing"), std::string::npos);
  EXPECT_EQ(*m.get_int_or("nope", 7), 7);
}

TEST(GgufRoundTrip, DecodesF16Bf16AndQ8_0) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  std::vector<float> x(64);
  for (float& v : x) v = dist(rng);
  Writer w;
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0}) {
    ASSERT_TRUE(w.add_tensor(tensor_type_name(t), t, {32, 2}, testing::encode_tensor(t, x)).is_ok());
  }
  auto f = File::parse(storage_from_bytes(w.to_bytes()), "mem.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto f32 = *f->read_f32(*f->find_tensor("F32"));
  auto f16 = *f->read_f32(*f->find_tensor("F16"));
  auto bf16 = *f->read_f32(*f->find_tensor("BF16"));
  auto q8 = *f->read_f32(*f->find_tensor("Q8_0"));
  std::vector<quant::BlockQ8_0> blocks(2);
  quant::quantize_q8_0_ref(x, blocks);
  std::vector<float> q8_ref(64);
  quant::dequantize_q8_0_ref(blocks, q8_ref);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(f32[i], x[i]);
    EXPECT_EQ(f16[i], quant::fp16_to_fp32(quant::fp32_to_fp16(x[i])));
    EXPECT_EQ(bf16[i], quant::bf16_to_fp32(quant::fp32_to_bf16(x[i])));
    EXPECT_EQ(q8[i], q8_ref[i]);
  }
}

TEST(GgufRoundTrip, UnsupportedTensorTypeIsNamedOnLoad) {
  Writer w;
  ASSERT_TRUE(w.add_tensor("blk.0.ffn_up.weight", TensorType::IQ2_XXS, {256, 2}, std::vector<uint8_t>(2 * 66, 0)).is_ok());
  auto f = File::parse(storage_from_bytes(w.to_bytes()), "q4k.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto r = f->read_f32(f->tensors()[0]);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'blk.0.ffn_up.weight' has type IQ2_XXS"), std::string::npos) << r.status().message();
}

TEST(GgufRoundTrip, WriterRejectsWrongSizes) {
  Writer w;
  EXPECT_FALSE(w.add_tensor("a", TensorType::F32, {3}, std::vector<uint8_t>(8)).is_ok());
  EXPECT_FALSE(w.add_tensor("q", TensorType::Q8_0, {31}, std::vector<uint8_t>(34)).is_ok());
  ASSERT_TRUE(w.add_tensor("b", TensorType::F32, {2}, std::vector<uint8_t>(8)).is_ok());
  EXPECT_FALSE(w.add_tensor("b", TensorType::F32, {2}, std::vector<uint8_t>(8)).is_ok());
}

// A sparse file (synth --sparse, convert --dry-run): the same size and header as the whole file,
// every tensor's bytes zero, and it parses as the same model.
TEST(GgufRoundTrip, ASparseFileHasTheWholeFilesLayoutAndZeroTensors) {
  const auto dir = std::filesystem::temp_directory_path() / ("bitsplit_gguf_sparse_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "sparse.gguf").string();
  const auto writer = testing::make_tiny_model({});
  ASSERT_TRUE(writer.write_file_sparse(path).is_ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const std::string whole = (dir / "whole.gguf").string();
  ASSERT_TRUE(writer.write_file(whole).is_ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto g = File::open(whole);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(f->file_size(), g->file_size());
  EXPECT_EQ(f->data_offset(), g->data_offset());
  ASSERT_EQ(f->tensors().size(), g->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    EXPECT_EQ(t.name, g->tensors()[i].name);
    EXPECT_EQ(t.offset, g->tensors()[i].offset);
    const auto bytes = f->tensor_bytes(t);
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; })) << t.name;
  }
  std::filesystem::remove_all(dir);
}

TEST(GgufRoundTrip, FileWriteIsAtomicAndReportsUnwritablePaths) {
  const auto dir = std::filesystem::temp_directory_path() / ("bitsplit_gguf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tiny.gguf").string();
  const auto writer = testing::make_tiny_model({});
  ASSERT_TRUE(writer.write_file(path).is_ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->file_size(), writer.to_bytes().size());
  Status bad = writer.write_file((dir / "no_such_dir" / "x.gguf").string());
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("no_such_dir"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Reading a real file and writing it again gives the same metadata and tensor bytes.
TEST(GgufRoundTrip, Stories260KRewritesIdentically) {
  const std::string shared = testing::shared_dir();
  const std::string path = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->tensors().size(), 48u);
  Writer w;
  for (const auto& [key, value] : f->metadata().entries()) w.metadata().set(key, value);
  for (const auto& t : f->tensors()) {
    auto bytes = f->tensor_bytes(t);
    ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, {bytes.begin(), bytes.end()}).is_ok());
  }
  auto bytes = w.to_bytes();
  auto g = File::parse(storage_from_bytes(bytes), "rewritten");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_TRUE(g->metadata() == f->metadata());
  ASSERT_EQ(g->tensors().size(), f->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const auto a = f->tensor_bytes(f->tensors()[i]);
    const auto b = g->tensor_bytes(g->tensors()[i]);
    ASSERT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << f->tensors()[i].name;
  }
}

}  // namespace
}  // namespace bitsplit::gguf

namespace bitsplit {
namespace {

// content_sha256 is computed once per opened file and is the same value every time.
TEST(GgufFile, ContentSha256IsStableAcrossCalls) {
  auto bytes = testing::tiny_model_bytes({});
  auto f = gguf::File::parse(gguf::storage_from_bytes(bytes), "tiny.gguf");
  ASSERT_TRUE(f.is_ok());
  auto a = f->content_sha256(), b = f->content_sha256();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->size(), 64u);
  bytes.back() ^= 1;  // another file's bytes hash differently
  auto g = gguf::File::parse(gguf::storage_from_bytes(bytes), "other.gguf");
  ASSERT_TRUE(g.is_ok());
  EXPECT_NE(*g->content_sha256(), *a);
}

}  // namespace
}  // namespace bitsplit
