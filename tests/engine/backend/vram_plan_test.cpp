// VRAM placement: draft planes go to the device in layer order while they fit; the
// plan `info` prints comes from the file alone (on a converted file:
// tests/engine/convert/converted_file_plans_test.cpp); byte sizes parse with binary units.
#include <gtest/gtest.h>

#include "bitsplit/vram_plan.h"

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

}  // namespace
}  // namespace bitsplit
