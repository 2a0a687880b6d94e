// Corrupt, truncated and absurd GGUF files: each must give an error naming the file and the
// problem (and the key or tensor where there is one) — never a crash, a hang or a huge
// allocation (what the tokenizer and the model loader make of randomly corrupted files:
// tests/engine/model/corrupt_gguf_loading_test.cpp). Also runs under ASan/UBSan in CI.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <random>

#include "bitsplit/gguf.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit::gguf {
namespace {

// Little-endian byte builder for hand-made headers.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) { u64(s.size()); return raw(s.data(), s.size()); }
  Bytes& raw(const void* p, size_t n) {
    const size_t at = b.size();
    b.resize(at + n);
    if (n > 0) std::memcpy(b.data() + at, p, n);
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
};

Status parse(const std::vector<uint8_t>& bytes) {
  auto f = File::parse(storage_from_bytes(bytes), "bad.gguf");
  return f.is_ok() ? Status::ok() : f.status();
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  Status s = parse(bytes);
  ASSERT_FALSE(s.is_ok()) << "expected an error containing: " << fragment;
  EXPECT_NE(s.message().find("bad.gguf"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

TEST(GgufCorrupt, EveryTruncationOfASmallModelFails) {
  const auto full = testing::tiny_model_bytes({});
  auto whole = File::parse(storage_from_bytes(full), "bad.gguf");
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  const auto& last = whole->tensors().back();
  const uint64_t data_end = whole->data_offset() + last.offset + last.nbytes;
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + len);
    auto f = File::parse(storage_from_bytes(cut), "bad.gguf");
    if (len < data_end) {
      ASSERT_FALSE(f.is_ok()) << "truncated to " << len << " bytes but parsed";
      ASSERT_NE(f.status().message().find("bad.gguf"), std::string::npos);
    } else {
      ASSERT_TRUE(f.is_ok()) << len << ": only trailing padding was cut: " << f.status().message();
    }
  }
}

TEST(GgufCorrupt, NotGgufAndUnsupportedVersions) {
  expect_error({}, "too short");
  expect_error({'G', 'G', 'U'}, "too short");
  expect_error({'G', 'G', 'M', 'L', 0, 0, 0, 0}, "not a GGUF file");
  expect_error(Bytes().header(0, 0, 1).b, "version 1 is not supported");
  expect_error(Bytes().header(0, 0, 7).b, "version 7 is not supported");
  expect_error(Bytes().header(0, 0, 0x03000000).b, "big-endian");
  expect_error(Bytes().u32(0x46554747).u32(3).u64(0).b, "metadata count");
}

TEST(GgufCorrupt, AbsurdCountsAreRejectedBeforeAllocating) {
  expect_error(Bytes().header(uint64_t{1} << 63, 0).b, "tensors, more than the file can hold");
  expect_error(Bytes().header(0, uint64_t{1} << 63).b, "metadata entries, more than the file can hold");
  expect_error(Bytes().header(0, 1).str("k").u32(uint32_t(ValueType::kArray)).u32(0).u64(uint64_t{1} << 62).b,
               "cannot fit in the rest of the file");
  expect_error(Bytes().header(0, 1).str("k").u32(uint32_t(ValueType::kArray)).u32(uint32_t(ValueType::kString)).u64(3).u64(1).b,
               "metadata key 'k'");
}

TEST(GgufCorrupt, StringLengthsPastTheEnd) {
  const std::string pad(40, 'x');  // keeps the declared counts plausible for the file size
  expect_error(Bytes().header(0, 1).u64(1000).raw(pad.data(), pad.size()).b, "string length 1000 runs past the end");
  expect_error(Bytes().header(0, 1).str("name").u32(uint32_t(ValueType::kString)).u64(uint64_t(-1)).raw(pad.data(), 8).b,
               "metadata key 'name'");
  expect_error(Bytes().header(1, 0).u64(uint64_t{1} << 40).raw(pad.data(), pad.size()).b, "tensor #0 name");
}

TEST(GgufCorrupt, BadValueTypesAndDuplicates) {
  expect_error(Bytes().header(0, 1).str("k").u32(13).b, "unknown value type 13");
  expect_error(Bytes().header(0, 1).str("k").u32(uint32_t(ValueType::kBool)).raw("\x05", 1).b, "neither 0 nor 1");
  expect_error(Bytes().header(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2).b, "'k' appears twice");
  Bytes deep;
  deep.header(0, 1).str("deep").u32(uint32_t(ValueType::kArray));
  for (int i = 0; i < 100; ++i) deep.u32(uint32_t(ValueType::kArray)).u64(1);
  expect_error(deep.b, "nested deeper than");
  expect_error(Bytes().header(0, 1).str("general.alignment").u32(uint32_t(ValueType::kUint32)).u32(48).b,
               "not a power of two");
  expect_error(Bytes().header(0, 1).str("general.alignment").u32(uint32_t(ValueType::kString)).str("32").b,
               "must be a uint32");
}

Bytes one_tensor(uint32_t n_dims, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
  Bytes b;
  b.header(1, 0).str("blk.0.attn_q.weight").u32(n_dims);
  for (uint64_t d : dims) b.u64(d);
  b.u32(type).u64(offset);
  return b;
}

TEST(GgufCorrupt, AbsurdTensorInfos) {
  expect_error(one_tensor(2, {0, 4}, 0, 0).b, "'blk.0.attn_q.weight': dimension 0 is 0");
  expect_error(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0).b, "5 dimensions");
  expect_error(one_tensor(0, {}, 0, 0).b, "0 dimensions");
  expect_error(one_tensor(2, {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0).b, "overflow");
  expect_error(one_tensor(1, {uint64_t(-1)}, 0, 0).b, "overflow");
  expect_error(one_tensor(1, {4}, 4, 0).b, "unknown tensor type id 4");
  expect_error(one_tensor(1, {4}, 1000, 0).b, "unknown tensor type id 1000");
  expect_error(one_tensor(1, {33}, 8, 0).b, "not a multiple of the Q8_0 block size");
  expect_error(one_tensor(1, {4}, 0, 3).b, "not a multiple of the alignment");
  auto past = one_tensor(1, {4}, 0, 0);
  past.b.resize(((past.b.size() + 31) / 32) * 32 + 8);  // data section holds 8 of 16 bytes
  expect_error(past.b, "'blk.0.attn_q.weight': data at offset");
  auto far = one_tensor(1, {4}, 0, uint64_t{1} << 62);
  far.b.resize(((far.b.size() + 31) / 32) * 32 + 16);
  expect_error(far.b, "runs past the end of the file");
  Bytes dup;
  dup.header(2, 0);
  for (int i = 0; i < 2; ++i) dup.str("t").u32(1).u64(4).u32(0).u64(0);
  expect_error(dup.b, "'t' appears twice");
}

TEST(GgufCorrupt, MissingFileAndDirectory) {
  auto f = File::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("/nonexistent/model.gguf: cannot open"), std::string::npos);
  auto d = File::open("/tmp");
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos);
}

// A FIFO, a device or a directory given as a model is refused at once with what it is: opening
// a FIFO for reading would wait for a writer forever. The open runs on another thread so that a
// hang fails the test instead of hanging it: after the wait, a writer opens the FIFO and closes
// it again, which lets a blocked open (and its read, at end of file) return.
TEST(GgufCorrupt, NonRegularFilesAreRefusedAtOnce) {
  testing::TempDir dir("gguf-fifo");
  const std::string fifo = dir.file("model.gguf");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto opened = std::async(std::launch::async, [&] { return File::open(fifo).status(); });
  const bool in_time = opened.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!in_time) {
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  const Status st = opened.get();
  EXPECT_TRUE(in_time) << "opening a FIFO blocked";
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(fifo + ": is a FIFO, not a regular file"), std::string::npos) << st.message();

  for (const auto& [path, what] : {std::pair<std::string, std::string>{"/dev/null", "a character device"},
                                   {dir.path().string(), "a directory"}}) {
    auto f = File::open(path);
    ASSERT_FALSE(f.is_ok()) << path;
    EXPECT_NE(f.status().message().find(path + ": is " + what + ", not a regular file"), std::string::npos)
        << f.status().message();
  }
}

// The header of a real model, cut at every length inside it, and at random lengths after.
TEST(GgufCorrupt, Stories260KTruncations) {
  const std::string shared = testing::shared_dir();
  const std::string path = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto whole = File::open(path);
  ASSERT_TRUE(whole.is_ok());
  const auto bytes = whole->tensor_bytes(whole->tensors()[0]);
  const uint8_t* base = bytes.data() - whole->data_offset() - whole->tensors()[0].offset;
  const std::vector<uint8_t> full(base, base + whole->file_size());
  std::mt19937_64 rng(5);
  std::vector<size_t> lengths;
  for (size_t len = 0; len < whole->data_offset(); ++len) lengths.push_back(len);
  for (int i = 0; i < 200; ++i) lengths.push_back(whole->data_offset() + rng() % (full.size() - whole->data_offset()));
  for (size_t len : lengths) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + len);
    ASSERT_FALSE(parse(cut).is_ok()) << "truncated at " << len;
  }
}

}  // namespace
}  // namespace bitsplit::gguf
