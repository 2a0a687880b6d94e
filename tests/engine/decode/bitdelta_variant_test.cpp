// BitDelta variants on a shared base, end to end on the trained fixtures (tests/models): a
// delta file loaded against a converted base runs in both tiers without materialising the
// variant's weights, agrees with the materialised weights, stays batch invariant, decodes
// speculatively exactly losslessly, and drafts better than the plain base draft.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>

#include "bitsplit/convert.h"
#include "bitsplit/speculative.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "bitsplit/variant_build.h"
#include "generation_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/models/" + name; }

// Base (bible-base) converted to a bit-split file and loaded with the plane kernels, and a
// fine-tune's delta file against the original base; everything in one temp dir.
struct Setup {
  testing::TempDir dir{"variant"};
  std::unique_ptr<WeightSource> base_src, split_src, ft_src;
  std::unique_ptr<Model> base_f32, ft_f32, split;
  std::string delta_path;
};

std::unique_ptr<Setup> make_setup(const std::string& ft_name, quant::DeltaAlpha alpha = quant::DeltaAlpha::kRow) {
  auto s = std::make_unique<Setup>();
  auto base = open_weights(fixture("bible-base.gguf"));
  auto ft = open_weights(fixture(ft_name));
  BITSPLIT_CHECK(base.is_ok() && ft.is_ok(), "fixtures");
  s->base_src = std::move(*base);
  s->ft_src = std::move(*ft);
  const std::string split_path = s->dir.file("base.split.gguf");
  Status st = convert_model(*s->base_src, split_path, {}, nullptr, nullptr);
  BITSPLIT_CHECK(st.is_ok(), st.message());
  auto split_src = open_weights(split_path);
  BITSPLIT_CHECK(split_src.is_ok());
  s->split_src = std::move(*split_src);
  auto split = Model::load(*s->split_src);
  auto bf = Model::load(*s->base_src);
  auto ff = Model::load(*s->ft_src);
  BITSPLIT_CHECK(split.is_ok() && bf.is_ok() && ff.is_ok());
  s->split = std::make_unique<Model>(std::move(*split));
  s->base_f32 = std::make_unique<Model>(std::move(*bf));
  s->ft_f32 = std::make_unique<Model>(std::move(*ff));
  s->delta_path = s->dir.file("v.delta.gguf");
  st = make_delta(*s->base_src, *s->ft_src, s->delta_path, {alpha}, nullptr);
  BITSPLIT_CHECK(st.is_ok(), st.message());
  return s;
}

std::shared_ptr<const Variant> load_variant(const Setup& s, const WeightSource& against) {
  auto d = open_delta(s.delta_path);
  BITSPLIT_CHECK(d.is_ok(), d.status().message());
  auto v = Variant::load(*d, *s.split, against, "ft");
  BITSPLIT_CHECK(v.is_ok(), v.status().message());
  return *v;
}

std::vector<int32_t> encode(const Setup& s, const std::string& text) {
  auto tok = Tokenizer::from_metadata(s.base_src->metadata());
  BITSPLIT_CHECK(tok.is_ok());
  return (*tok)->encode(text, {.add_special = true});
}

std::vector<float> logits(const Model& m, const std::vector<int32_t>& tokens, Pass tier, const Variant* v) {
  KvCache cache(m.config(), int64_t(tokens.size()));
  auto r = forward_pass(m, cache, Batch::causal(tokens, 0, true), nullptr, tier, v);
  BITSPLIT_CHECK(r.is_ok(), r.status().message());
  return *r;
}

// Greedy speculative decoding of the variant on the split base; fills the acceptance stats.
std::vector<int32_t> spec_greedy(const Setup& s, const Variant* v, const std::vector<int32_t>& prompt, int n,
                                 spec::DraftShape shape, int budget, bool base_draft,
                                 spec::AcceptanceStats* stats = nullptr) {
  SpeculativeOptions o;
  o.n_predict = n;
  o.policy.shape = shape;
  o.policy.budget = budget;
  o.policy.max_depth = shape == spec::DraftShape::kChain ? budget : 8;
  o.variant = v;
  o.base_draft = base_draft;
  std::vector<int32_t> out;
  auto r = testing::speculative_greedy(*s.split, *s.split, prompt, o, &out);
  BITSPLIT_CHECK(r.is_ok(), r.status().message());
  if (stats) *stats = r->acceptance;
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST(Variant, F32PathMatchesMaterialisedWeights) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto s = make_setup("bible-psalms.gguf");
  auto d = open_delta(s->delta_path);
  ASSERT_TRUE(d.is_ok());
  // transformed() replaces the matrices only, so compare the sign planes alone (norms as the base's).
  auto parts = compute_delta(*s->base_f32, *s->ft_f32, quant::DeltaAlpha::kRow);
  ASSERT_TRUE(parts.is_ok());
  auto v = Variant::make(*s->base_f32, "psalms", parts->signs, {});
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  // The same variant materialised: every matrix replaced by base + α·sign.
  const DeltaFile& df = *d;
  auto apply = [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols) {
    auto r = apply_delta_f32(df, name, w, rows, cols);
    BITSPLIT_CHECK(r.is_ok(), r.status().message());
    return *r;
  };
  Model materialised = s->base_f32->transformed(apply, apply);
  const auto tokens = encode(*s, "And the LORD spake unto Moses, saying");
  const auto a = logits(*s->base_f32, tokens, Pass::kDefault, v->get());
  const auto b = logits(materialised, tokens, Pass::kDefault, nullptr);
  const auto base = logits(*s->base_f32, tokens, Pass::kDefault, nullptr);
  // Only the f32 summation order differs (signs summed apart from the base weights): measured
  // 5.7e-6 on logits of magnitude ~17.
  EXPECT_LT(max_abs_diff(a, b), 1e-4);
  EXPECT_GT(max_abs_diff(a, base), 0.1) << "the variant must change the logits";
}

TEST(Variant, PlaneKernelsMatchTheF32VariantAndAreBatchInvariant) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto s = make_setup("bible-psalms.gguf");
  auto v = load_variant(*s, *s->split_src);
  const auto tokens = encode(*s, "In the beginning God created the heaven and the earth.");
  const int64_t V = s->split->config().n_vocab, n = int64_t(tokens.size());
  const auto all = logits(*s->split, tokens, Pass::kTarget, v.get());
  // Token by token through the cache: each row must be bitwise what the whole batch gave.
  KvCache cache(s->split->config(), n);
  for (int64_t i = 0; i < n; ++i) {
    Batch b = Batch::causal(std::span<const int32_t>(&tokens[size_t(i)], 1), int32_t(i));
    auto one = forward_pass(*s->split, cache, b, nullptr, Pass::kTarget, v.get());
    ASSERT_TRUE(one.is_ok());
    for (int64_t t = 0; t < V; ++t) ASSERT_EQ((*one)[size_t(t)], all[size_t(i * V + t)]) << "token " << i;
  }
  // Close to the f32 fine-tune the delta stands for (D+R8 with int8 activations vs f32).
  auto d = open_delta(s->delta_path);
  auto vf = Variant::load(*d, *s->base_f32, *s->base_src, "f32");
  ASSERT_TRUE(vf.is_ok());
  const auto f32 = logits(*s->base_f32, tokens, Pass::kDefault, vf->get());
  const auto plain = logits(*s->split, tokens, Pass::kTarget, nullptr);
  // Measured: 0.15 from the f32 variant, against 4.0 for the base without the delta.
  EXPECT_LT(max_abs_diff(all, f32), 0.1 * max_abs_diff(plain, f32));
  EXPECT_GT(max_abs_diff(all, plain), 0.1);
}

TEST(Variant, SpeculativeGreedyEqualsPlainGreedyOfTheVariant) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto s = make_setup("bible-devil.gguf");
  auto v = load_variant(*s, *s->split_src);
  SamplingParams sp;
  sp.temperature = 0;
  for (const std::string text : {"The devil said unto", "And it came to pass"}) {
    const auto prompt = encode(*s, text);
    Sampler plain_sampler(sp);
    GenerateOptions g;
    g.n_predict = 160;
    g.variant = v.get();
    std::vector<int32_t> plain;
    ASSERT_TRUE(generate(*s->split, prompt, g, plain_sampler, [&](int32_t t) { plain.push_back(t); return true; }).is_ok());
    std::vector<int32_t> base_out;
    g.variant = nullptr;
    Sampler base_sampler(sp);
    ASSERT_TRUE(generate(*s->split, prompt, g, base_sampler, [&](int32_t t) { base_out.push_back(t); return true; }).is_ok());
    EXPECT_NE(plain, base_out) << "the variant should write something else than the base";
    for (auto shape : {spec::DraftShape::kChain, spec::DraftShape::kTree}) {
      for (int budget : {1, 4, 16}) {
        for (bool base_draft : {false, true}) {
          ASSERT_EQ(spec_greedy(*s, v.get(), prompt, 160, shape, budget, base_draft), plain)
              << text << " budget " << budget << (base_draft ? " base draft" : " variant draft");
        }
      }
    }
  }
}

TEST(Variant, VariantAwareDraftAcceptsMoreThanTheBaseDraft) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto s = make_setup("bible-devil.gguf");
  auto v = load_variant(*s, *s->split_src);
  double per_check[2] = {0, 0};
  for (const std::string text : {"The devil said unto", "And it came to pass", "Hell is", "The LORD"}) {
    const auto prompt = encode(*s, text);
    for (int base_draft = 0; base_draft < 2; ++base_draft) {
      spec::AcceptanceStats stats;
      spec_greedy(*s, v.get(), prompt, 120, spec::DraftShape::kChain, 4, base_draft == 1, &stats);
      per_check[base_draft] += stats.tokens_per_check();
    }
  }
  EXPECT_GT(per_check[0], per_check[1] * 1.05) << "variant draft " << per_check[0] / 4 << " vs base draft "
                                               << per_check[1] / 4 << " tokens per check";
}

TEST(Variant, LoadingChecksTheBase) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto s = make_setup("bible-psalms.gguf");
  auto d = open_delta(s->delta_path);
  ASSERT_TRUE(d.is_ok());
  // The devil fine-tune is not the base the delta was made against.
  auto v = Variant::load(*d, *s->ft_f32, *s->ft_src, "x");
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.status().message().find(d->base_sha256), std::string::npos) << v.status().message();

  VariantRegistry reg(*s->split, *s->split_src, {.budget_bytes = 1 << 30});
  EXPECT_FALSE(reg.add_spec("no-equals-sign").is_ok());
  EXPECT_FALSE(reg.add("bad", s->split_src->path()).is_ok()) << "a model file is not a delta";
  ASSERT_TRUE(reg.add_spec("psalms=" + s->delta_path).is_ok());
  EXPECT_FALSE(reg.add("psalms", s->delta_path).is_ok()) << "names are unique";
  auto missing = reg.get("devil");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("psalms"), std::string::npos) << "lists what is registered";
  auto a = reg.get("psalms");
  auto b = reg.get("psalms");
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->get(), b->get()) << "one load, shared";
  EXPECT_EQ(reg.stats().loads, 1u);
  EXPECT_GT((*a)->bytes(), 0u);
  // About 1 bit per projection weight (plus norms and scales).
  EXPECT_LT(double((*a)->bytes()) * 8.0 / double((*a)->sign_weights()), 1.2);
}

TEST(Variant, ComputedDeltaEqualsTheFileAndDistillationReducesOutputError) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto s = make_setup("bible-psalms.gguf");
  auto parts = compute_delta(*s->base_f32, *s->ft_f32, quant::DeltaAlpha::kRow);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  auto d = open_delta(s->delta_path);
  ASSERT_TRUE(d.is_ok());
  size_t planes = 0;
  for (const auto& [name, e] : d->tensors) {
    if (e.kind != DeltaTensor::Kind::kSigns) continue;
    ++planes;
    ASSERT_TRUE(parts->signs.contains(name)) << name;
    const auto bytes = d->file->tensor_bytes(*e.signs);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), parts->signs.at(name).signs.begin())) << name;
    EXPECT_EQ(*d->file->read_f32(*e.alpha), parts->signs.at(name).alpha) << name;
  }
  EXPECT_EQ(planes, parts->signs.size());

  const auto tokens = encode(*s, "O give thanks unto the LORD; for he is good: for his mercy endureth for ever.");
  DeltaParts tuned = *parts;
  auto rep = distill_delta_scales(*s->base_f32, *s->ft_f32, tokens, 64, -1, tuned, nullptr);
  ASSERT_TRUE(rep.is_ok()) << rep.status().message();
  EXPECT_GT(rep->matrices, 0);
  EXPECT_GT(rep->rel_error_before, 0.0);
  EXPECT_LT(rep->rel_error_after, rep->rel_error_before);
  EXPECT_NE(tuned.signs.begin()->second.alpha, parts->signs.begin()->second.alpha);
}

// A variant's sign planes are made resident on the backend (a GPU uploads them beside D) when
// the registry loads it, and stay there while anyone holds the variant: the cache evicting it
// mid-generation releases them only when the generation (here: `held`) lets go.
TEST(Variant, BackendKeepsTheSignsOfAVariantInUseAfterEviction) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto s = make_setup("bible-psalms.gguf");
  struct RecordingBackend : Backend {
    std::shared_ptr<cpu::CpuContext> cpu = std::make_shared<cpu::CpuContext>();
    std::multiset<const void*> live;
    int made = 0, released = 0;
    std::string name() const override { return "recording"; }
    Result<std::shared_ptr<const void>> make_signs_resident(const SplitProjection&,
                                                            const cpu::SignPlaneView& d) override {
      ++made;
      live.insert(d.signs);
      return std::shared_ptr<const void>(d.signs, [this](const void* key) {
        ++released;
        live.erase(live.find(key));
      });
    }
    Status draft_matmul(const SplitProjection& p, const cpu::QuantizedActivations& x, float* y,
                        const cpu::SignPlaneView* delta) override {
      p.cpu_draft_matmul(*cpu, x, y, delta);
      return Status::ok();
    }
  };
  auto backend = std::make_shared<RecordingBackend>();
  auto model = Model::load(*s->split_src, {.cpu = backend->cpu, .backend = backend});
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  std::string devil = s->dir.file("devil.delta.gguf");
  auto devil_src = open_weights(fixture("bible-devil.gguf"));
  ASSERT_TRUE(devil_src.is_ok());
  ASSERT_TRUE(make_delta(*s->base_src, **devil_src, devil, {}, nullptr).is_ok());
  // Room for one variant: asking for the second evicts the first.
  VariantRegistry reg(*model, *s->split_src, {.budget_bytes = 1 << 20});
  ASSERT_TRUE(reg.add("psalms", s->delta_path).is_ok());
  ASSERT_TRUE(reg.add("devil", devil).is_ok());
  std::shared_ptr<const Variant> held;
  {
    auto a = reg.get("psalms");
    ASSERT_TRUE(a.is_ok());
    held = *a;  // a generation using psalms
    EXPECT_EQ(backend->made, 6 * 7 + 1);  // the projections with planes (the embedding has none)
  }
  auto b = reg.get("devil");
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(reg.stats().evictions, 1u);
  EXPECT_EQ(backend->released, 0) << "psalms was evicted while in use: its signs must stay resident";
  held.reset();
  EXPECT_EQ(backend->released, backend->made / 2) << "psalms' signs released once its last user let go";
  EXPECT_EQ(backend->live.size(), size_t(backend->made / 2)) << "devil's signs still live";
}

}  // namespace
}  // namespace bitsplit
