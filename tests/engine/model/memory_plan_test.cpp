// The memory plan: what a model takes in RAM as loaded, computed before loading from the
// file's tensor table and the run's context, and the refusal of a plan over the available RAM.
// The plan of a converted file: tests/engine/convert/converted_file_plans_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "bitsplit/memory_plan.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

const std::string kBase = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";

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
