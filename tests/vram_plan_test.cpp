// VRAM placement: draft planes go to the device in layer order while they fit; the
// plan `info` prints comes from the file alone; byte sizes parse with binary units.
#include <gtest/gtest.h>

#include "bitsplit/convert.h"
#include "bitsplit/vram_plan.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

TEST(VramPlan, PlacesAPrefixInLayerOrder) {
  const std::vector<DraftPlaneSize> planes = {{"a", 100}, {"b", 50}, {"c", 10}, {"d", 1}};
  VramPlan p = plan_vram(planes, 155);
  EXPECT_EQ(p.device_planes, 2u);  // a + b; c would fit in the slack but comes after the first miss
  EXPECT_EQ(p.device_bytes, 150u);
  EXPECT_EQ(p.host_planes, 2u);
  EXPECT_EQ(p.host_bytes, 11u);
  EXPECT_EQ(p.first_on_host, "c");
  p = plan_vram(planes, 161);
  EXPECT_EQ(p.host_planes, 0u);
  EXPECT_NE(p.summary().find("all of the draft"), std::string::npos);
  p = plan_vram(planes, 0);
  EXPECT_EQ(p.device_planes, 0u);
  EXPECT_EQ(p.first_on_host, "a");
  EXPECT_NE(p.summary().find("161 B"), std::string::npos) << "says what budget would hold everything: " << p.summary();
}

// A mixture of experts' device draft: FFN scratch as wide as its widest expert (the dense n_ff
// unused), plus each layer's router and shared-expert gate and the routing scratch.
TEST(VramPlan, DeviceDraftBytesCountAMixtureOfExperts) {
  const int64_t layers = 4, embd = 64, rows = 16;
  const DeviceDraftBytes dense = device_draft_bytes(layers, embd, 4, 2, 16, 96, 2048, 256, rows);
  const DeviceDraftBytes moe = device_draft_bytes(layers, embd, 4, 2, 16, 10, 2048, 256, rows, {8, 2, 64, 96});
  EXPECT_EQ(moe.kv_cache, dense.kv_cache);
  EXPECT_EQ(moe.embedding, dense.embedding + 4 * layers * embd * (8 + 1));
  EXPECT_EQ(moe.scratch, dense.scratch + 4 * rows * (8 + 2 * embd + 2 * 2));
}

TEST(VramPlan, ParsesByteSizes) {
  EXPECT_EQ(*parse_byte_size("1234"), 1234u);
  EXPECT_EQ(*parse_byte_size("2K"), 2048u);
  EXPECT_EQ(*parse_byte_size("512M"), 512ull << 20);
  EXPECT_EQ(*parse_byte_size("24G"), 24ull << 30);
  EXPECT_EQ(*parse_byte_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*parse_byte_size("800mb"), 800ull << 20);
  for (const char* bad : {"", "x", "12X", "-5G", "1e30", "5 G", "nan"}) {
    auto r = parse_byte_size(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("byte size"), std::string::npos);
    }
  }
}

TEST(VramPlan, SizesComeFromAConvertedFileInLayerOrder) {
  const std::string base = testing::source_dir() + "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(base);
  testing::TempDir dir("vram-plan");
  auto src = open_weights(base);
  ASSERT_TRUE(src.is_ok());
  EXPECT_FALSE(draft_plane_sizes(**src, 6).is_ok()) << "an original model has no draft planes";
  ASSERT_TRUE(convert_model(**src, dir.file("b.gguf"), {}, nullptr, nullptr).is_ok());
  auto conv = open_weights(dir.file("b.gguf"));
  ASSERT_TRUE(conv.is_ok());
  auto sizes = draft_plane_sizes(**conv, 6);
  ASSERT_TRUE(sizes.is_ok()) << sizes.status().message();
  ASSERT_EQ(sizes->size(), 6u * 7u + 1u);
  EXPECT_EQ(sizes->front().weight, "blk.0.attn_q.weight");
  EXPECT_EQ(sizes->back().weight, "output.weight");
  uint64_t total = 0;
  for (const auto& s : *sizes) total += s.bytes;
  uint64_t draft_tensors = 0;
  for (const auto& t : (*conv)->tensors())
    if (t.name.find(".draft_") != std::string::npos) draft_tensors += t.nbytes;
  EXPECT_EQ(total, draft_tensors);
}

}  // namespace
}  // namespace bitsplit
