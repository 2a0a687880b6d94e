// Several sequences in one forward pass (forward_passes) and concurrent generations whose passes
// a PassBatcher combines: every sequence's logits and K/V are bit for bit what its pass alone
// gives — whatever sequences, batch shapes and variants (BitDelta, LoRA, the base) share the
// pass, on the bit-split planes (target and draft), the f32 reference, a sliding-window model
// and a mixture of experts — and generations decoding at once write exactly what they write
// one after the other.
#include <gtest/gtest.h>

#include <barrier>
#include <functional>
#include <memory>
#include <thread>

#include <tbb/global_control.h>

#include "bitsplit/convert.h"
#include "bitsplit/delta_format.h"
#include "bitsplit/pass_batcher.h"
#include "bitsplit/session.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

#if defined(__SANITIZE_THREAD__)
// As in server_concurrency_test.cpp: oneTBB's own synchronisation is invisible to TSan, so the
// kernels run on the calling thread; what is checked is the batcher's threading.
const tbb::global_control serial_tbb(tbb::global_control::max_allowed_parallelism, 1);
#endif

const std::string kModels = BITSPLIT_SOURCE_DIR "/tests/models";

// A model with its source, and the variants registered on it (the bible fixture only).
struct Loaded {
  std::unique_ptr<WeightSource> source;
  std::unique_ptr<Model> model;
  std::unique_ptr<VariantRegistry> variants;
  std::shared_ptr<const Variant> devil, lora;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> encode(const std::string& text) const { return tokenizer->encode(text, {.add_special = true}); }
};

// n threads, each a generation joined to `batcher` before any of them calls body(i).
void run_joined(PassBatcher& batcher, int n, const std::function<void(int)>& body) {
  std::barrier joined(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      PassBatcher::Membership member(&batcher);
      joined.arrive_and_wait();
      body(i);
    });
  }
  for (auto& t : threads) t.join();
}

// The bible base, bit-split (split = true) or f32, with the devil delta and the devil LoRA.
std::unique_ptr<Loaded> load_bible(const testing::TempDir& dir, bool split) {
  auto l = std::make_unique<Loaded>();
  auto base = open_weights(kModels + "/bible-base.gguf");
  auto devil = open_weights(kModels + "/bible-devil.gguf");
  BITSPLIT_CHECK(base.is_ok() && devil.is_ok());
  const std::string delta = dir.file(split ? "split.delta.gguf" : "f32.delta.gguf");
  BITSPLIT_CHECK(make_delta(**base, **devil, delta, {}, nullptr).is_ok());
  if (split) {
    const std::string converted = dir.file("base.bitsplit.gguf");
    BITSPLIT_CHECK(convert_model(**base, converted, {}, nullptr, nullptr).is_ok());
    auto src = open_weights(converted);
    BITSPLIT_CHECK(src.is_ok());
    l->source = std::move(*src);
  } else {
    l->source = std::move(*base);
  }
  auto m = Model::load(*l->source);
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  l->model = std::make_unique<Model>(std::move(*m));
  l->variants = std::make_unique<VariantRegistry>(*l->model, *l->source, VariantCacheOptions{.budget_bytes = UINT64_MAX});
  BITSPLIT_CHECK(l->variants->add("devil", delta).is_ok());
  BITSPLIT_CHECK(l->variants->add("lora", kModels + "/bible-devil-lora.gguf").is_ok());
  auto tok = Tokenizer::from_metadata(l->source->metadata());
  BITSPLIT_CHECK(tok.is_ok(), tok.status().message());
  l->tokenizer = std::move(*tok);
  l->devil = *l->variants->get("devil");
  l->lora = *l->variants->get("lora");
  return l;
}

std::unique_ptr<Loaded> load_plain(const testing::TempDir& dir, const std::string& fixture, bool split) {
  auto l = std::make_unique<Loaded>();
  auto src = open_weights(kModels + "/" + fixture);
  BITSPLIT_CHECK(src.is_ok(), src.status().message());
  l->source = std::move(*src);
  if (split) {
    const std::string converted = dir.file(fixture + ".bitsplit.gguf");
    BITSPLIT_CHECK(convert_model(*l->source, converted, {}, nullptr, nullptr).is_ok());
    auto s = open_weights(converted);
    BITSPLIT_CHECK(s.is_ok());
    l->source = std::move(*s);
  }
  auto m = Model::load(*l->source);
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  l->model = std::make_unique<Model>(std::move(*m));
  return l;
}

// Tokens for the tests (any ids of the vocabulary do).
std::vector<int32_t> tokens(int64_t n, int32_t seed, int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((seed * 7919 + i * 104729 + 13) % n_vocab));
  return t;
}

// One sequence of a test pass: its cache (already holding `prefix` slots) and its batch.
struct TestSequence {
  std::unique_ptr<KvCache> cache;
  Batch batch;
  const Variant* variant = nullptr;
};

// Four sequences of different shapes: a 7-row prompt (every row's logits), a one-row decode step
// after 5 cached tokens, a 3-node tree after 4 cached tokens, a 3-row prompt chunk (last row's
// logits only).
std::vector<TestSequence> four_sequences(const Model& m, const std::vector<const Variant*>& variants, Pass pass) {
  const ModelConfig& c = m.config();
  std::vector<TestSequence> seqs;
  auto with_prefix = [&](int64_t prefix, int32_t seed, int64_t slots, const Variant* v) {
    TestSequence s;
    s.cache = std::make_unique<KvCache>(c, slots);
    s.variant = v;
    if (prefix > 0) {
      const auto t = tokens(prefix, seed, c.n_vocab);
      auto r = forward_pass(m, *s.cache, Batch::causal(t, 0), nullptr, pass, v);
      BITSPLIT_CHECK(r.is_ok(), r.status().message());
    }
    return s;
  };
  {
    TestSequence s = with_prefix(0, 1, 8, variants[0]);
    s.batch = Batch::causal(tokens(7, 1, c.n_vocab), 0, /*all_logits=*/true);
    seqs.push_back(std::move(s));
  }
  {
    TestSequence s = with_prefix(5, 2, 6, variants[1]);
    s.batch = Batch::causal(tokens(1, 22, c.n_vocab), 5);
    seqs.push_back(std::move(s));
  }
  {
    // Root at slot 4 (position 4), two children of the root at slots 5 and 6 (position 5).
    TestSequence s = with_prefix(4, 3, 7, variants[2]);
    Batch& b = s.batch;
    b.tokens = tokens(3, 33, c.n_vocab);
    b.positions = {4, 5, 5};
    b.slots = {4, 5, 6};
    b.kv_len = 7;
    b.want_logits = {1, 1, 1};
    b.mask.assign(3 * 7, 0);
    for (int r = 0; r < 3; ++r) {
      for (int j = 0; j < 5; ++j) b.mask[size_t(r * 7 + j)] = 1;  // the prefix and the root
      b.mask[size_t(r * 7 + 4 + r)] = 1;                           // itself
    }
    seqs.push_back(std::move(s));
  }
  {
    TestSequence s = with_prefix(2, 4, 5, variants[3]);
    s.batch = Batch::causal(tokens(3, 44, c.n_vocab), 2);
    seqs.push_back(std::move(s));
  }
  return seqs;
}

void expect_cache_eq(const KvCache& a, const KvCache& b) {
  ASSERT_EQ(a.n_slots(), b.n_slots());
  for (int64_t l = 0; l < a.n_layers(); ++l) {
    for (int64_t s = 0; s < a.n_slots(); ++s) {
      ASSERT_EQ(a.position(s), b.position(s));
      for (int64_t i = 0; i < a.kv_dim(); ++i) {
        ASSERT_EQ(a.k(l, s)[i], b.k(l, s)[i]) << "layer " << l << " slot " << s;
        ASSERT_EQ(a.v(l, s)[i], b.v(l, s)[i]) << "layer " << l << " slot " << s;
      }
    }
  }
}

// forward_passes over the four sequences equals each sequence's forward_pass alone (from a copy
// of its cache), in logits and in the K/V written.
void expect_combined_equals_alone(const Model& m, const std::vector<const Variant*>& variants, Pass pass) {
  auto seqs = four_sequences(m, variants, pass);
  std::vector<KvCache> alone_caches;
  std::vector<std::vector<float>> alone;
  for (auto& s : seqs) {
    alone_caches.push_back(s.cache->copy());
    auto r = forward_pass(m, alone_caches.back(), s.batch, nullptr, pass, s.variant);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    alone.push_back(std::move(*r));
  }
  std::vector<SequencePass> passes;
  for (auto& s : seqs) passes.push_back({s.cache.get(), &s.batch, s.variant});
  auto combined = forward_passes(m, passes, pass);
  ASSERT_TRUE(combined.is_ok()) << combined.status().message();
  ASSERT_EQ(combined->size(), seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    ASSERT_EQ((*combined)[i].size(), alone[i].size());
    EXPECT_TRUE((*combined)[i] == alone[i]) << "logits differ from the sequence's pass alone";
    expect_cache_eq(*seqs[i].cache, alone_caches[i]);
  }
}

TEST(ForwardPasses, BitSplitSequencesOnDifferentVariantsAsIfAlone) {
  BITSPLIT_REQUIRE_FILE(kModels + "/bible-base.gguf");
  testing::TempDir dir("forward-passes");
  auto l = load_bible(dir, true);
  const Variant* devil = l->devil.get();
  const Variant* lora = l->lora.get();
  for (Pass pass : {Pass::kTarget, Pass::kDraft}) {
    SCOPED_TRACE(pass == Pass::kTarget ? "target" : "draft");
    expect_combined_equals_alone(*l->model, {nullptr, nullptr, nullptr, nullptr}, pass);
    expect_combined_equals_alone(*l->model, {devil, devil, devil, devil}, pass);
    expect_combined_equals_alone(*l->model, {devil, nullptr, lora, devil}, pass);
    expect_combined_equals_alone(*l->model, {lora, devil, nullptr, lora}, pass);
  }
}

TEST(ForwardPasses, F32ReferenceWithVariantsAsIfAlone) {
  BITSPLIT_REQUIRE_FILE(kModels + "/bible-base.gguf");
  testing::TempDir dir("forward-passes-f32");
  auto l = load_bible(dir, false);
  expect_combined_equals_alone(*l->model, {l->devil.get(), nullptr, l->lora.get(), l->devil.get()}, Pass::kDefault);
}

TEST(ForwardPasses, SlidingWindowAndMixtureOfExpertsAsIfAlone) {
  BITSPLIT_REQUIRE_FILE(kModels + "/gemma3-tiny.gguf");
  testing::TempDir dir("forward-passes-families");
  const std::vector<const Variant*> base(4, nullptr);
  for (const char* fixture : {"gemma3-tiny.gguf", "qwen2moe-tiny.gguf"}) {
    for (bool split : {false, true}) {
      SCOPED_TRACE(std::string(fixture) + (split ? " bit-split" : " f32"));
      auto l = load_plain(dir, fixture, split);
      expect_combined_equals_alone(*l->model, base, Pass::kDefault);
    }
  }
}

TEST(ForwardPasses, RefusesASharedCacheAndNamesTheBadSequence) {
  BITSPLIT_REQUIRE_FILE(kModels + "/bible-base.gguf");
  testing::TempDir dir("forward-passes-bad");
  auto l = load_plain(dir, "bible-base.gguf", false);
  const ModelConfig& c = l->model->config();
  KvCache a(c, 4), b(c, 4);
  const Batch one = Batch::causal(tokens(2, 1, c.n_vocab), 0);
  Batch bad = one;
  bad.tokens[1] = int32_t(c.n_vocab);
  std::vector<SequencePass> shared = {{&a, &one, nullptr}, {&a, &one, nullptr}};
  auto r = forward_passes(*l->model, shared);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("share one KV cache"), std::string::npos) << r.status().message();
  std::vector<SequencePass> invalid = {{&a, &one, nullptr}, {&b, &bad, nullptr}};
  r = forward_passes(*l->model, invalid);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("sequence 1: token id"), std::string::npos) << r.status().message();
}

// Four threads, each a joined generation handing in one pass: with a long gather the leader
// waits for all four, so exactly one combined pass runs (max_rows permitting), and each thread
// gets its own logits; a batch that cannot run fails alone.
TEST(PassBatcher, CombinesThePassesOfJoinedGenerations) {
  BITSPLIT_REQUIRE_FILE(kModels + "/bible-base.gguf");
  testing::TempDir dir("pass-batcher");
  auto l = load_bible(dir, true);
  const Model& m = *l->model;
  const ModelConfig& c = m.config();
  struct Case {
    int64_t max_rows;
    int64_t passes;  // expected
  };
  for (const Case& k : {Case{512, 1}, Case{10, 2}, Case{5, 4}}) {
    SCOPED_TRACE("max_rows " + std::to_string(k.max_rows));
    PassBatcher batcher({.max_rows = k.max_rows, .gather = std::chrono::seconds(60)});
    const std::vector<const Variant*> variants = {nullptr, l->devil.get(), l->lora.get(), l->devil.get()};
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<float>> alone(4), got(4);
    for (int i = 0; i < 4; ++i) {
      prompts.push_back(tokens(5, 10 + i, c.n_vocab));
      KvCache cache(c, 5);
      auto r = forward_pass(m, cache, Batch::causal(prompts.back(), 0), nullptr, Pass::kTarget, variants[size_t(i)]);
      ASSERT_TRUE(r.is_ok());
      alone[size_t(i)] = std::move(*r);
    }
    std::vector<Status> status(4);
    run_joined(batcher, 4, [&](int i) {
      KvCache cache(c, 5);
      const Batch batch = Batch::causal(prompts[size_t(i)], 0);
      auto r = batcher.forward(m, cache, batch, Pass::kTarget, variants[size_t(i)]);
      status[size_t(i)] = r.status();
      if (r) got[size_t(i)] = std::move(*r);
    });
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(status[size_t(i)].is_ok()) << status[size_t(i)].message();
      EXPECT_TRUE(got[size_t(i)] == alone[size_t(i)]) << "thread " << i;
    }
    const PassBatcher::Stats s = batcher.stats();
    EXPECT_EQ(s.passes, k.passes);
    EXPECT_EQ(s.sequences, 4);
    EXPECT_EQ(s.rows, 20);
    EXPECT_EQ(s.shared, k.passes == 4 ? 0 : 4);
  }

  // One bad batch among good ones: only it fails, with the batch's own error.
  PassBatcher batcher({.gather = std::chrono::seconds(60)});
  std::vector<Status> status(3);
  run_joined(batcher, 3, [&](int i) {
    KvCache cache(c, 4);
    Batch batch = Batch::causal(tokens(3, i, c.n_vocab), 0);
    if (i == 1) batch.tokens[0] = -1;
    status[size_t(i)] = batcher.forward(m, cache, batch, Pass::kTarget, nullptr).status();
  });
  EXPECT_TRUE(status[0].is_ok() && status[2].is_ok());
  ASSERT_FALSE(status[1].is_ok());
  EXPECT_NE(status[1].message().find("token id -1"), std::string::npos) << status[1].message();
  EXPECT_EQ(batcher.stats().sequences, 2);
}

// Sessions generating at once through one batcher (plain and speculative, greedy and seeded
// sampling with a fixed budget, base and both variants) write what they write one at a time.
TEST(PassBatcher, ConcurrentSessionsWriteWhatTheyWriteAlone) {
  BITSPLIT_REQUIRE_FILE(kModels + "/bible-base.gguf");
  testing::TempDir dir("pass-batcher-sessions");
  auto l = load_bible(dir, true);
  const Model& m = *l->model;
  struct Job {
    std::string prompt;
    std::shared_ptr<const Variant> variant;
    bool speculative;
    std::optional<int32_t> budget;
    float temperature;
  };
  const std::vector<Job> jobs = {
      {"And God said", nullptr, true, std::nullopt, 0.0f},    {"In the beginning", l->devil, true, std::nullopt, 0.0f},
      {"The LORD is my", l->lora, true, 4, 0.0f},             {"And it came to pass", nullptr, false, std::nullopt, 0.0f},
      {"Blessed is the man", l->devil, true, 6, 0.8f},        {"Then said Jesus", l->lora, false, std::nullopt, 0.9f},
      {"And the devil said", l->devil, false, std::nullopt, 0.0f}, {"Hear, O Israel", nullptr, true, 3, 0.7f},
  };
  auto run = [&](const Job& job, PassBatcher* batcher, std::vector<int32_t>& out) {
    SessionOptions o;
    o.speculative = job.speculative;
    o.budget = job.budget;
    o.batcher = batcher;
    Session session(m, job.variant, o);
    SamplingParams p;
    p.temperature = job.temperature;
    p.seed = 1234;
    Sampler sampler(p);
    const auto prompt = l->encode(job.prompt);
    return session.generate(prompt, 32, -1, sampler, [&](int32_t t) { out.push_back(t); return true; }).status();
  };
  std::vector<std::vector<int32_t>> alone(jobs.size()), together(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) ASSERT_TRUE(run(jobs[i], nullptr, alone[i]).is_ok());
  PassBatcher batcher;
  std::vector<Status> status(jobs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i) {
    threads.emplace_back([&, i] { status[i] = run(jobs[i], &batcher, together[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_TRUE(status[i].is_ok()) << status[i].message();
    EXPECT_EQ(together[i], alone[i]) << "job " << i << " (" << jobs[i].prompt << ")";
    EXPECT_EQ(together[i].size(), 32u);
  }
  const PassBatcher::Stats s = batcher.stats();
  EXPECT_GT(s.passes, 0);
  std::printf("combined passes: %lld, sequence passes %lld (%lld shared), rows %lld\n", (long long)s.passes,
              (long long)s.sequences, (long long)s.shared, (long long)s.rows);
}

// With more generations joined than draft_max_sequences, checks draft nothing (the combined
// pass already shares the weights) and the output stays plain decoding's; at the limit they draft.
TEST(PassBatcher, CrowdedChecksDraftNothingAndStayLossless) {
  BITSPLIT_REQUIRE_FILE(kModels + "/bible-base.gguf");
  testing::TempDir dir("pass-batcher-crowded");
  auto l = load_bible(dir, true);
  const Model& m = *l->model;
  const auto prompt = l->encode("And it came to pass");
  PassBatcher batcher({.gather = std::chrono::microseconds(0)});
  PassBatcher::Membership other(&batcher);  // another generation decoding meanwhile
  std::vector<int32_t> plain;
  for (int limit : {0, 1, 2}) {
    SCOPED_TRACE("draft_max_sequences " + std::to_string(limit));
    SessionOptions o;
    o.budget = 4;
    o.speculative = limit > 0;
    o.batcher = &batcher;
    o.draft_max_sequences = limit;
    o.lookup.max_tokens = 0;  // drafted counts the model draft's nodes only
    Session session(m, nullptr, o);
    SamplingParams p;
    p.temperature = 0;
    Sampler sampler(p);
    std::vector<int32_t> out;
    auto r = session.generate(prompt, 48, -1, sampler, [&](int32_t t) { out.push_back(t); return true; });
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    if (limit == 0) {
      plain = out;
      continue;
    }
    EXPECT_EQ(out, plain);
    ASSERT_TRUE(r->speculative.has_value());
    if (limit == 1) {
      EXPECT_EQ(r->speculative->acceptance.drafted, 0) << "two generations joined, limit 1: no draft";
    } else {
      EXPECT_GT(r->speculative->acceptance.drafted, 0) << "two generations joined, limit 2: drafts";
    }
  }
}

}  // namespace
}  // namespace bitsplit
