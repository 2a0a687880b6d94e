// ggml block dequantisers (Q4_0 ... Q6_K): bit-exact against gguf-py's goldens, through the
// typed *_ref functions, the unaligned byte entry point, GGUF files, and a real Q4_1 model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "test_paths.h"

namespace bitsplit::quant {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string golden_dir() { return testing::source_dir() + "/tests/data/ggml_quant/"; }

struct Golden {
  std::vector<uint8_t> blocks;  // raw quantised bytes from tools/quant_golden.py
  std::vector<float> values;    // gguf-py's dequantisation of them
};

Golden load_golden(const std::string& type) {
  Golden g;
  g.blocks = read_bytes(golden_dir() + type + ".bin");
  const auto raw = read_bytes(golden_dir() + type + ".f32");
  g.values.resize(raw.size() / 4);
  std::memcpy(g.values.data(), raw.data(), g.values.size() * 4);
  return g;
}

// NaN poison: any element a decoder leaves unwritten fails the memcmp below.
std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

// Bit-exact (not ==): -0.0 vs 0.0 and NaN payloads count as differences.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (std::memcmp(got.data(), want.data(), want.size() * 4) == 0) return;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      ADD_FAILURE() << what << ": first difference at element " << i << " (block weight " << i % 256
                    << "): got " << got[i] << ", gguf-py " << want[i];
      return;
    }
  }
}

// Decodes the golden blocks with one typed *_ref function.
template <typename Block>
void check_typed(const std::string& type, void (*decode)(std::span<const Block>, std::span<float>)) {
  const Golden g = load_golden(type);
  ASSERT_FALSE(g.blocks.empty()) << type;
  ASSERT_EQ(g.blocks.size() % sizeof(Block), 0u) << type;
  std::vector<Block> blocks(g.blocks.size() / sizeof(Block));
  std::memcpy(blocks.data(), g.blocks.data(), g.blocks.size());
  ASSERT_EQ(g.values.size(), blocks.size() * Block::kWeights) << type;
  auto out = poisoned(g.values.size());
  decode(blocks, out);
  expect_same_bits(out, g.values, type + " via dequantize_*_ref");
}

struct TypeCase {
  const char* name;
  uint32_t id;
  gguf::TensorType tensor_type;
};
const TypeCase kTypes[] = {
    {"Q4_0", ggml_type::kQ4_0, gguf::TensorType::Q4_0}, {"Q4_1", ggml_type::kQ4_1, gguf::TensorType::Q4_1},
    {"Q5_0", ggml_type::kQ5_0, gguf::TensorType::Q5_0}, {"Q5_1", ggml_type::kQ5_1, gguf::TensorType::Q5_1},
    {"Q8_0", ggml_type::kQ8_0, gguf::TensorType::Q8_0}, {"Q2_K", ggml_type::kQ2_K, gguf::TensorType::Q2_K},
    {"Q3_K", ggml_type::kQ3_K, gguf::TensorType::Q3_K}, {"Q4_K", ggml_type::kQ4_K, gguf::TensorType::Q4_K},
    {"Q5_K", ggml_type::kQ5_K, gguf::TensorType::Q5_K}, {"Q6_K", ggml_type::kQ6_K, gguf::TensorType::Q6_K},
};

TEST(GgmlDequant, TypedReferenceMatchesGgufPyBitExact) {
  check_typed<BlockQ4_0>("Q4_0", dequantize_q4_0_ref);
  check_typed<BlockQ4_1>("Q4_1", dequantize_q4_1_ref);
  check_typed<BlockQ5_0>("Q5_0", dequantize_q5_0_ref);
  check_typed<BlockQ5_1>("Q5_1", dequantize_q5_1_ref);
  check_typed<BlockQ8_0>("Q8_0", dequantize_q8_0_ref);
  check_typed<BlockQ2_K>("Q2_K", dequantize_q2_k_ref);
  check_typed<BlockQ3_K>("Q3_K", dequantize_q3_k_ref);
  check_typed<BlockQ4_K>("Q4_K", dequantize_q4_k_ref);
  check_typed<BlockQ5_K>("Q5_K", dequantize_q5_k_ref);
  check_typed<BlockQ6_K>("Q6_K", dequantize_q6_k_ref);
}

TEST(GgmlDequant, ByteEntryPointMatchesAtEveryMisalignment) {
  for (const TypeCase& tc : kTypes) {
    const Golden g = load_golden(tc.name);
    ASSERT_TRUE(ggml_dequantize_supported(tc.id)) << tc.name;
    // Mapped tensors can start at any byte; shift the data by 0..7 bytes inside a buffer.
    for (size_t shift = 0; shift < 8; ++shift) {
      std::vector<uint8_t> buffer(g.blocks.size() + shift, 0xA5);
      std::memcpy(buffer.data() + shift, g.blocks.data(), g.blocks.size());
      auto out = poisoned(g.values.size());
      const Status s = dequantize_ggml_row(tc.id, std::span(buffer).subspan(shift), out);
      ASSERT_TRUE(s.is_ok()) << tc.name << ": " << s.message();
      expect_same_bits(out, g.values, std::string(tc.name) + " shift " + std::to_string(shift));
    }
  }
}

TEST(GgmlDequant, ByteEntryPointDecodesBlockSubsets) {
  // Any run of whole blocks decodes to the matching slice (rows are just runs of blocks).
  for (const TypeCase& tc : kTypes) {
    const Golden g = load_golden(tc.name);
    const auto traits = gguf::tensor_type_traits(tc.id);
    ASSERT_TRUE(traits.has_value());
    const size_t bw = size_t(traits->block_size), bb = size_t(traits->type_size);
    const size_t n_blocks = g.blocks.size() / bb;
    for (size_t first = 0; first < n_blocks; first += 3) {
      const size_t count = std::min<size_t>(n_blocks - first, first % 2 + 1);
      auto out = poisoned(count * bw);
      ASSERT_TRUE(dequantize_ggml_row(tc.id, std::span(g.blocks).subspan(first * bb, count * bb), out).is_ok());
      const std::vector<float> want(g.values.begin() + long(first * bw), g.values.begin() + long((first + count) * bw));
      expect_same_bits(out, want, std::string(tc.name) + " blocks from " + std::to_string(first));
    }
  }
}

TEST(GgmlDequant, HandBuiltBlocksFollowTheDocumentedLayout) {
  // Independent of gguf-py: spot checks of formulas written out in quant.h / docs/FORMAT.md.
  BlockQ5_1 q51{};
  q51.d = fp32_to_fp16(0.5f);
  q51.m = fp32_to_fp16(-3.0f);
  q51.qs[2] = 0x9F;  // element 2: low nibble 15; element 18: high nibble 9
  q51.qh[0] = 0x04;  // bit 2 of the u32 set: element 2 -> 31
  q51.qh[2] = 0x04;  // bit 18 set: element 18 -> 25
  std::vector<float> y = poisoned(32);
  dequantize_q5_1_ref(std::span(&q51, 1), y);
  EXPECT_EQ(y[2], 0.5f * 31 - 3.0f);
  EXPECT_EQ(y[18], 0.5f * 25 - 3.0f);
  EXPECT_EQ(y[0], -3.0f);

  BlockQ3_K q3k{};
  q3k.d = fp32_to_fp16(0.5f);
  q3k.scales[4] = 0x50;  // sub-block 12 (elements 192..207): scale low bits 5 (high nibble of byte 4)
  q3k.scales[8] = 0x40;  // ... and high bits 1 (bits 6-7 of byte 8): 5 | 16 = 21, minus 32 = -11
  q3k.qs[40] = 0x30;     // element 200: crumb 3 (bits 4-5 of qs[32 + 8])
  q3k.qs[41] = 0x20;     // element 201: crumb 2
  q3k.hmask[9] = 0x40;   // element 201 has its hmask bit (bit 6 of hmask[9]) set: no -4 offset
  y = poisoned(256);
  dequantize_q3_k_ref(std::span(&q3k, 1), y);
  EXPECT_EQ(y[200], (0.5f * -11) * (3 - 4));
  EXPECT_EQ(y[201], (0.5f * -11) * 2);

  BlockQ4_K q4k{};
  q4k.d = fp32_to_fp16(2.0f);
  q4k.dmin = fp32_to_fp16(0.25f);
  q4k.scales[1] = 0x80 | 5;          // sub-block 1 scale 5; bits 6-7 are sub-block 5's scale high bits
  q4k.scales[5] = 0x40 | 7;          // sub-block 1 min 7; bits 6-7 are sub-block 5's min high bits
  q4k.scales[9] = 0x3 | (0x2 << 4);  // sub-block 5: scale low 3, min low 2
  q4k.qs[5] = 0x70;                  // element 37 (sub-block 1): high nibble of qs[5] = 7
  q4k.qs[64 + 9] = 0xB0;             // element 169 (sub-block 5): high nibble of qs[73] = 11
  y = poisoned(256);
  dequantize_q4_k_ref(std::span(&q4k, 1), y);
  EXPECT_EQ(y[37], (2.0f * 5) * 7 - 0.25f * 7);
  // Sub-block 5: scale 3 | (0b10 << 4) = 35, min 2 | (0b01 << 4) = 18.
  EXPECT_EQ(y[169], (2.0f * 35) * 11 - 0.25f * 18);

  BlockQ6_K q6k{};
  q6k.d = fp32_to_fp16(0.125f);
  q6k.scales[9] = -3;   // sub-block 9: elements 144..159
  q6k.scales[13] = 4;   // sub-block 13: elements 208..223
  q6k.ql[80] = 0x5A;    // second half, byte 16: element 144 low nibble 10, element 208 high nibble 5
  q6k.qh[48] = 0x01;    // element 144 (crumb 0 of qh[32 + 16]) gets high bits 01: q = 10 | 16 = 26
  y = poisoned(256);
  dequantize_q6_k_ref(std::span(&q6k, 1), y);
  EXPECT_EQ(y[144], (0.125f * -3) * (26 - 32));
  EXPECT_EQ(y[208], (0.125f * 4) * (5 - 32));
}

TEST(GgmlDequant, RejectsUnsupportedTypesAndWrongSizes) {
  std::vector<float> out(32);
  std::vector<uint8_t> bytes(18);
  for (uint32_t id : {0u, 1u, 9u, 15u, 20u, 30u, 99u}) {
    EXPECT_FALSE(ggml_dequantize_supported(id)) << id;
    const Status s = dequantize_ggml_row(id, bytes, out);
    ASSERT_FALSE(s.is_ok()) << id;
    EXPECT_NE(s.message().find("ggml type id " + std::to_string(id) + " has no dequantiser"), std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(dequantize_ggml_row(ggml_type::kQ4_0, bytes, out).is_ok());
  std::vector<uint8_t> short_bytes(17);
  const Status s1 = dequantize_ggml_row(ggml_type::kQ4_0, short_bytes, out);
  EXPECT_NE(s1.message().find("Q4_0: 32 weights need 1 blocks of 18 bytes (18), got 17 bytes"), std::string::npos)
      << s1.message();
  std::vector<float> ragged(33);
  const Status s2 = dequantize_ggml_row(ggml_type::kQ4_0, bytes, ragged);
  EXPECT_NE(s2.message().find("33 weights is not a whole number of 32-weight blocks"), std::string::npos)
      << s2.message();
  std::vector<float> k_out(256);
  EXPECT_FALSE(dequantize_ggml_row(ggml_type::kQ6_K, std::vector<uint8_t>(209), k_out).is_ok());
}

// ---- through GGUF files ----

TEST(GgmlDequantGguf, EveryTypeLoadsThroughReadF32AtOddOffsets) {
  constexpr int kRepeats = 8;
  gguf::Writer w;
  // Alignment 1 and a 3-byte I8 tensor first put every block tensor at an odd file offset.
  w.set_alignment(1);
  ASSERT_TRUE(w.add_tensor("pad", gguf::TensorType::I8, {3}, {1, 2, 3}).is_ok());
  std::vector<Golden> goldens;
  for (const TypeCase& tc : kTypes) {
    goldens.push_back(load_golden(tc.name));
    const auto traits = gguf::tensor_type_traits(tc.id);
    const int64_t blocks = int64_t(goldens.back().blocks.size()) / traits->type_size;
    // Two rows when the block count allows it, to exercise a 2-D tensor.
    const std::vector<int64_t> dims = blocks % 2 == 0
        ? std::vector<int64_t>{blocks / 2 * traits->block_size, 2}
        : std::vector<int64_t>{blocks * traits->block_size};
    const Status s = w.add_tensor(std::string("t.") + tc.name, tc.tensor_type, dims, goldens.back().blocks);
    ASSERT_TRUE(s.is_ok()) << tc.name << ": " << s.message();
    // And the blocks 8 times over, one per row: read_f32 decodes rows in parallel chunks of 16.
    std::vector<uint8_t> repeated;
    for (int k = 0; k < kRepeats; ++k) repeated.insert(repeated.end(), goldens.back().blocks.begin(), goldens.back().blocks.end());
    const Status rows = w.add_tensor(std::string("r.") + tc.name, tc.tensor_type,
                                     {traits->block_size, blocks * kRepeats}, repeated);
    ASSERT_TRUE(rows.is_ok()) << tc.name << ": " << rows.message();
  }
  auto f = gguf::File::parse(gguf::storage_from_bytes(w.to_bytes()), "quants.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  for (size_t i = 0; i < std::size(kTypes); ++i) {
    const gguf::TensorInfo* t = f->find_tensor(std::string("t.") + kTypes[i].name);
    ASSERT_NE(t, nullptr);
    auto v = f->read_f32(*t);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    expect_same_bits(*v, goldens[i].values, std::string(kTypes[i].name) + " via File::read_f32");
    const gguf::TensorInfo* by_rows = f->find_tensor(std::string("r.") + kTypes[i].name);
    ASSERT_NE(by_rows, nullptr);
    auto vr = f->read_f32(*by_rows);
    ASSERT_TRUE(vr.is_ok()) << vr.status().message();
    std::vector<float> expected;
    for (int k = 0; k < kRepeats; ++k) expected.insert(expected.end(), goldens[i].values.begin(), goldens[i].values.end());
    expect_same_bits(*vr, expected, std::string(kTypes[i].name) + " one block per row via File::read_f32");
  }
}

TEST(GgmlDequantGguf, OtherBlockTypesStillNameTypeAndTensor) {
  gguf::Writer w;
  ASSERT_TRUE(w.add_tensor("blk.0.ffn_up.weight", gguf::TensorType::IQ4_NL, {256, 2},
                           std::vector<uint8_t>(2 * 8 * 18, 0)).is_ok());
  auto f = gguf::File::parse(gguf::storage_from_bytes(w.to_bytes()), "iq4.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto r = f->read_f32(f->tensors()[0]);
  ASSERT_FALSE(r.is_ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("iq4.gguf: tensor 'blk.0.ffn_up.weight' has type IQ4_NL"), std::string::npos) << m;
  EXPECT_NE(m.find("Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K"), std::string::npos) << m;
}

// ---- a real quantised model (optional: another tool fetches it) ----

// sum over i of bits(v[i]) * (i + 1) mod 2^64, as tools/quant_golden.py computes it.
uint64_t weighted_checksum(const std::vector<float>& v) {
  uint64_t sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    sum += uint64_t{bits} * uint64_t(i + 1);
  }
  return sum;
}

TEST(GgmlDequantModel, SmolLM2Q4_1TensorsMatchGgufPy) {
  const std::string path = testing::source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  std::ifstream jf(golden_dir() + "smollm2_q4_1.json");
  ASSERT_TRUE(jf.good());
  const auto golden = nlohmann::json::parse(jf);
  if (std::filesystem::file_size(path) != golden["file_size"].get<uint64_t>())
    GTEST_SKIP() << path << " is not the file the golden was made from (size differs)";
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), golden["tensors"].size());

  for (const auto& g : golden["tensors"]) {
    const std::string name = g["name"];
    const gguf::TensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(gguf::tensor_type_name(t->type), g["type"].get<std::string>()) << name;
    auto v = f->read_f32(*t);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    size_t non_finite = 0;
    for (float x : *v) non_finite += std::isfinite(x) ? 0 : 1;
    EXPECT_EQ(non_finite, 0u) << name;
    EXPECT_EQ(weighted_checksum(*v), std::stoull(g["checksum"].get<std::string>(), nullptr, 16)) << name;
  }
  for (const auto& s : golden["samples"]) {
    const gguf::TensorInfo* t = f->find_tensor(s["name"].get<std::string>());
    ASSERT_NE(t, nullptr);
    auto v = f->read_f32(*t);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    for (size_t k = 0; k < s["index"].size(); ++k) {
      const size_t i = s["index"][k];
      uint32_t bits;
      std::memcpy(&bits, &(*v)[i], 4);
      EXPECT_EQ(bits, uint32_t(std::stoul(s["bits"][k].get<std::string>(), nullptr, 16)))
          << s["name"] << "[" << i << "] (" << s["type"] << ")";
    }
  }
}

}  // namespace
}  // namespace bitsplit::quant
