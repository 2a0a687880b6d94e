// The memory plan: what a model takes in RAM as loaded, computed before loading from the
// file's tensor table and the run's context, and the refusal of a plan over the available RAM.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "bitsplit/convert.h"
#include "bitsplit/memory_plan.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

const std::string kBase = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";

// Anonymous resident memory of this process (RssAnon in /proc/self/status), bytes.
uint64_t anonymous_rss() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  }
  return 0;
}

TEST(MemoryPlan, CountsEveryTensorAsTheLoaderHoldsItAndTheKvCache) {
  if (!std::filesystem::exists(kBase)) GTEST_SKIP() << kBase << " is missing";
  testing::TempDir dir("memory-plan");
  auto base = open_weights(kBase);
  ASSERT_TRUE(base.is_ok());
  const std::string converted = dir.file("m.bitsplit.gguf");
  ASSERT_TRUE(convert_model(**base, converted, {}, nullptr, nullptr).is_ok());
  auto source = open_weights(converted);
  ASSERT_TRUE(source.is_ok());
  auto config = read_model_config(**source);
  ASSERT_TRUE(config.is_ok());
  auto plan = plan_memory(**source, *config, {.n_slots = 100, .verify_rows = 3});
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  uint64_t resid = 0, draft = 0;
  for (const auto& t : (*source)->tensors()) {
    if (t.name.ends_with(".resid_codes") || t.name.ends_with(".resid_scales")) resid += t.nbytes;
    if (t.name.find(".draft_") != std::string::npos) draft += t.nbytes;
  }
  EXPECT_GT(resid, 0u);
  EXPECT_EQ(plan->residual, resid);
  EXPECT_EQ(plan->draft, draft);
  EXPECT_EQ(plan->n_slots, 100);
  EXPECT_EQ(plan->kv_cache, 2 * uint64_t(config->n_layers) * 100 * uint64_t(config->kv_dim()) * 4);
  EXPECT_EQ(plan->scratch, 3 * uint64_t(config->n_vocab) * 4);
  // The embedding is held as f32 whatever its stored type.
  EXPECT_GE(plan->weights, uint64_t(config->n_vocab * config->n_embd) * 4);
  // No context asked for: the training context, clamped.
  EXPECT_EQ(plan_memory(**source, *config, {})->n_slots, config->n_ctx_train);
  EXPECT_EQ(plan_memory(**source, *config, {.n_slots = 1 << 30})->n_slots, config->n_ctx_train);

  // The loader's anonymous memory grows by about the planned weights (a generous bound: the
  // planes and the f32 weights are copied out of the map; the map's own pages are file pages).
  const uint64_t before = anonymous_rss();
  auto model = Model::load(**source);
  ASSERT_TRUE(model.is_ok());
  const uint64_t grown = anonymous_rss() - before;
  const uint64_t planned = plan->residual + plan->draft + plan->weights;
  EXPECT_GE(grown, planned / 2) << "grown " << grown << ", planned " << planned;
  EXPECT_LE(grown, planned * 3 / 2 + (8u << 20)) << "grown " << grown << ", planned " << planned;
}

TEST(MemoryPlan, AnOriginalModelIsPlannedInF32) {
  if (!std::filesystem::exists(kBase)) GTEST_SKIP() << kBase << " is missing";
  auto source = open_weights(kBase);
  ASSERT_TRUE(source.is_ok());
  auto config = read_model_config(**source);
  ASSERT_TRUE(config.is_ok());
  auto plan = plan_memory(**source, *config, {.n_slots = 10});
  ASSERT_TRUE(plan.is_ok());
  uint64_t f32 = 0;
  for (const auto& t : (*source)->tensors()) f32 += uint64_t(t.n_elements()) * 4;
  EXPECT_EQ(plan->residual, 0u);
  EXPECT_EQ(plan->weights, f32);
}

TEST(MemoryPlan, APlanOverTheAvailableMemoryIsAnError) {
  MemoryPlan plan;
  plan.residual = 3ull << 30;
  plan.weights = 1ull << 30;
  plan.n_slots = 10;
  SystemMemory machine{.total = 8ull << 30, .available = 6ull << 30, .numa_nodes = 1};
  EXPECT_TRUE(check_memory(plan, machine).is_ok());
  machine.available = 2ull << 30;
  const Status st = check_memory(plan, machine);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("needs 4.00 GiB of RAM"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("2.00 GiB is available"), std::string::npos) << st.message();
}

TEST(MemoryPlan, TheMachineIsRead) {
  auto m = system_memory();
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_GT(m->total, 0u);
  EXPECT_GT(m->available, 0u);
  EXPECT_GE(m->numa_nodes, 1);
}

}  // namespace
}  // namespace bitsplit
