// The plans made from a converted file's tensor table: the RAM plan and the locked planes
// (engine/model's memory plan) and the draft planes' VRAM sizes (engine/backend's VRAM plan), on
// the fixture base converted in process; with convert's tests because they need its output.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "bitsplit/convert.h"
#include "bitsplit/memory_plan.h"
#include "bitsplit/vram_plan.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

const std::string kBase = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";

// A size field of /proc/self/status ("RssAnon:", "VmLck:"), bytes.
uint64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;
  }
  return 0;
}

// Anonymous resident memory of this process, bytes.
uint64_t anonymous_rss() { return status_bytes("RssAnon:"); }

// The fixture base converted into `dir` (as `bitsplit convert` does), opened.
std::unique_ptr<WeightSource> open_converted_base(const testing::TempDir& dir) {
  auto base = open_weights(kBase);
  BITSPLIT_CHECK(base.is_ok(), base.status().message());
  const std::string converted = dir.file("m.bitsplit.gguf");
  BITSPLIT_CHECK(convert_model(**base, converted, {}, nullptr, nullptr).is_ok());
  auto source = open_weights(converted);
  BITSPLIT_CHECK(source.is_ok(), source.status().message());
  return std::move(*source);
}

TEST(MemoryPlan, CountsEveryTensorAsTheLoaderHoldsItAndTheKvCache) {
  if (!std::filesystem::exists(kBase)) GTEST_SKIP() << kBase << " is missing";
  testing::TempDir dir("memory-plan");
  const auto source = open_converted_base(dir);
  auto config = read_model_config(*source);
  ASSERT_TRUE(config.is_ok());
  auto plan = plan_memory(*source, *config, {.n_slots = 100, .verify_rows = 3});
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  uint64_t resid = 0, draft = 0;
  for (const auto& t : source->tensors()) {
    if (is_residual_plane_tensor(t.name)) resid += t.nbytes;
    if (t.name.find(".draft_") != std::string::npos) draft += t.nbytes;
  }
  EXPECT_GT(resid, 0u);
  EXPECT_EQ(plan->residual, resid);
  EXPECT_EQ(plan->draft, draft);
  EXPECT_EQ(plan->n_slots, 100);
  EXPECT_EQ(plan->kv_cache, 2 * uint64_t(config->n_layers) * 100 * uint64_t(config->kv_dim()) * 4);
  EXPECT_EQ(plan->scratch, 3 * uint64_t(config->n_vocab) * 4);
  // The converted file's Q8_0 embedding is held as its blocks, not expanded to f32.
  const gguf::TensorInfo* embd = source->find_tensor("token_embd.weight");
  ASSERT_TRUE(embd && embd->type == gguf::TensorType::Q8_0);
  EXPECT_GE(plan->weights, embd->nbytes);
  EXPECT_LT(plan->weights, uint64_t(config->n_vocab * config->n_embd) * 4);
  // No context asked for: the training context, clamped.
  EXPECT_EQ(plan_memory(*source, *config, {})->n_slots, config->n_ctx_train);
  EXPECT_EQ(plan_memory(*source, *config, {.n_slots = 1 << 30})->n_slots, config->n_ctx_train);

  // The loader's anonymous memory grows by about the planned weights other than the residual
  // (generous bounds): the draft planes and the f32 weights are copied out of the map, the
  // residual (format 3) is used from the map, whose pages are file pages. The heap that
  // converting left free is handed back first, or the loader would reuse it unseen.
  malloc_trim(0);
  const uint64_t before = anonymous_rss();
  auto model = Model::load(*source);
  ASSERT_TRUE(model.is_ok());
  const uint64_t grown = anonymous_rss() - before;
  const uint64_t copied = plan->draft + plan->weights;
  std::printf("anonymous memory grown %llu; planned: residual %llu, draft %llu, other weights %llu\n",
              (unsigned long long)grown, (unsigned long long)plan->residual, (unsigned long long)plan->draft,
              (unsigned long long)plan->weights);
  EXPECT_GE(grown, copied / 2) << "grown " << grown << ", copied " << copied;
  EXPECT_LE(grown, copied + plan->residual / 2) << "grown " << grown << ", copied " << copied
                                                << ": the residual was copied";
}

// --mlock: every plane buffer the kernels read is locked (the kernel's VmLck grows by at least
// the planes' bytes: at least the residual and draft planes of the file), or, where the
// locked-memory limit forbids it, an error naming that limit and nothing stays locked.
TEST(MemoryPlan, LockPlanesPinsThePlanesOrNamesTheLimit) {
  if (!std::filesystem::exists(kBase)) GTEST_SKIP() << kBase << " is missing";
  testing::TempDir dir("memory-lock");
  const auto source = open_converted_base(dir);
  auto config = read_model_config(*source);
  ASSERT_TRUE(config.is_ok());
  auto plan = plan_memory(*source, *config, {});
  ASSERT_TRUE(plan.is_ok());
  auto model = Model::load(*source);
  ASSERT_TRUE(model.is_ok());
  const uint64_t before = status_bytes("VmLck:");
  auto locked = model->lock_planes();
  if (locked) {
    EXPECT_GE(*locked, plan->residual) << "every residual plane is locked";
    EXPECT_GE(status_bytes("VmLck:") - before, *locked) << "the kernel counts them locked";
  } else {
    EXPECT_NE(locked.status().message().find("locked-memory limit"), std::string::npos) << locked.status().message();
    EXPECT_EQ(status_bytes("VmLck:"), before) << "nothing stays locked after a failure";
  }
  // An original model has no planes: nothing to lock.
  auto base = open_weights(kBase);
  ASSERT_TRUE(base.is_ok());
  auto original = Model::load(**base);
  ASSERT_TRUE(original.is_ok());
  auto none = original->lock_planes();
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(*none, 0u);
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
