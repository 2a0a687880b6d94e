// The CUDA backend (label gpu; skips without a device): bit-exact with the CPU reference
// kernel, weights never cross PCIe while decoding, and speculative output identical to the
// CPU-only engine's.
#include <gtest/gtest.h>

#include <optional>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <list>
#include <random>
#include <string>

#include "bitsplit/convert.h"
#include "bitsplit/device_draft.h"
#include "bitsplit/gpu.h"
#include "bitsplit/speculative.h"
#include "bitsplit/variant.h"
#include "bitsplit/variant_build.h"
#include "bitsplit/vram_plan.h"
#include "draft_testing.h"
#include "generation_testing.h"
#include "test_paths.h"
#include "gguf_testing.h"

namespace bitsplit {
namespace {

#define REQUIRE_GPU()                                                                                   \
  if (gpu::device_count() == 0)                                                                         \
  GTEST_SKIP() << (gpu::compiled_with_cuda() ? "no CUDA device found" : "built without CUDA")

// Greedy speculative decoding (the model as its own draft), optionally of a variant.
std::vector<int32_t> greedy_spec(const Model& m, std::vector<int32_t> prompt, int n, int budget,
                                 const Variant* variant = nullptr) {
  SpeculativeOptions o;
  o.n_predict = n;
  o.policy.budget = budget;
  o.variant = variant;
  std::vector<int32_t> out;
  auto r = testing::speculative_greedy(m, m, prompt, o, &out);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return out;
}

// Planes split from Gaussian weights (as convert makes them), R8.
SplitProjection random_planes(int64_t out, int64_t in, int group, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(out * in));
  for (auto& v : w) v = g(rng);
  quant::SplitParams sp;
  sp.group = group;
  return split_projection(w, out, in, sp, nullptr);
}

DraftPlaneView host_plane(const SplitProjection& p) {
  return {p.draft_codes.data(), p.draft_scales.data(), p.draft_offsets.data(), p.out, p.in, p.group, p.draft_bits};
}

// For batches of 1, 5, 16 and 17 rows of Gaussian activations: the resident plane `p` (with the
// resident sign plane `signs_key`, `view` on the host, when given) on the device equals
// cpu::draft_matmul_ref bit for bit.
void expect_bit_exact(gpu::DraftMatmul& dev, const SplitProjection& p, std::mt19937& rng,
                      const cpu::SignPlaneView* view = nullptr, const void* signs_key = nullptr) {
  std::normal_distribution<float> g(0.0f, 0.05f);
  for (int64_t rows : {1, 5, 16, 17}) {
    std::vector<float> x(static_cast<size_t>(rows * p.in));
    for (auto& v : x) v = g(rng) * 20.0f;
    cpu::QuantizedActivations qa;
    cpu::quantize_activations_ref(x.data(), rows, p.in, p.group, qa);
    std::vector<float> want(static_cast<size_t>(rows * p.out)), got(want.size(), NAN);
    cpu::draft_matmul_ref(p.draft(), qa, want.data(), view);
    ASSERT_TRUE(dev.run(&p, {qa.q.data(), qa.scale.data(), qa.sum.data(), rows, qa.padded, qa.groups}, got.data(),
                        signs_key).is_ok());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "rows " << rows << ", element " << i;
  }
}

TEST(GpuBackend, DraftMatmulBitExactWithCpuReference) {
  REQUIRE_GPU();
  auto dev = gpu::DraftMatmul::create(0);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  std::mt19937 rng(5);
  // Planes are keyed by address: each stays alive (a distinct key) while `dev` lives.
  std::list<SplitProjection> planes;
  for (int group : {32, 64, 128}) {
    for (int64_t in : {1, 7, 64, 111, 1023}) {
      for (int64_t out : {1, 5, 17, 64}) {
        SCOPED_TRACE("group " + std::to_string(group) + " in " + std::to_string(in) + " out " + std::to_string(out));
        const SplitProjection& p = planes.emplace_back(random_planes(out, in, group, rng));
        ASSERT_TRUE((*dev)->upload(&p, host_plane(p)).is_ok());
        ASSERT_NO_FATAL_FAILURE(expect_bit_exact(**dev, p, rng));
      }
    }
  }
}

TEST(GpuBackend, SpeculativeOutputEqualsCpuAndNoWeightsCrossPcie) {
  REQUIRE_GPU();
  const auto path = std::filesystem::temp_directory_path() / ("bitsplit_gpu_" + std::to_string(::getpid()) + ".gguf");
  auto source = testing::tiny_weights({});
  ASSERT_TRUE(convert_model(*source, path.string(), {}, nullptr, nullptr).is_ok());
  auto w = open_weights(path.string());
  auto cpu_model = Model::load(**w);
  auto ctx = std::make_shared<cpu::CpuContext>();
  auto tier = make_cuda_backend(ctx, 0);
  ASSERT_TRUE(tier.is_ok()) << tier.status().message();
  auto gpu_model = Model::load(**w, {.cpu = ctx, .backend = *tier});
  std::filesystem::remove(path);
  ASSERT_TRUE(cpu_model.is_ok() && gpu_model.is_ok()) << gpu_model.status().message();
  const auto before = gpu_model->backend().transfers();
  EXPECT_GT(before.weight_bytes, 0u);  // uploaded at load
  EXPECT_EQ(greedy_spec(*gpu_model, {1, 5, 9}, 32, 16), greedy_spec(*cpu_model, {1, 5, 9}, 32, 16));
  const auto after = gpu_model->backend().transfers();
  // While decoding, only activations go in and D·X results come out: no weight bytes.
  EXPECT_EQ(after.weight_bytes, before.weight_bytes);
  EXPECT_GT(after.calls, before.calls);
  EXPECT_GT(after.activation_bytes, before.activation_bytes);
  EXPECT_GT(after.result_bytes, before.result_bytes);
}

// The fused BitDelta path: D + α⊙S on the device equals the CPU reference bit for bit.
TEST(GpuBackend, DraftMatmulWithSignPlaneBitExact) {
  REQUIRE_GPU();
  auto dev = gpu::DraftMatmul::create(0);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.0f, 0.05f);
  // Planes and sign planes are keyed by address: each stays alive (a distinct key) while `dev` lives.
  std::list<SplitProjection> planes;
  std::list<std::vector<uint8_t>> sign_planes;
  std::list<std::vector<float>> alphas;
  for (int group : {32, 64, 128}) {
    for (int64_t in : {7, 64, 111, 1023}) {
      const int64_t out = 17;
      const SplitProjection& p = planes.emplace_back(random_planes(out, in, group, rng));
      const int64_t row_bytes = quant::delta_sign_row_bytes(in) + 3;  // a wider stride, junk past the row
      std::vector<uint8_t>& signs = sign_planes.emplace_back(static_cast<size_t>(out * row_bytes));
      for (auto& b : signs) b = uint8_t(rng());
      ASSERT_TRUE((*dev)->upload(&p, host_plane(p)).is_ok());
      for (bool per_row : {true, false}) {
        SCOPED_TRACE("group " + std::to_string(group) + " in " + std::to_string(in) + " per_row " +
                     std::to_string(per_row));
        std::vector<float>& alpha = alphas.emplace_back(per_row ? size_t(out) : 1);
        for (auto& a : alpha) a = std::fabs(g(rng)) * 0.1f;
        const cpu::SignPlaneView view{signs.data(), alpha.data(), out, in, row_bytes, per_row};
        const void* key = per_row ? static_cast<const void*>(signs.data()) : static_cast<const void*>(alpha.data());
        ASSERT_TRUE((*dev)->upload_signs(key, {signs.data(), alpha.data(), out, in, row_bytes, per_row}, group).is_ok());
        ASSERT_NO_FATAL_FAILURE(expect_bit_exact(**dev, p, rng, &view, key));
      }
    }
  }
}

// A variant decodes the same on the CUDA backend as on the CPU (fixtures: psalms on bible-base).
TEST(GpuBackend, VariantSpeculativeOutputEqualsCpu) {
  REQUIRE_GPU();
  const std::string dir = testing::source_dir() + "/tests/models/";
  BITSPLIT_REQUIRE_FILE(dir + "bible-base.gguf");
  auto base_src = open_weights(dir + "bible-base.gguf");
  auto ft_src = open_weights(dir + "bible-psalms.gguf");
  ASSERT_TRUE(base_src.is_ok() && ft_src.is_ok());
  auto base_f32 = Model::load(**base_src);
  auto ft_f32 = Model::load(**ft_src);
  ASSERT_TRUE(base_f32.is_ok() && ft_f32.is_ok());
  auto parts = compute_delta(*base_f32, *ft_f32, quant::DeltaAlpha::kRow);
  ASSERT_TRUE(parts.is_ok());
  const auto path = std::filesystem::temp_directory_path() / ("bitsplit_gpu_var_" + std::to_string(::getpid()) + ".gguf");
  ASSERT_TRUE(convert_model(**base_src, path.string(), {}, nullptr, nullptr).is_ok());
  auto w = open_weights(path.string());
  auto ctx = std::make_shared<cpu::CpuContext>();
  auto tier = make_cuda_backend(ctx, 0);
  ASSERT_TRUE(tier.is_ok());
  auto cpu_model = Model::load(**w);
  auto gpu_model = Model::load(**w, {.cpu = ctx, .backend = *tier});
  std::filesystem::remove(path);
  ASSERT_TRUE(cpu_model.is_ok() && gpu_model.is_ok());
  auto variant = Variant::make(*base_f32, "psalms", parts->signs, parts->full);
  ASSERT_TRUE(variant.is_ok()) << variant.status().message();
  EXPECT_EQ(greedy_spec(*gpu_model, {1, 45, 300, 12}, 64, 16, variant->get()),
            greedy_spec(*cpu_model, {1, 45, 300, 12}, 64, 16, variant->get()));
}

// Under a VRAM budget smaller than the draft, the planes past the budget are drafted on the
// CPU: fewer weight bytes uploaded, the same greedy output.
TEST(GpuBackend, PlanesOverTheVramBudgetDraftOnTheCpu) {
  REQUIRE_GPU();
  const auto path = std::filesystem::temp_directory_path() / ("bitsplit_gpu_budget_" + std::to_string(::getpid()) + ".gguf");
  auto source = testing::tiny_weights({});
  ASSERT_TRUE(convert_model(*source, path.string(), {}, nullptr, nullptr).is_ok());
  auto w = open_weights(path.string());
  auto sizes = draft_plane_sizes(**w, 2);
  ASSERT_TRUE(sizes.is_ok());
  uint64_t total = 0;
  for (const auto& s : *sizes) total += s.bytes;
  auto ctx = std::make_shared<cpu::CpuContext>();
  auto full = make_cuda_backend(ctx, 0, total);
  auto half = make_cuda_backend(ctx, 0, total / 2);
  ASSERT_TRUE(full.is_ok() && half.is_ok());
  auto m_full = Model::load(**w, {.cpu = ctx, .backend = *full});
  auto m_half = Model::load(**w, {.cpu = ctx, .backend = *half});
  auto m_cpu = Model::load(**w);
  std::filesystem::remove(path);
  ASSERT_TRUE(m_full.is_ok() && m_half.is_ok() && m_cpu.is_ok());
  EXPECT_GT(m_full->backend().transfers().weight_bytes, m_half->backend().transfers().weight_bytes);
  EXPECT_NE(m_full->backend().placement().find("all of the draft"), std::string::npos) << m_full->backend().placement();
  EXPECT_NE(m_half->backend().placement().find("draft on the CPU"), std::string::npos) << m_half->backend().placement();
  EXPECT_EQ(greedy_spec(*m_half, {1, 5, 9}, 32, 8), greedy_spec(*m_cpu, {1, 5, 9}, 32, 8));
}

}  // namespace
}  // namespace bitsplit

namespace bitsplit {
namespace {

// A fixture (bible-base unless named) converted and loaded twice: on the CPU tier and on the
// CUDA tier (every draft plane in VRAM), with a prompt.
struct DeviceDraftSetup {
  std::unique_ptr<WeightSource> src;
  std::unique_ptr<Model> cpu_model, gpu_model;
  std::vector<int32_t> prompt = {1, 45, 300, 12, 77, 5, 910};
};

std::unique_ptr<DeviceDraftSetup> device_draft_setup(const std::string& name = "bible-base.gguf") {
  auto s = std::make_unique<DeviceDraftSetup>();
  const std::string dir = testing::source_dir() + "/tests/models/";
  auto base = open_weights(dir + name);
  BITSPLIT_CHECK(base.is_ok(), "fixture");
  const auto path = std::filesystem::temp_directory_path() / ("bitsplit_gpu_dd_" + std::to_string(::getpid()) + ".gguf");
  BITSPLIT_CHECK(convert_model(**base, path.string(), {}, nullptr, nullptr).is_ok());
  auto w = open_weights(path.string());
  BITSPLIT_CHECK(w.is_ok());
  s->src = std::move(*w);
  std::filesystem::remove(path);  // mapped: stays readable
  auto ctx = std::make_shared<cpu::CpuContext>();
  auto tier = make_cuda_backend(ctx, 0);
  BITSPLIT_CHECK(tier.is_ok(), tier.status().message());
  auto c = Model::load(*s->src);
  auto g = Model::load(*s->src, {.cpu = ctx, .backend = *tier});
  BITSPLIT_CHECK(c.is_ok() && g.is_ok(), g.status().message());
  s->cpu_model = std::make_unique<Model>(std::move(*c));
  s->gpu_model = std::make_unique<Model>(std::move(*g));
  return s;
}

// Greedy speculative decoding on the GPU model (its draft on the device) and on the CPU model:
// the same tokens, the draft on cuda:0. The GPU run's result, or nothing when a run failed.
std::optional<SpeculativeResult> expect_gpu_greedy_equals_cpu(DeviceDraftSetup& s, const SpeculativeOptions& o) {
  SamplingParams sp;
  sp.temperature = 0;
  Sampler a(sp), b(sp);
  std::vector<int32_t> on_gpu, on_cpu;
  auto r = generate_speculative(*s.gpu_model, *s.gpu_model, s.prompt, o, a,
                                [&](int32_t t) { on_gpu.push_back(t); return true; });
  auto rc = generate_speculative(*s.cpu_model, *s.cpu_model, s.prompt, o, b,
                                 [&](int32_t t) { on_cpu.push_back(t); return true; });
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(rc.is_ok()) << rc.status().message();
  if (!r.is_ok() || !rc.is_ok()) return std::nullopt;
  EXPECT_EQ(on_gpu, on_cpu);
  EXPECT_EQ(r->draft_pass, "device (cuda:0)");
  return *r;
}

// The device's draft logits agree with the CPU draft's (same arithmetic but for the device's
// expf/powf/sinf/cosf and two double sums), for a causal prompt batch and a tree level.
TEST(GpuDeviceDraft, LogitsMatchTheCpuDraft) {
  REQUIRE_GPU();
  BITSPLIT_REQUIRE_FILE(testing::source_dir() + "/tests/models/bible-base.gguf");
  auto s = device_draft_setup();
  const int64_t slots = 64;
  auto dev = testing::device_draft_of(*s->gpu_model, slots);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  // The device's expf/powf/sinf/cosf may differ from glibc by an ulp or two (the emulation, on
  // glibc, is bitwise equal); 2e-3 of the largest logit is an unmeasured first bound.
  testing::expect_device_draft_matches_cpu(*s->cpu_model, **dev, s->prompt, slots, 2e-3f);
  testing::expect_device_draft_batch_invariant(**dev, s->prompt, s->cpu_model->config().n_vocab);
}

// Speculative decoding with the whole draft on the device: the same greedy text as the CPU-only
// engine; while decoding no weight byte moves (the tier's counter and the device draft's own
// stay at their load-time values); the committed K/V go in once each. The second shape reuses
// the first generation's device draft (the tier keeps the base's).
TEST(GpuDeviceDraft, SpeculativeIsLosslessAndOnlyActivationsMove) {
  REQUIRE_GPU();
  BITSPLIT_REQUIRE_FILE(testing::source_dir() + "/tests/models/bible-base.gguf");
  auto s = device_draft_setup();
  for (auto shape : {spec::DraftShape::kChain, spec::DraftShape::kTree}) {
    SpeculativeOptions o;
    o.n_predict = 64;
    o.policy.shape = shape;
    o.policy.budget = shape == spec::DraftShape::kChain ? 4 : 16;
    o.policy.max_depth = shape == spec::DraftShape::kChain ? 4 : 6;
    const auto tier_before = s->gpu_model->backend().transfers();
    auto r = expect_gpu_greedy_equals_cpu(*s, o);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(s->gpu_model->backend().transfers().weight_bytes, tier_before.weight_bytes);
    const ModelConfig& c = s->cpu_model->config();
    const uint64_t kv_bytes = uint64_t(int64_t(s->prompt.size()) - 1 + r->acceptance.checks + r->acceptance.accepted) *
                              uint64_t(c.n_layers * c.kv_dim() * 8);
    EXPECT_GE(r->device_transfers.activation_bytes, kv_bytes);
    // Beyond the K/V: per level 12 bytes and a mask row per row (at most 64 rows x 256 slots).
    EXPECT_LE(r->device_transfers.activation_bytes - kv_bytes, r->device_transfers.calls * 64 * (12 + 256));
    EXPECT_LE(r->device_transfers.result_bytes, r->device_transfers.calls * 64 * 4 * 8);
  }
}

// A mixture of experts (qwen2moe: 8 experts, 2 per row, a shared expert) with its draft on the
// device, routed on the host each layer: draft logits close to the CPU draft's, and speculative
// decoding through it gives the CPU engine's greedy text.
TEST(GpuDeviceDraft, MixtureOfExpertsRunsOnTheDeviceLosslessly) {
  REQUIRE_GPU();
  BITSPLIT_REQUIRE_FILE(testing::source_dir() + "/tests/models/qwen2moe-tiny.gguf");
  auto s = device_draft_setup("qwen2moe-tiny.gguf");
  const int64_t slots = 64;
  auto dev = testing::device_draft_of(*s->gpu_model, slots);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  testing::expect_device_draft_matches_cpu(*s->cpu_model, **dev, s->prompt, slots, 2e-3f);
  SpeculativeOptions o;
  o.n_predict = 48;
  o.policy.shape = spec::DraftShape::kTree;
  o.policy.budget = 8;
  o.policy.max_depth = 4;
  EXPECT_TRUE(expect_gpu_greedy_equals_cpu(*s, o).has_value());
}

}  // namespace
}  // namespace bitsplit
