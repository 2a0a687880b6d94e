// The whole device draft pass (gpu/draft_forward.cuh), run on the CPU under
// tests/gpu/cuda_emulation.h: against forward_pass's draft on a trained fixture, and speculative
// decoding through a DeviceDraft built on the emulated pass (lossless; every K/V slot a row sees
// was copied in or drafted in this check). Its kernels one by one: draft_kernels_emulated_test.cpp.
#include "cuda_emulation.h"  // first: defines the CUDA names the kernels use

#include <gtest/gtest.h>

#include <map>

#include <random>

#include <set>

#include <algorithm>
#include <cmath>
#include <list>

#include "bitsplit/convert.h"
#include "bitsplit/device_draft.h"
#include "bitsplit/speculative.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "bitsplit/variant_build.h"
#include "draft_testing.h"
#include "generation_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

namespace k = gpu::kernels;

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
      k::PlaneDev dev{d.codes, d.scales, d.offsets, d.out, d.in, quant::groups_per_row(d.in, d.group), d.group,
                      d.bits};
      if (p.signs.signs) {
        dev.signs = sign_copies_.emplace_back(k::pad_sign_rows(p.signs, d.group)).data();
        dev.alpha = p.signs.alpha;
        dev.alpha_per_row = p.signs.alpha_per_row;
      }
      dev.lora_up = p.lora.up;  // a LoRA variant's factors, read where the host holds them
      dev.lora_down = p.lora.down;
      dev.lora_rank = p.lora.rank;
      dev.lora_scale = p.lora.scale;
      return dev;
    };
    if (h.embd_signs.signs) {
      model_.embd_signs = h.embd_signs.signs;
      model_.embd_alpha = h.embd_signs.alpha;
      model_.embd_alpha_per_row = h.embd_signs.alpha_per_row;
      model_.embd_row_bytes = h.embd_signs.row_bytes;
    }
    model_.embd_lora_up = h.embd_lora.up;
    model_.embd_lora_down = h.embd_lora.down;
    model_.embd_lora_rank = h.embd_lora.rank;
    model_.embd_lora_scale = h.embd_lora.scale;
    model_.token_embd = h.token_embd;
    model_.output_norm = h.output_norm;
    model_.rope_freq_factors = h.rope_freq_factors;
    model_.head = plane(h.head);
    k_cache_.assign(size_t(h.shape.n_layers * n_slots * s.kv_dim()), NAN);
    v_cache_.assign(k_cache_.size(), NAN);
    for (int64_t l = 0; l < h.shape.n_layers; ++l) {
      const auto& w = h.layers[size_t(l)];
      k::LayerDev d = k::layer_of(w);
      d.wq = plane(w.wq);
      d.wk = plane(w.wk);
      d.wv = plane(w.wv);
      d.wo = plane(w.wo);
      if (h.shape.n_expert > 0) {
        std::vector<k::PlaneDev>& experts = experts_.emplace_back();
        for (const auto& e : w.experts) experts.push_back(plane(e));
        d.experts = experts.data();
        if (h.shape.n_ff_shexp > 0) {
          d.shexp_gate = plane(w.shexp_gate);
          d.shexp_up = plane(w.shexp_up);
          d.shexp_down = plane(w.shexp_down);
        }
      } else {
        d.gate = plane(w.gate);
        d.up = plane(w.up);
        d.down = plane(w.down);
      }
      d.k_cache = k_cache_.data() + l * n_slots * s.kv_dim();
      d.v_cache = v_cache_.data() + l * n_slots * s.kv_dim();
      layers_.push_back(d);
    }
    model_.layers = layers_.data();
    slot_pos_.assign(size_t(n_slots), -1000000);  // far from any position until written
    model_.slot_pos = slot_pos_.data();
    valid_.assign(size_t(n_slots), 0);
  }

  std::string name() const override { return "emulated"; }

  Status upload_kv(int64_t layer, int64_t from, int64_t count, const float* k, const float* v,
                   const int32_t* positions) override {
    const int64_t kv = model_.shape.kv_dim(), to = from + count;
    if (positions) std::copy(positions, positions + count, slot_pos_.begin() + from);
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
    std::vector<int32_t> qsum(static_cast<size_t>(z.ints()));
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
  const float* rope_factors() const { return model_.rope_freq_factors; }  // the set it turns by

 private:
  int64_t n_slots_;
  k::ModelDev model_;
  std::vector<k::LayerDev> layers_;
  std::vector<float> k_cache_, v_cache_;
  std::vector<int32_t> slot_pos_;
  std::list<std::vector<uint8_t>> sign_copies_;  // stable addresses
  std::list<std::vector<k::PlaneDev>> experts_;     // per MoE layer (stable addresses)
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

using testing::plain_greedy;

// Greedy speculative decoding of m (and the variant) by itself with a fixed setting.
Result<SpeculativeResult> spec_greedy(const Model& m, const std::vector<int32_t>& prompt, int n,
                                      spec::DraftShape shape, int budget, int depth, const Variant* variant,
                                      std::vector<int32_t>* out) {
  SpeculativeOptions o;
  o.n_predict = n;
  o.policy.shape = shape;
  o.policy.budget = budget;
  o.policy.max_depth = depth;
  o.variant = variant;
  return testing::speculative_greedy(m, m, prompt, o, out);
}

struct Fixture {
  testing::TempDir dir{"emulated-draft"};
  std::unique_ptr<WeightSource> src;
  std::shared_ptr<EmulatedTier> tier;
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt;
};

// A fixture (bible-base unless named) converted (draft_bpw > 0: a mixed-precision draft) and
// loaded on the emulated tier.
std::unique_ptr<Fixture> load_fixture(double draft_bpw = 0.0, const std::string& name = "bible-base.gguf") {
  auto f = std::make_unique<Fixture>();
  auto base = open_weights(fixture(name));
  BITSPLIT_CHECK(base.is_ok(), "fixture");
  const std::string path = f->dir.file("base.split.gguf");
  ConvertOptions co;
  co.draft_bpw = draft_bpw;
  Status st = convert_model(**base, path, co, nullptr, nullptr);
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

// A mixed-precision draft (2-, 3- and 4-bit planes): the device pass runs the 3- and 4-bit planes
// on the plain kernel and still equals the CPU draft bit for bit.
TEST(EmulatedDraftPass, MixedPrecisionDraftMatchesTheCpuDraft) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto f = load_fixture(3.25);
  const Model& m = *f->model;
  std::set<int> widths;
  for (const char* w : {"attn_q", "attn_k", "attn_v", "ffn_down"}) widths.insert(m.split(std::string("blk.0.") + w + ".weight")->draft_bits);
  widths.insert(m.split("output.weight")->draft_bits);
  ASSERT_GT(widths.size(), 1u) << "the fixture's budget should mix widths";
  const int64_t slots = 64;
  auto dev = testing::device_draft_of(m, slots);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  testing::expect_device_draft_matches_cpu(m, **dev, f->prompt, slots, 0.0f);
}

TEST(EmulatedDraftPass, SpeculativeDecodingThroughTheDeviceDraftIsLossless) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto f = load_fixture();
  f->tier->g64 = false;  // the plain kernel: the same bits, and many times faster emulated
  const Model& m = *f->model;
  const int n = 24;
  const std::vector<int32_t> plain = plain_greedy(m, f->prompt, n);
  for (auto shape : {spec::DraftShape::kChain, spec::DraftShape::kTree}) {
    const bool chain = shape == spec::DraftShape::kChain;
    const int depth = chain ? 4 : 3;
    std::vector<int32_t> out;
    auto r = spec_greedy(m, f->prompt, n, shape, chain ? 4 : 8, depth, nullptr, &out);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->draft_pass, "device (emulated)");
    EXPECT_EQ(out, plain) << (shape == spec::DraftShape::kChain ? "chain" : "tree");
    EXPECT_GT(r->acceptance.accepted, 0) << "the device draft should agree with the target sometimes";
    // Each committed slot's K/V went to the device once: the prompt's prefix, then per check
    // the root and the accepted tokens.
    ASSERT_TRUE(f->tier->last);
    EXPECT_EQ(f->tier->last->kv_slots_copied,
              int64_t(f->prompt.size()) - 1 + r->acceptance.checks + r->acceptance.accepted);
    // One device call per draft level: at least one per check, at most max_depth.
    EXPECT_GE(r->device_transfers.calls, uint64_t(r->acceptance.checks));
    EXPECT_LE(r->device_transfers.calls, uint64_t(r->acceptance.checks) * uint64_t(depth));
  }
  // Off switch and variants keep the host path, and say so.
  SpeculativeOptions o;
  o.n_predict = 4;
  o.device_draft = false;
  std::vector<int32_t> ignored;
  auto r = testing::speculative_greedy(m, m, f->prompt, o, &ignored);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->draft_pass, "host (device draft switched off)");
}

// The device pass (64 slots) equals the CPU draft bit for bit on the prompt and a tree level,
// and speculative decoding through it (tree of 8, depth 3, 24 tokens) equals plain decoding.
void expect_device_pass_equals_cpu_and_decodes_losslessly(const Model& m, const std::vector<int32_t>& prompt) {
  const int64_t slots = 64;
  auto dev = testing::device_draft_of(m, slots);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  testing::expect_device_draft_matches_cpu(m, **dev, prompt, slots, 0.0f);
  const std::vector<int32_t> plain = plain_greedy(m, prompt, 24);
  std::vector<int32_t> spec_out;
  auto r = spec_greedy(m, prompt, 24, spec::DraftShape::kTree, 8, 3, nullptr, &spec_out);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->draft_pass, "device (emulated)");
  EXPECT_EQ(spec_out, plain);
}

// Gemma 3 and Gemma 2 (the tiny fixtures: window 8, QK-norm, norms after each branch, GeGLU,
// embedding scale; gemma2's soft caps): the device pass equals the CPU draft, and decoding past
// the window through it is lossless.
TEST(EmulatedDraftPass, GemmaDraftMatchesTheCpuAndDecodesLosslessly) {
  for (const char* name : {"gemma3-tiny.gguf", "gemma2-tiny.gguf"}) {
    SCOPED_TRACE(name);
    BITSPLIT_REQUIRE_FILE(fixture(name));
    auto f = load_fixture(0.0, name);
    f->tier->g64 = false;
    const Model& m = *f->model;
    ASSERT_GT(m.config().sliding_window, 0);
    ASSERT_GT(int64_t(f->prompt.size()), m.config().sliding_window) << "the prompt should cross the window";
    auto d = describe_device_draft(m, nullptr, 64);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(d->shape.ffn_act, FfnActivation::kGeluTanh);
    EXPECT_NE(d->layers[0].post_attn_norm, nullptr);
    expect_device_pass_equals_cpu_and_decodes_losslessly(m, f->prompt);
  }
}

// Mixtures of experts (Mixtral, qwen2moe with its shared expert and unnormalised weights,
// qwen3moe; 8 experts, 2 per row): the device pass routes on the host from the router's logits
// and runs each routed expert on its rows, equal to the CPU draft bit for bit (prompt, tree
// levels); speculative decoding through it equals plain decoding.
TEST(EmulatedDraftPass, MixtureOfExpertsDraftMatchesTheCpuAndDecodesLosslessly) {
  for (const char* name : {"mixtral-tiny.gguf", "qwen2moe-tiny.gguf", "qwen3moe-tiny.gguf", "qwen3moe-bible.gguf"}) {
    SCOPED_TRACE(name);
    BITSPLIT_REQUIRE_FILE(fixture(name));
    auto f = load_fixture(0.0, name);
    f->tier->g64 = false;
    const Model& m = *f->model;
    ASSERT_TRUE(m.config().is_moe());
    auto d = describe_device_draft(m, nullptr, 64);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(d->shape.n_expert, 8);
    EXPECT_EQ(d->layers[0].experts.size(), 24u);  // 8 experts x {gate, up, down}
    EXPECT_NE(d->layers[0].router, nullptr);
    EXPECT_EQ(d->layers[0].shexp_gate_inp != nullptr, m.config().n_ff_shexp > 0);
    expect_device_pass_equals_cpu_and_decodes_losslessly(m, f->prompt);
  }
}

// Phi-3 with LongRoPE (trained for 32 positions): the device draft turns by the set its
// sequence's context picks, as the CPU's forward does (32 positions: the short ones, 64: the long
// ones), scales cos and sin alike, and the two give different logits.
TEST(EmulatedDraftPass, LongRopeDraftMatchesTheCpuForEitherFactors) {
  const char* name = "phi3-longrope-tiny.gguf";
  BITSPLIT_REQUIRE_FILE(fixture(name));
  auto f = load_fixture(0.0, name);
  f->tier->g64 = false;
  const Model& m = *f->model;
  ASSERT_EQ(m.config().rope_original_context, 32);
  for (int64_t context : {32, 64}) {  // the set each context picks, the long one past 32
    auto d = describe_device_draft(m, nullptr, context);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(d->rope_freq_factors, (context > 32 ? m.rope_freq_factors_long() : m.rope_freq_factors(0)).data());
    EXPECT_EQ(d->shape.rope_attn_factor, m.config().rope_attn_factor);
    EXPECT_GT(d->shape.rope_attn_factor, 1.0f);
  }
  std::vector<std::vector<float>> last_rows;
  for (int64_t slots : {32, 64}) {
    SCOPED_TRACE(slots);
    auto dev = testing::device_draft_of(m, slots);
    ASSERT_TRUE(dev.is_ok()) << dev.status().message();
    testing::expect_device_draft_matches_cpu(m, **dev, f->prompt, slots, 0.0f);
    KvCache cache(m.config(), slots);
    auto logits = forward_pass(m, cache, Batch::causal(f->prompt, 0), nullptr, Pass::kDraft);
    ASSERT_TRUE(logits.is_ok()) << logits.status().message();
    last_rows.push_back(std::move(*logits));
  }
  EXPECT_NE(last_rows[0], last_rows[1]) << "32 and 64 slots should turn by different factors";
  // In speculative decoding the device draft takes the target's set, chosen by the sequence's
  // context (prompt + tokens), not by its slot count (which includes the tree's scratch): 16
  // tokens stay inside the trained 32 positions, 40 pass them.
  for (int n : {16, 40}) {
    SCOPED_TRACE(n);
    const int64_t needed = int64_t(f->prompt.size()) + n;
    const std::vector<int32_t> plain = plain_greedy(m, f->prompt, n);
    std::vector<int32_t> spec_out;
    auto r = spec_greedy(m, f->prompt, n, spec::DraftShape::kTree, 8, 3, nullptr, &spec_out);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->draft_pass, "device (emulated)");
    EXPECT_EQ(spec_out, plain);
    ASSERT_TRUE(f->tier->last);
    EXPECT_EQ(f->tier->last->rope_factors(), m.rope_freq_factors(needed).data());
    EXPECT_EQ(needed > 32, f->tier->last->rope_factors() == m.rope_freq_factors_long().data());
  }
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
  auto d = describe_device_draft(m, v.get(), 64);
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

  const std::vector<int32_t> plain = plain_greedy(m, f->prompt, 24, v.get());
  std::vector<int32_t> spec_out;
  auto r = spec_greedy(m, f->prompt, 24, spec::DraftShape::kChain, 4, 4, v.get(), &spec_out);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->draft_pass, "device (emulated)");
  EXPECT_EQ(spec_out, plain);
  EXPECT_GT(r->acceptance.accepted, 0);
}

// LoRA variants on the device draft: the trained bible-devil-lora adapter (the seven projections
// and the head) and a synthetic one on the token embedding (the gather's add) and two
// projections: the device pass gives the CPU draft's logits bit for bit, and speculative decoding
// through it equals plain decoding of the variant.
TEST(EmulatedDraftPass, LoraDraftMatchesTheCpuAndDecodesLosslessly) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-devil-lora.gguf"));
  auto f = load_fixture();
  f->tier->g64 = false;
  const Model& m = *f->model;
  auto file = open_lora(fixture("bible-devil-lora.gguf"));
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto trained = Variant::load(*file, m, "devil-lora", 1.0f);
  ASSERT_TRUE(trained.is_ok()) << trained.status().message();
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 0.05f);
  auto lora = [&](int64_t out, int64_t in, int64_t rank) {
    VariantLora l{out, in, rank, 0.75f, std::vector<float>(size_t(out * rank)), std::vector<float>(size_t(rank * in))};
    for (float& x : l.up) x = n(rng);
    for (float& x : l.down) x = n(rng);
    return l;
  };
  const ModelConfig& c = m.config();
  std::map<std::string, VariantLora> factors;
  factors["token_embd.weight"] = lora(c.n_vocab, c.n_embd, 3);
  factors["blk.1.ffn_down.weight"] = lora(c.n_embd, c.n_ff, 5);
  factors["blk.2.attn_k.weight"] = lora(c.kv_dim(), c.n_embd, 2);
  auto synthetic = Variant::make(m, "synthetic", {}, {}, std::move(factors));
  ASSERT_TRUE(synthetic.is_ok()) << synthetic.status().message();

  for (const Variant* v : {trained->get(), synthetic->get()}) {
    SCOPED_TRACE(v->name());
    auto d = describe_device_draft(m, v, 64);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(d->max_lora_rank, v == trained->get() ? 8 : 5);
    EXPECT_EQ(d->embd_lora.up != nullptr, v != trained->get()) << "only the synthetic one adapts the embedding";
    EXPECT_EQ(d->head.lora.up != nullptr, v == trained->get()) << "the trained one adapts the head";
    const int64_t slots = 64;
    auto dev = testing::device_draft_of(m, slots, v);
    ASSERT_TRUE(dev.is_ok()) << dev.status().message();
    KvCache cache(m.config(), slots);
    const Batch prompt = Batch::causal(f->prompt, 0, true);
    auto want = forward_pass(m, cache, prompt, nullptr, Pass::kDraft, v);
    auto base = forward_pass(m, cache, prompt, nullptr, Pass::kDraft);
    ASSERT_TRUE(want.is_ok() && base.is_ok());
    DraftTopK top;
    std::vector<float> got;
    ASSERT_TRUE((*dev)->forward(draft_rows(prompt), 1, top, &got).is_ok());
    float diff = 0, from_base = 0;
    for (size_t i = 0; i < want->size(); ++i) {
      diff = std::max(diff, std::fabs((*want)[i] - got[i]));
      from_base = std::max(from_base, std::fabs((*base)[i] - got[i]));
    }
    EXPECT_EQ(diff, 0.0f);
    EXPECT_GT(from_base, 0.1f) << "the adapter must change the draft";

    if (v != trained->get()) continue;  // the emulated decode is slow: once is enough
    const std::vector<int32_t> plain = plain_greedy(m, f->prompt, 16, v);
    std::vector<int32_t> spec_out;
    auto r = spec_greedy(m, f->prompt, 16, spec::DraftShape::kChain, 4, 4, v, &spec_out);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->draft_pass, "device (emulated)");
    EXPECT_EQ(spec_out, plain);
  }
}

TEST(EmulatedDraftPass, ModelsTheDeviceCannotRunAreNamed) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto base = open_weights(fixture("bible-base.gguf"));
  ASSERT_TRUE(base.is_ok());
  auto m = Model::load(**base);  // f32 weights: nothing for a 2-bit kernel
  ASSERT_TRUE(m.is_ok());
  auto d = describe_device_draft(*m, nullptr, 64);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("blk.0.attn_q.weight is not a bit-split projection"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace bitsplit
