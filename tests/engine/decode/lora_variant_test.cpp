// LoRA adapters as variants (llama.cpp's GGUF adapter format): the factors read in both of
// llama.cpp's conventions, applied in the f32 pass exactly as the materialised weights
// W + s·B·A would be, batch invariant on the plane kernels, speculative decoding exactly
// lossless, registered like BitDelta variants, and every malformed or mismatched adapter
// refused with an error naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "bitsplit/convert.h"
#include "bitsplit/lora_format.h"
#include "bitsplit/quant.h"
#include "bitsplit/speculative.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "generation_testing.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/models/" + name; }

// One adapted weight of a synthetic adapter: U [out x rank] and V [rank x in], written in the
// file's convention (a = A = V, b = B = U; token_embd: a = U [n_vocab rows], b = Vᵀ [n_embd rows]).
struct Pair {
  std::string weight;
  int64_t out = 0, in = 0, rank = 0;
  std::vector<float> up, down;
};

Pair random_pair(const std::string& weight, int64_t out, int64_t in, int64_t rank, uint32_t seed, float amplitude) {
  Pair p{weight, out, in, rank, std::vector<float>(size_t(out * rank)), std::vector<float>(size_t(rank * in))};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& v : p.up) v = amplitude * n(rng);
  for (float& v : p.down) v = amplitude * n(rng);
  return p;
}

std::vector<uint8_t> bytes_of(const std::vector<float>& v, gguf::TensorType type) {
  if (type == gguf::TensorType::F16) {
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = quant::fp32_to_fp16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    return b;
  }
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// w [rows x cols] += s · U·V of `p`, the product in double: the adapter materialised.
void add_product(const Pair& p, double s, std::vector<float>& w, int64_t rows, int64_t cols) {
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t i = 0; i < cols; ++i) {
      double d = 0;
      for (int64_t k = 0; k < p.rank; ++k) d += double(p.up[size_t(o * p.rank + k)]) * p.down[size_t(k * cols + i)];
      w[size_t(o * cols + i)] += float(s * d);
    }
}

// F16 factors are compared against their rounded values.
void round_to(Pair& p, gguf::TensorType type) {
  if (type != gguf::TensorType::F16) return;
  for (float& v : p.up) v = quant::fp16_to_fp32(quant::fp32_to_fp16(v));
  for (float& v : p.down) v = quant::fp16_to_fp32(quant::fp32_to_fp16(v));
}

struct AdapterSpec {
  std::string arch = "llama";
  std::string type = "adapter", adapter_type = "lora";
  double alpha = 8.0;
  gguf::TensorType dtype = gguf::TensorType::F32;
};

gguf::Writer adapter_writer(const std::vector<Pair>& pairs, const AdapterSpec& spec = {}) {
  gguf::Writer w;
  auto& m = w.metadata();
  using gguf::Value;
  m.set("general.architecture", Value::string(spec.arch));
  if (!spec.type.empty()) m.set("general.type", Value::string(spec.type));
  if (!spec.adapter_type.empty()) m.set("adapter.type", Value::string(spec.adapter_type));
  m.set("adapter.lora.alpha", Value::f32(float(spec.alpha)));
  for (const Pair& p : pairs) {
    if (p.weight == "token_embd.weight") {
      std::vector<float> vt(size_t(p.in * p.rank));  // Vᵀ: [n_embd rows x rank]
      for (int64_t k = 0; k < p.rank; ++k)
        for (int64_t j = 0; j < p.in; ++j) vt[size_t(j * p.rank + k)] = p.down[size_t(k * p.in + j)];
      BITSPLIT_CHECK(w.add_tensor(p.weight + ".lora_a", spec.dtype, {p.rank, p.out}, bytes_of(p.up, spec.dtype)).is_ok());
      BITSPLIT_CHECK(w.add_tensor(p.weight + ".lora_b", spec.dtype, {p.rank, p.in}, bytes_of(vt, spec.dtype)).is_ok());
    } else {
      BITSPLIT_CHECK(w.add_tensor(p.weight + ".lora_a", spec.dtype, {p.in, p.rank}, bytes_of(p.down, spec.dtype)).is_ok());
      BITSPLIT_CHECK(w.add_tensor(p.weight + ".lora_b", spec.dtype, {p.rank, p.out}, bytes_of(p.up, spec.dtype)).is_ok());
    }
  }
  return w;
}

struct Base {
  testing::TempDir dir{"lora"};
  std::unique_ptr<WeightSource> src;
  std::unique_ptr<Model> f32;
  std::vector<int32_t> encode(const std::string& text) const {
    auto tok = Tokenizer::from_metadata(src->metadata());
    BITSPLIT_CHECK(tok.is_ok());
    return (*tok)->encode(text, {.add_special = true});
  }
};

std::unique_ptr<Base> load_base() {
  auto b = std::make_unique<Base>();
  auto src = open_weights(fixture("bible-base.gguf"));
  BITSPLIT_CHECK(src.is_ok(), src.status().message());
  b->src = std::move(*src);
  auto m = Model::load(*b->src);
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  b->f32 = std::make_unique<Model>(std::move(*m));
  return b;
}

// The fixture's shapes: q [256 x 256], ffn_down [256 x 512], output / token_embd [2048 x 256].
std::vector<Pair> sample_pairs() {
  return {random_pair("blk.0.attn_q.weight", 256, 256, 4, 1, 0.08f), random_pair("blk.3.ffn_down.weight", 256, 512, 8, 2, 0.05f),
          random_pair("blk.5.attn_v.weight", 64, 256, 2, 3, 0.1f), random_pair("output.weight", 2048, 256, 2, 4, 0.1f),
          random_pair("token_embd.weight", 2048, 256, 3, 5, 0.1f)};
}

std::vector<float> logits(const Model& m, const std::vector<int32_t>& tokens, Pass tier, const Variant* v) {
  KvCache cache(m.config(), int64_t(tokens.size()));
  auto r = forward_pass(m, cache, Batch::causal(tokens, 0, true), nullptr, tier, v);
  BITSPLIT_CHECK(r.is_ok(), r.status().message());
  return *r;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

std::shared_ptr<const Variant> load_lora(const std::string& path, const Model& base, float scale) {
  auto l = open_lora(path);
  BITSPLIT_CHECK(l.is_ok(), l.status().message());
  auto v = Variant::load(*l, base, "lora", scale);
  BITSPLIT_CHECK(v.is_ok(), v.status().message());
  return *v;
}

TEST(Lora, F32PassEqualsTheMaterialisedWeightsInBothConventionsAndTypes) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto b = load_base();
  const auto tokens = b->encode("And the LORD spake unto Moses, saying");
  const auto plain = logits(*b->f32, tokens, Pass::kDefault, nullptr);
  for (auto dtype : {gguf::TensorType::F32, gguf::TensorType::F16}) {
    SCOPED_TRACE(gguf::tensor_type_name(dtype));
    auto pairs = sample_pairs();
    AdapterSpec spec;
    spec.dtype = dtype;
    const std::string path = b->dir.file("a.gguf");
    ASSERT_TRUE(adapter_writer(pairs, spec).write_file(path).is_ok());
    for (Pair& p : pairs) round_to(p, dtype);
    const float user_scale = 0.75f;
    auto v = load_lora(path, *b->f32, user_scale);
    EXPECT_EQ(v->kind(), "LoRA");
    // W + (scale · alpha / rank) · U·V, in double.
    auto merge = [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols) {
      std::vector<float> out = w;
      for (const Pair& p : pairs) {
        if (p.weight != name) continue;
        EXPECT_EQ(p.out, rows);
        EXPECT_EQ(p.in, cols);
        add_product(p, double(user_scale) * spec.alpha / double(p.rank), out, rows, cols);
      }
      return out;
    };
    Model materialised = b->f32->transformed(merge, merge);
    const auto ours = logits(*b->f32, tokens, Pass::kDefault, v.get());
    const auto ref = logits(materialised, tokens, Pass::kDefault, nullptr);
    // Summation order only (the low-rank product summed apart from the base's).
    EXPECT_LT(max_abs_diff(ours, ref), 2e-4);
    EXPECT_GT(max_abs_diff(ours, plain), 0.5) << "the adapter must change the logits";
  }
}

TEST(Lora, ScaleZeroIsTheBaseAndTheScaleIsLinear) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto b = load_base();
  const std::string path = b->dir.file("a.gguf");
  ASSERT_TRUE(adapter_writer(sample_pairs()).write_file(path).is_ok());
  const auto tokens = b->encode("In the beginning");
  const auto plain = logits(*b->f32, tokens, Pass::kDefault, nullptr);
  EXPECT_EQ(logits(*b->f32, tokens, Pass::kDefault, load_lora(path, *b->f32, 0.0f).get()), plain);
  const auto half = logits(*b->f32, tokens, Pass::kDefault, load_lora(path, *b->f32, 0.5f).get());
  const auto full = logits(*b->f32, tokens, Pass::kDefault, load_lora(path, *b->f32, 1.0f).get());
  EXPECT_GT(max_abs_diff(half, plain), 0.05);
  EXPECT_GT(max_abs_diff(full, half), 0.05);
}

// A bit-split base with a LoRA variant: rows of a batch equal the same rows one at a time (the
// verify pass is batch invariant) and speculative decoding writes exactly the variant's plain
// greedy text (the device draft of a LoRA variant: tests/engine/decode/device_draft_pass_emulated_test.cpp).
TEST(Lora, OnTheBitSplitBaseBatchInvariantAndSpeculativeIsLossless) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto b = load_base();
  const std::string split_path = b->dir.file("base.split.gguf");
  ASSERT_TRUE(convert_model(*b->src, split_path, {}, nullptr, nullptr).is_ok());
  auto split_src = open_weights(split_path);
  ASSERT_TRUE(split_src.is_ok());
  auto split = Model::load(**split_src);
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  const std::string path = b->dir.file("a.gguf");
  ASSERT_TRUE(adapter_writer(sample_pairs()).write_file(path).is_ok());
  auto v = load_lora(path, *split, 1.0f);

  // 130 rows: the batch's LoRA products (rows · rank · in >= 2^18) take VariantLora::apply's
  // parallel path, the one-row passes its serial one; both must give the same bits.
  std::string text;
  for (int i = 0; i < 12; ++i) text += "In the beginning God created the heaven and the earth. ";
  auto tokens = b->encode(text);
  ASSERT_GE(tokens.size(), 130u);
  tokens.resize(130);
  const int64_t V = split->config().n_vocab, n = int64_t(tokens.size());
  const auto all = logits(*split, tokens, Pass::kTarget, v.get());
  KvCache cache(split->config(), n);
  for (int64_t i = 0; i < n; ++i) {
    auto one = forward_pass(*split, cache, Batch::causal(std::span<const int32_t>(&tokens[size_t(i)], 1), int32_t(i)),
                            nullptr, Pass::kTarget, v.get());
    ASSERT_TRUE(one.is_ok());
    for (int64_t t = 0; t < V; ++t) ASSERT_EQ((*one)[size_t(t)], all[size_t(i * V + t)]) << "token " << i;
  }
  // Close to the f32 base with the same adapter (D+R8 with int8 activations vs f32).
  const auto f32 = logits(*b->f32, tokens, Pass::kDefault, load_lora(path, *b->f32, 1.0f).get());
  const auto plain = logits(*split, tokens, Pass::kTarget, nullptr);
  EXPECT_LT(max_abs_diff(all, f32), 0.2 * max_abs_diff(plain, f32));


  for (const std::string text : {"The devil said unto", "And it came to pass"}) {
    const auto prompt = b->encode(text);
    const auto plain_out = testing::plain_greedy(*split, prompt, 96, v.get());
    const auto base_out = testing::plain_greedy(*split, prompt, 96);
    EXPECT_NE(plain_out, base_out) << "the adapter should write something else than the base";
    for (auto shape : {spec::DraftShape::kChain, spec::DraftShape::kTree}) {
      for (int budget : {1, 4, 16}) {
        for (bool base_draft : {false, true}) {
          SpeculativeOptions o;
          o.n_predict = 96;
          o.policy.shape = shape;
          o.policy.budget = budget;
          o.policy.max_depth = shape == spec::DraftShape::kChain ? budget : 8;
          o.variant = v.get();
          o.base_draft = base_draft;
          std::vector<int32_t> out;
          auto r = testing::speculative_greedy(*split, *split, prompt, o, &out);
          ASSERT_TRUE(r.is_ok()) << r.status().message();
          ASSERT_EQ(out, plain_out) << text << " budget " << budget << (base_draft ? " base draft" : " variant draft");
        }
      }
    }
  }
}

TEST(Lora, RegistryTakesAdaptersBesideDeltasWithAScale) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto b = load_base();
  const std::string path = b->dir.file("a.gguf");
  ASSERT_TRUE(adapter_writer(sample_pairs()).write_file(path).is_ok());
  VariantRegistry reg(*b->f32, *b->src, {.budget_bytes = UINT64_MAX});
  ASSERT_TRUE(reg.add_spec("one=" + path).is_ok());
  ASSERT_TRUE(reg.add_spec("half=" + path + ":0.5").is_ok());
  ASSERT_TRUE(reg.add_spec("zero=" + path + ":0").is_ok());
  const auto tokens = b->encode("Blessed are");
  const auto plain = logits(*b->f32, tokens, Pass::kDefault, nullptr);
  auto one = reg.get("one"), half = reg.get("half"), zero = reg.get("zero");
  ASSERT_TRUE(one.is_ok() && half.is_ok() && zero.is_ok());
  EXPECT_EQ(logits(*b->f32, tokens, Pass::kDefault, zero->get()), plain);
  EXPECT_EQ(logits(*b->f32, tokens, Pass::kDefault, half->get()),
            logits(*b->f32, tokens, Pass::kDefault, load_lora(path, *b->f32, 0.5f).get()));
  EXPECT_GT((*one)->bytes(), 0u);
  // A suffix that is no number is part of the file name; a scale on a delta is refused.
  Status st = reg.add_spec("bad=" + path + ":half");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(":half"), std::string::npos) << st.message();
  const std::string delta = b->dir.file("v.delta.gguf");
  auto ft = open_weights(fixture("bible-psalms.gguf"));
  ASSERT_TRUE(ft.is_ok());
  ASSERT_TRUE(make_delta(*b->src, **ft, delta, {}, nullptr).is_ok());
  st = reg.add("scaled-delta", delta, 0.5f);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("a scale applies to LoRA adapters"), std::string::npos) << st.message();
  EXPECT_TRUE(reg.add("delta", delta).is_ok());
  // The base model itself is not a variant.
  st = reg.add("model", fixture("bible-base.gguf"));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not a variant"), std::string::npos) << st.message();
}

// Each malformed or mismatched adapter: registered against the fixture base, refused with an
// error that names the problem.
TEST(Lora, BadAdaptersAreRefusedNamingTheProblem) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  auto b = load_base();
  const Pair q = random_pair("blk.0.attn_q.weight", 256, 256, 4, 1, 0.1f);
  struct Case {
    std::string what;
    gguf::Writer writer;
    std::string expect;
  };
  std::vector<Case> cases;
  AdapterSpec qwen;
  qwen.arch = "qwen2";
  cases.push_back({"another architecture", adapter_writer({q}, qwen), "for a 'qwen2' model"});
  cases.push_back({"another shape", adapter_writer({random_pair("blk.0.attn_q.weight", 256, 512, 4, 1, 0.1f)}),
                   "an adapter for another model"});
  cases.push_back({"a weight the base lacks", adapter_writer({random_pair("blk.9.attn_q.weight", 256, 256, 4, 1, 0.1f)}),
                   "which the base does not have"});
  cases.push_back({"rank above the matrix", adapter_writer({random_pair("blk.0.attn_k.weight", 64, 256, 65, 1, 0.1f)}),
                   "more than its matrix's smaller side"});
  AdapterSpec not_lora;
  not_lora.adapter_type = "control_vector";
  cases.push_back({"not a LoRA", adapter_writer({q}, not_lora), "only 'lora' adapters"});
  AdapterSpec negative;
  negative.alpha = -1.0;
  cases.push_back({"negative alpha", adapter_writer({q}, negative), "adapter.lora.alpha"});
  {
    gguf::Writer w = adapter_writer({});
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", gguf::TensorType::F32, {256, 4}, bytes_of(q.down, {})).is_ok());
    cases.push_back({"lora_a without lora_b", std::move(w), "has lora_a but no lora_b"});
  }
  {
    gguf::Writer w = adapter_writer({});
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", gguf::TensorType::F32, {256, 4}, bytes_of(q.down, {})).is_ok());
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_b", gguf::TensorType::F32, {3, 256},
                             bytes_of(std::vector<float>(3 * 256), {})).is_ok());
    cases.push_back({"ranks differ", std::move(w), "disagree on the rank"});
  }
  {
    gguf::Writer w = adapter_writer({q});
    ASSERT_TRUE(w.add_tensor("blk.0.attn_norm.weight.lora_a", gguf::TensorType::F32, {256, 1},
                             bytes_of(std::vector<float>(256), {})).is_ok());
    cases.push_back({"a norm", std::move(w), "norm vector is not supported"});
  }
  {
    gguf::Writer w = adapter_writer({q});
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight", gguf::TensorType::F32, {4}, bytes_of(std::vector<float>(4), {})).is_ok());
    cases.push_back({"a stray tensor", std::move(w), "is not a LoRA factor"});
  }
  cases.push_back({"no tensors", adapter_writer({}), "has no tensors"});
  {
    Pair nan = q;
    nan.up[7] = std::nanf("");
    cases.push_back({"a NaN", adapter_writer({nan}), "non-finite"});
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].what);
    const std::string path = b->dir.file("bad" + std::to_string(i) + ".gguf");
    ASSERT_TRUE(cases[i].writer.write_file(path).is_ok());
    VariantRegistry reg(*b->f32, *b->src, {.budget_bytes = UINT64_MAX});
    Status st = reg.add("x", path);
    // Problems in the factors' values show when the variant is loaded.
    if (st.is_ok()) {
      auto v = reg.get("x");
      ASSERT_FALSE(v.is_ok());
      st = v.status();
    }
    EXPECT_NE(st.message().find(cases[i].expect), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace bitsplit

namespace bitsplit {
namespace {

// A base whose head is its embedding: the token_embd LoRA changes the gather and the head alike
// (as the materialised embedding would), and an adapter of output.weight is refused.
TEST(Lora, ATiedHeadTakesTheEmbeddingsChange) {
  testing::TinyModelSpec spec;
  spec.tied_output = true;
  auto src = testing::weights_from_writer(testing::make_tiny_model(spec));
  auto base = Model::load(*src);
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  ASSERT_TRUE(base->config().tied_output);
  testing::TempDir dir("lora-tied");
  Pair embd = random_pair("token_embd.weight", spec.vocab, spec.embd, 2, 9, 0.3f);
  const std::string path = dir.file("tied.gguf");
  ASSERT_TRUE(adapter_writer({embd}).write_file(path).is_ok());
  auto v = load_lora(path, *base, 1.0f);
  ASSERT_NE(v->lora("output.weight"), nullptr) << "the head reads the embedding's change";
  const double s = 8.0 / 2;  // alpha / rank
  auto merge = [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols) {
    std::vector<float> out = w;
    if (name == "token_embd.weight" || name == "output.weight") add_product(embd, s, out, rows, cols);
    return out;
  };
  Model materialised = base->transformed(merge, merge);
  const std::vector<int32_t> tokens = {1, 5, 9, 17, 33, 2};
  const auto ours = logits(*base, tokens, Pass::kDefault, v.get());
  const auto ref = logits(materialised, tokens, Pass::kDefault, nullptr);
  const auto plain = logits(*base, tokens, Pass::kDefault, nullptr);
  EXPECT_LT(max_abs_diff(ours, ref), 1e-4);
  EXPECT_GT(max_abs_diff(ours, plain), 0.01);

  const std::string head = dir.file("head.gguf");
  ASSERT_TRUE(adapter_writer({random_pair("output.weight", spec.vocab, spec.embd, 2, 3, 0.1f)}).write_file(head).is_ok());
  auto l = open_lora(head);
  ASSERT_TRUE(l.is_ok());
  Status st = check_lora_base(*l, *base);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("ties its output head to the token embedding"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace bitsplit
