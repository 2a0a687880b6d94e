// The CUDA draft kernels (gpu/draft_kernels.cuh) and the whole device draft pass
// (gpu/draft_forward.cuh), run on the CPU under tests/cuda_emulation.h: every kernel against
// the CPU reference it mirrors (bit for bit where the arithmetic is the same), the whole pass
// against forward_pass's draft on a trained fixture, and speculative decoding through a
// DeviceDraft built on the emulated pass (lossless; every K/V slot a row sees was copied in or
// drafted in this check). The same kernels run on a GPU in gpu_draft_tier_tests (label gpu).
#include "cuda_emulation.h"  // first: defines the CUDA names the kernels use

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>
#include <random>

#include "bitsplit/convert.h"
#include "bitsplit/device_draft.h"
#include "bitsplit/speculative.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "draft_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

namespace k = gpu::kernels;

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A random 2-bit plane in the file layout.
struct RandomPlane {
  int64_t out, in;
  int group;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, offsets;
  RandomPlane(int64_t out_, int64_t in_, int group_, uint32_t seed) : out(out_), in(in_), group(group_) {
    std::mt19937 rng(seed);
    const int64_t groups = quant::groups_per_row(in, group);
    codes.resize(static_cast<size_t>(out * quant::code_row_bytes(in, group, 2)));
    for (auto& c : codes) c = uint8_t(rng());
    std::uniform_real_distribution<float> s(0.001f, 0.05f), m(-0.08f, 0.0f);
    for (int64_t i = 0; i < out * groups; ++i) {
      scales.push_back(quant::fp32_to_fp16(s(rng)));
      offsets.push_back(quant::fp32_to_fp16(m(rng)));
    }
  }
  cpu::DraftPlaneView view() const { return {codes.data(), scales.data(), offsets.data(), out, in, group, 2}; }
  k::PlaneDev dev() const {
    return {codes.data(), scales.data(), offsets.data(), out, in, quant::groups_per_row(in, group), group};
  }
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(EmulatedKernels, DraftMatmulIsBitExactWithTheCpuReference) {
  for (int64_t in : {64, 200, 320}) {
    const int group = 64, rows = 5;
    const RandomPlane p(37, in, group, uint32_t(in));
    const auto x = random_floats(size_t(rows * in), 7);
    cpu::QuantizedActivations qa;
    cpu::quantize_activations_ref(x.data(), rows, in, group, qa);
    // A sign plane: the CPU view (rows of (in + 7) / 8 bytes) and the device's (whole groups).
    const int64_t row_bytes = (in + 7) / 8;
    std::mt19937 rng(3);
    std::vector<uint8_t> signs(size_t(37 * row_bytes));
    for (auto& b : signs) b = uint8_t(rng());
    const auto alpha = random_floats(37, 11, 0.01f);
    const cpu::SignPlaneView sv{signs.data(), alpha.data(), 37, in, row_bytes, true};
    const std::vector<uint8_t> dev_signs = k::pad_sign_rows({signs.data(), alpha.data(), 37, in, row_bytes, true}, group);
    for (bool with_signs : {false, true}) {
      std::vector<float> want(size_t(rows * 37)), got(size_t(rows * 37), NAN);
      cpu::draft_matmul_ref(p.view(), qa, want.data(), with_signs ? &sv : nullptr);
      const k::PlaneDev d = p.dev();
      BS_LAUNCH(k::draft_matmul, d.out, k::kMatmulThreads, 0, d.codes, d.scales, d.offsets, d.out, d.groups, d.group,
                qa.q.data(), qa.scale.data(), qa.sum.data(), int64_t(rows), qa.padded,
                with_signs ? dev_signs.data() : nullptr, alpha.data(), true, got.data());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << "in " << in << " at " << i;
    }
  }
}

// The group-64 kernel (16-byte loads, dp4a, a warp per output row, rows in passes): bit for
// bit the reference, with and without signs, for batches smaller and larger than one pass and
// rows with more groups than a warp has lanes.
TEST(EmulatedKernels, DraftMatmulG64IsBitExactWithTheCpuReference) {
  const int group = 64;
  for (int64_t in : {int64_t(64), int64_t(1280), int64_t(200 * 64)}) {
    const int64_t out = 7;
    const RandomPlane p(out, in, group, uint32_t(in) + 1);
    const int64_t groups = in / group;
    ASSERT_GT(k::g64_rows_per_pass(groups), 0);
    std::mt19937 rng(static_cast<uint32_t>(in));
    std::vector<uint8_t> signs(size_t(out * groups * 8));
    for (auto& b : signs) b = uint8_t(rng());
    const auto alpha = random_floats(size_t(out), 4, 0.01f);
    const cpu::SignPlaneView sv{signs.data(), alpha.data(), out, in, groups * 8, true};
    for (int64_t rows : {1, 5, 17}) {
      const auto x = random_floats(size_t(rows * in), uint32_t(rows), 2.0f);
      cpu::QuantizedActivations qa;
      cpu::quantize_activations_ref(x.data(), rows, in, group, qa);
      for (bool with_signs : {false, true}) {
        std::vector<float> want(size_t(rows * out)), got(size_t(rows * out), NAN);
        cpu::draft_matmul_ref(p.view(), qa, want.data(), with_signs ? &sv : nullptr);
        const k::PlaneDev d = p.dev();
        BS_LAUNCH_SHARED(k::draft_matmul_g64, k::blocks_for(out, k::kG64Warps), k::kG64Threads,
                         k::g64_shared_bytes(groups), 0, d.codes, d.scales, d.offsets, d.out, d.groups, qa.q.data(),
                         qa.scale.data(), qa.sum.data(), rows, qa.padded, with_signs ? signs.data() : nullptr,
                         alpha.data(), true, got.data());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_TRUE(same_bits(want[i], got[i])) << "in " << in << " rows " << rows << " signs " << with_signs << " at " << i;
      }
    }
  }
}

TEST(EmulatedKernels, QuantizeRowsIsBitExactWithTheCpuReference) {
  const int64_t rows = 3, in = 200;
  const int group = 64;
  auto x = random_floats(size_t(rows * in), 5, 3.0f);
  for (int64_t i = 64; i < 128; ++i) x[size_t(i)] = 0.0f;  // a group of zeros (scale 0)
  cpu::QuantizedActivations want;
  cpu::quantize_activations_ref(x.data(), rows, in, group, want);
  std::vector<int8_t> q(size_t(rows * want.padded), 99);
  std::vector<float> scale(size_t(rows * want.groups), NAN);
  std::vector<int32_t> sum(size_t(rows * want.groups), -1);
  BS_LAUNCH(k::quantize_rows, k::blocks_for(rows * want.groups, 32), 32, 0, x.data(), rows, in, group, want.groups,
            want.padded, q.data(), scale.data(), sum.data());
  EXPECT_EQ(q, want.q);
  EXPECT_EQ(sum, want.sum);
  for (size_t i = 0; i < scale.size(); ++i) EXPECT_TRUE(same_bits(scale[i], want.scale[i])) << i;
}

TEST(EmulatedKernels, RopeIsBitExactWithTheCpuReference) {
  const int64_t rows = 3, heads = 4, head_dim = 16;
  const std::vector<int32_t> positions = {0, 7, 300};
  const std::vector<float> factors = {1.0f, 1.5f, 2.0f, 4.0f, 1.0f, 1.0f, 8.0f, 1.0f};
  for (bool neox : {false, true}) {
    for (int64_t n_rot : {16, 8}) {
      for (bool with_factors : {false, true}) {
        auto x = random_floats(size_t(rows * heads * head_dim), 9);
        auto want = x;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < heads; ++h)
            cpu::rope_f32(want.data() + (r * heads + h) * head_dim, n_rot,
                          neox ? cpu::RopeOrder::kNeox : cpu::RopeOrder::kNormal, float(positions[size_t(r)]), 10000.0f,
                          0.5f, with_factors ? std::span<const float>(factors.data(), size_t(n_rot / 2)) : std::span<const float>());
        BS_LAUNCH(k::rope_rows, k::blocks_for(rows * heads * n_rot / 2, 32), 32, 0, x.data(), rows, heads, head_dim,
                  n_rot, neox, positions.data(), 10000.0f, 0.5f, with_factors ? factors.data() : nullptr);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_bits(x[i], want[i])) << i;
      }
    }
  }
}

TEST(EmulatedKernels, RmsNormMatchesTheCpuReference) {
  const int64_t rows = 4, n = 300;
  const auto x = random_floats(size_t(rows * n), 13, 2.0f);
  const auto w = random_floats(size_t(n), 17);
  std::vector<float> got(x.size(), NAN), want(x.size());
  for (int64_t r = 0; r < rows; ++r) cpu::rms_norm_f32(x.data() + r * n, w.data(), n, 1e-5f, want.data() + r * n);
  BS_LAUNCH_SYNC(k::rms_norm_rows, rows, k::kBlock, 0, x.data(), w.data(), n, 1e-5f, got.data());
  // The sum of squares is in double in another order: equal up to the last bit of the scale.
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-7 * std::fabs(want[i]) + 1e-30) << i;
  auto inplace = x;
  BS_LAUNCH_SYNC(k::rms_norm_rows, rows, k::kBlock, 0, inplace.data(), w.data(), n, 1e-5f, inplace.data());
  EXPECT_EQ(inplace, got);
}

TEST(EmulatedKernels, TopKIsTheLargestFirstWithTiesToTheSmallerId) {
  const int64_t rows = 2, vocab = 1000;
  auto l = random_floats(size_t(rows * vocab), 21);
  l[5] = l[700] = l[999] = 9.0f;  // a three-way tie at the top of row 0
  l[vocab + 3] = -INFINITY;
  const int kk = 6;
  std::vector<int32_t> tok(size_t(rows * kk), -2);
  std::vector<float> lp(size_t(rows * kk), NAN);
  BS_LAUNCH_SYNC(k::top_k_rows, rows, k::kBlock, 0, l.data(), vocab, kk, tok.data(), lp.data());
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) ids[size_t(i)] = i;
    const float* lr = l.data() + r * vocab;
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return lr[a] > lr[b]; });
    std::vector<float> p(lr, lr + vocab);
    cpu::softmax_f32(p.data(), vocab);
    for (int j = 0; j < kk; ++j) {
      EXPECT_EQ(tok[size_t(r * kk + j)], ids[size_t(j)]) << "row " << r << " rank " << j;
      EXPECT_NEAR(lp[size_t(r * kk + j)], std::log(p[size_t(ids[size_t(j)])]), 1e-5) << "row " << r << " rank " << j;
    }
  }
  EXPECT_EQ(std::vector<int32_t>(tok.begin(), tok.begin() + 3), (std::vector<int32_t>{5, 700, 999}));
}

// ---------------------------------------------------------------------------------------
// The whole pass on a trained fixture.

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/models/" + name; }

class EmulatedDeviceDraft;

// A draft tier that keeps the draft's file layout and offers the emulated device draft.
class EmulatedTier final : public Backend {
 public:
  explicit EmulatedTier(std::shared_ptr<cpu::CpuContext> cpu) : cpu_(std::move(cpu)) {}
  std::string name() const override { return "emulated"; }
  bool reads_file_layout() const override { return true; }
  Status draft_matmul(const SplitProjection& p, const cpu::QuantizedActivations& x, float* y,
                      const cpu::SignPlaneView* delta) override {
    p.cpu_draft_matmul(*cpu_, x, y, delta);
    return Status::ok();
  }
  Result<std::shared_ptr<DeviceDraft>> make_device_draft(const DescribeDraft& describe, int64_t n_slots,
                                                          const void* reuse_key) override;
  std::shared_ptr<EmulatedDeviceDraft> last;
  bool g64 = true;  // the group-64 kernel (bit-identical, slower under the emulation)

 private:
  std::shared_ptr<cpu::CpuContext> cpu_;
};

// A DeviceDraft whose "device" memory is host memory and whose kernels run emulated. It also
// checks the engine's protocol: every cache slot a row can see holds K/V that were copied in
// (committed) or drafted earlier in this check, never stale ones.
class EmulatedDeviceDraft final : public DeviceDraft {
 public:
  EmulatedDeviceDraft(const gpu::DraftModelHost& h, int64_t n_slots, bool g64) : DeviceDraft(n_slots), n_slots_(n_slots) {
    model_.g64_kernel = g64;
    k::ShapeDev& s = model_.shape;
    s = k::shape_of(h);
    // A variant's sign rows repacked to whole groups, as DraftMatmul::upload_signs does.
    auto plane = [this](const gpu::DraftModelHost::Plane& p) {
      const DraftPlaneView& d = p.plane;
      k::PlaneDev dev{d.codes, d.scales, d.offsets, d.out, d.in, quant::groups_per_row(d.in, d.group), d.group};
      if (p.signs.signs) {
        dev.signs = sign_copies_.emplace_back(k::pad_sign_rows(p.signs, d.group)).data();
        dev.alpha = p.signs.alpha;
        dev.alpha_per_row = p.signs.alpha_per_row;
      }
      return dev;
    };
    if (h.embd_signs.signs) {
      model_.embd_signs = h.embd_signs.signs;
      model_.embd_alpha = h.embd_signs.alpha;
      model_.embd_alpha_per_row = h.embd_signs.alpha_per_row;
      model_.embd_row_bytes = h.embd_signs.row_bytes;
    }
    model_.token_embd = h.token_embd;
    model_.output_norm = h.output_norm;
    model_.rope_freq_factors = h.rope_freq_factors;
    model_.head = plane(h.head);
    k_cache_.assign(size_t(h.n_layers * n_slots * s.kv_dim()), NAN);
    v_cache_.assign(k_cache_.size(), NAN);
    for (int64_t l = 0; l < h.n_layers; ++l) {
      const auto& w = h.layers[size_t(l)];
      layers_.push_back({w.attn_norm, w.ffn_norm, w.q_norm, w.k_norm, w.bq, w.bk, w.bv, plane(w.wq), plane(w.wk),
                         plane(w.wv), plane(w.wo), plane(w.gate), plane(w.up), plane(w.down),
                         k_cache_.data() + l * n_slots * s.kv_dim(), v_cache_.data() + l * n_slots * s.kv_dim()});
    }
    model_.layers = layers_.data();
    valid_.assign(size_t(n_slots), 0);
  }

  std::string name() const override { return "emulated"; }

  Status upload_kv(int64_t layer, int64_t from, int64_t count, const float* k, const float* v) override {
    const int64_t kv = model_.shape.kv_dim(), to = from + count;
    std::copy(k, k + count * kv, layers_[size_t(layer)].k_cache + from * kv);
    std::copy(v, v + count * kv, layers_[size_t(layer)].v_cache + from * kv);
    transfers_.activation_bytes += uint64_t(count * kv * 8);
    if (layer == 0) kv_slots_copied += count;
    // A new check starts after each commit: what was drafted past the committed prefix is stale.
    for (int64_t j = 0; j < n_slots_; ++j) valid_[size_t(j)] = j < to ? 1 : 0;
    return Status::ok();
  }

  Status forward(const DraftRows& b, int kk, DraftTopK& top, std::vector<float>* logits) override {
    const int64_t rows = b.rows;
    for (int64_t r = 0; r < rows; ++r) valid_[size_t(b.slots[size_t(r)])] = 1;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < b.kv_len; ++j) {
        if (b.mask[size_t(r * b.kv_len + j)] && !valid_[size_t(j)]) {
          return Status::error("row " + std::to_string(r) + " sees slot " + std::to_string(j) + " holding stale K/V");
        }
      }
    }
    const k::ScratchSizes z = k::scratch_sizes(model_.shape, rows, b.kv_len);
    std::vector<float> f(static_cast<size_t>(z.floats()), NAN);
    std::vector<int8_t> qa(static_cast<size_t>(z.qa));
    std::vector<int32_t> qsum(static_cast<size_t>(z.qa_groups));
    k::ScratchDev t = k::carve_scratch(f.data(), qa.data(), qsum.data(), z);
    const k::BatchDev bd{b.tokens, b.positions, b.slots, b.mask, rows, b.kv_len};
    k::draft_forward(model_, bd, t, 0);
    top.k = kk;
    top.tokens.assign(size_t(rows * kk), -1);
    top.log_probs.assign(size_t(rows * kk), NAN);
    if (kk > 0) {
      BS_LAUNCH_SYNC(k::top_k_rows, rows, k::kBlock, 0, t.logits, model_.shape.n_vocab, kk, top.tokens.data(),
                     top.log_probs.data());
    }
    if (logits) logits->assign(t.logits, t.logits + z.logits);
    transfers_.activation_bytes += uint64_t(rows * 12 + rows * b.kv_len);
    transfers_.result_bytes += uint64_t(rows * kk * 8) + (logits ? uint64_t(z.logits * 4) : 0);
    ++transfers_.calls;
    return Status::ok();
  }

  DeviceTransfers transfers() const override { return transfers_; }
  int64_t kv_slots_copied = 0;

 private:
  int64_t n_slots_;
  k::ModelDev model_;
  std::vector<k::LayerDev> layers_;
  std::vector<float> k_cache_, v_cache_;
  std::list<std::vector<uint8_t>> sign_copies_;  // stable addresses
  std::vector<uint8_t> valid_;
  DeviceTransfers transfers_;
};

Result<std::shared_ptr<DeviceDraft>> EmulatedTier::make_device_draft(const DescribeDraft& describe, int64_t n_slots,
                                                                     const void* reuse_key) {
  (void)reuse_key;
  BITSPLIT_ASSIGN_OR_RETURN(gpu::DraftModelHost h, describe());
  last = std::make_shared<EmulatedDeviceDraft>(h, n_slots, g64);
  return std::shared_ptr<DeviceDraft>(last);
}

struct Fixture {
  testing::TempDir dir{"emulated-draft"};
  std::unique_ptr<WeightSource> src;
  std::shared_ptr<EmulatedTier> tier;
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt;
};

std::unique_ptr<Fixture> load_fixture() {
  auto f = std::make_unique<Fixture>();
  auto base = open_weights(fixture("bible-base.gguf"));
  BITSPLIT_CHECK(base.is_ok(), "fixture");
  const std::string path = f->dir.file("base.split.gguf");
  Status st = convert_model(**base, path, {}, nullptr, nullptr);
  BITSPLIT_CHECK(st.is_ok(), st.message());
  auto src = open_weights(path);
  BITSPLIT_CHECK(src.is_ok());
  f->src = std::move(*src);
  auto cpu = std::make_shared<cpu::CpuContext>();
  f->tier = std::make_shared<EmulatedTier>(cpu);
  ModelLoadOptions o;
  o.cpu = cpu;
  o.backend = f->tier;
  auto m = Model::load(*f->src, o);
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  f->model = std::make_unique<Model>(std::move(*m));
  auto tok = Tokenizer::from_metadata((*base)->metadata());
  BITSPLIT_CHECK(tok.is_ok());
  f->prompt = (*tok)->encode("And the LORD spake unto Moses, saying", {.add_special = true});
  return f;
}

TEST(EmulatedDraftPass, LogitsMatchTheCpuDraftOnATrainedModel) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto f = load_fixture();
  const Model& m = *f->model;
  const int64_t slots = 64;
  auto dev = testing::device_draft_of(m, slots);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  // Same arithmetic as the CPU but for the order of two double sums (norms, softmax): measured
  // bitwise equal, so no tolerance.
  testing::expect_device_draft_matches_cpu(m, **dev, f->prompt, slots, 0.0f);
  testing::expect_device_draft_batch_invariant(**dev, f->prompt, m.config().n_vocab);
}

TEST(EmulatedDraftPass, SpeculativeDecodingThroughTheDeviceDraftIsLossless) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto f = load_fixture();
  f->tier->g64 = false;  // the plain kernel: the same bits, and many times faster emulated
  const Model& m = *f->model;
  SamplingParams sp;
  sp.temperature = 0;
  const int n = 24;
  std::vector<int32_t> plain;
  {
    Sampler s(sp);
    GenerateOptions g;
    g.n_predict = n;
    ASSERT_TRUE(generate(m, f->prompt, g, s, [&](int32_t t) { plain.push_back(t); return true; }).is_ok());
  }
  for (auto shape : {speculation::DraftShape::kChain, speculation::DraftShape::kTree}) {
    Sampler s(sp);
    SpeculativeOptions o;
    o.n_predict = n;
    o.policy.shape = shape;
    o.policy.budget = shape == speculation::DraftShape::kChain ? 4 : 8;
    o.policy.max_depth = shape == speculation::DraftShape::kChain ? 4 : 3;
    std::vector<int32_t> out;
    auto r = generate_speculative(m, m, f->prompt, o, s, [&](int32_t t) { out.push_back(t); return true; });
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->draft_pass, "device (emulated)");
    EXPECT_EQ(out, plain) << (shape == speculation::DraftShape::kChain ? "chain" : "tree");
    EXPECT_GT(r->acceptance.accepted, 0) << "the device draft should agree with the target sometimes";
    // Each committed slot's K/V went to the device once: the prompt's prefix, then per check
    // the root and the accepted tokens.
    ASSERT_TRUE(f->tier->last);
    EXPECT_EQ(f->tier->last->kv_slots_copied,
              int64_t(f->prompt.size()) - 1 + r->acceptance.checks + r->acceptance.accepted);
    // One device call per draft level: at least one per check, at most max_depth.
    EXPECT_GE(r->device_transfers.calls, uint64_t(r->acceptance.checks));
    EXPECT_LE(r->device_transfers.calls, uint64_t(r->acceptance.checks) * uint64_t(o.policy.max_depth));
  }
  // Off switch and variants keep the host path, and say so.
  Sampler s(sp);
  SpeculativeOptions o;
  o.n_predict = 4;
  o.device_draft = false;
  auto r = generate_speculative(m, m, f->prompt, o, s, [](int32_t) { return true; });
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->draft_pass, "host (device draft switched off)");
}

// bible-devil as a BitDelta variant of the converted base (per-row α).
std::shared_ptr<const Variant> devil_variant(const Model& split) {
  auto base = open_weights(fixture("bible-base.gguf"));
  auto ft = open_weights(fixture("bible-devil.gguf"));
  BITSPLIT_CHECK(base.is_ok() && ft.is_ok(), "fixtures");
  auto b = Model::load(**base);
  auto f = Model::load(**ft);
  BITSPLIT_CHECK(b.is_ok() && f.is_ok());
  auto parts = compute_delta(*b, *f, quant::DeltaAlpha::kRow);
  BITSPLIT_CHECK(parts.is_ok(), parts.status().message());
  auto v = Variant::make(split, "devil", parts->signs, parts->full);
  BITSPLIT_CHECK(v.is_ok(), v.status().message());
  return *v;
}

// A variant on the device draft: its signs fused into the kernels, its norms in place, its
// embedding delta added at the gather — the same logits as the CPU draft of the variant, and
// speculative decoding of the variant through it equals plain decoding of the variant.
TEST(EmulatedDraftPass, VariantDraftMatchesTheCpuAndDecodesLosslessly) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-devil.gguf"));
  auto f = load_fixture();
  f->tier->g64 = false;
  const Model& m = *f->model;
  auto v = devil_variant(m);
  auto d = describe_device_draft(m, v.get());
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_TRUE(d->embd_signs.signs != nullptr && d->layers[0].wq.signs.signs != nullptr && d->head.signs.signs != nullptr);
  EXPECT_NE(d->layers[0].attn_norm, m.layer(0).attn_norm.data()) << "the variant's norm";

  const int64_t slots = 64;
  auto dev = testing::device_draft_of(m, slots, v.get());
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  KvCache cache(m.config(), slots);
  const Batch prompt = Batch::causal(f->prompt, 0, true);
  auto want = forward_pass(m, cache, prompt, nullptr, Pass::kDraft, v.get());
  auto base = forward_pass(m, cache, prompt, nullptr, Pass::kDraft);
  ASSERT_TRUE(want.is_ok() && base.is_ok());
  DraftTopK top;
  std::vector<float> got;
  ASSERT_TRUE((*dev)->forward(draft_rows(prompt), 1, top, &got).is_ok());
  float scale = 0, diff = 0, from_base = 0;
  for (size_t i = 0; i < want->size(); ++i) {
    scale = std::max(scale, std::fabs((*want)[i]));
    diff = std::max(diff, std::fabs((*want)[i] - got[i]));
    from_base = std::max(from_base, std::fabs((*base)[i] - got[i]));
  }
  // The emulation's arithmetic is the CPU's but for two double sums' order: measured bitwise equal.
  EXPECT_EQ(diff, 0.0f) << "of " << scale;
  EXPECT_GT(from_base, 1.0f) << "the variant's draft must differ from the base's (measured 8.6)";

  SamplingParams sp;
  sp.temperature = 0;
  std::vector<int32_t> plain, spec_out;
  Sampler a(sp), b(sp);
  GenerateOptions g;
  g.n_predict = 24;
  g.variant = v.get();
  ASSERT_TRUE(generate(m, f->prompt, g, a, [&](int32_t t) { plain.push_back(t); return true; }).is_ok());
  SpeculativeOptions o;
  o.n_predict = 24;
  o.policy.shape = speculation::DraftShape::kChain;
  o.policy.budget = 4;
  o.policy.max_depth = 4;
  o.variant = v.get();
  auto r = generate_speculative(m, m, f->prompt, o, b, [&](int32_t t) { spec_out.push_back(t); return true; });
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->draft_pass, "device (emulated)");
  EXPECT_EQ(spec_out, plain);
  EXPECT_GT(r->acceptance.accepted, 0);
}

TEST(EmulatedDraftPass, ModelsTheDeviceCannotRunAreNamed) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto base = open_weights(fixture("bible-base.gguf"));
  ASSERT_TRUE(base.is_ok());
  auto m = Model::load(**base);  // f32 weights: nothing for a 2-bit kernel
  ASSERT_TRUE(m.is_ok());
  auto d = describe_device_draft(*m);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("blk.0.attn_q.weight is not a bit-split projection"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace bitsplit
