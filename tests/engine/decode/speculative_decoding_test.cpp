// Speculative decoding end to end: greedy output equals plain greedy decoding of the target
// D + R token for token (chain and tree, several budgets, the online controller, the context
// lookup), and sampled output follows the target's distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "bitsplit/convert.h"
#include "bitsplit/speculative.h"
#include "bitsplit/tokenizer.h"
#include "generation_testing.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

struct Pair {
  Model target, draft;
};

// Converts a model to a temporary bit-split file and loads its target and draft: with the
// plane kernels (the engine's path) or as f32 reconstructions of D + R and D.
Pair converted(const WeightSource& source, int residual_bits = 8, bool planes = true, double draft_bpw = 0.0) {
  const fs::path path = fs::temp_directory_path() / ("bitsplit_spec_" + std::to_string(::getpid()) + ".gguf");
  ConvertOptions o;
  o.split.residual_bits = residual_bits;
  o.draft_bpw = draft_bpw;
  Status st = convert_model(source, path.string(), o, nullptr, nullptr);
  BITSPLIT_CHECK(st.is_ok(), st.message());
  auto w = open_weights(path.string());
  BITSPLIT_CHECK(w.is_ok(), w.status().message());
  auto target = Model::load(**w, {.keep_planes = planes});
  auto draft = Model::load(**w, {.draft_only = true, .keep_planes = planes});
  BITSPLIT_CHECK(target.is_ok() && draft.is_ok());
  fs::remove(path);
  return {std::move(*target), std::move(*draft)};
}

using testing::plain_greedy;

std::vector<int32_t> spec_greedy_with(const Pair& p, const std::vector<int32_t>& prompt, int n, SpeculativeOptions o,
                                      spec::AcceptanceStats* stats = nullptr, SpeculativeResult* result = nullptr) {
  o.n_predict = n;
  std::vector<int32_t> out;
  auto r = testing::speculative_greedy(p.target, p.draft, prompt, o, &out);
  BITSPLIT_CHECK(r.is_ok(), r.status().message());
  if (stats) *stats = r->acceptance;
  if (result) *result = *r;
  return out;
}

std::vector<int32_t> spec_greedy(const Pair& p, const std::vector<int32_t>& prompt, int n, spec::DraftShape shape,
                                 int budget, spec::AcceptanceStats* stats = nullptr) {
  SpeculativeOptions o;
  o.policy.shape = shape;
  o.policy.budget = budget;
  o.policy.max_depth = shape == spec::DraftShape::kChain ? budget : 8;
  return spec_greedy_with(p, prompt, n, o, stats);
}

// The online controller (both shapes, or one) and the context lookup, alone and together, and
// fixed budgets with lookup: every mode gives plain decoding's tokens.
void expect_lossless_auto_and_lookup(const Pair& p, const std::vector<std::vector<int32_t>>& prompts, int n) {
  struct Mode {
    const char* name;
    bool auto_budget, auto_shape;
    spec::DraftShape shape;
    int budget, lookup;
  };
  const Mode modes[] = {
      {"auto", true, true, spec::DraftShape::kTree, 16, 0},
      {"auto+lookup", true, true, spec::DraftShape::kTree, 16, 8},
      {"auto chain+lookup 3", true, false, spec::DraftShape::kChain, 4, 3},
      {"tree-16+lookup", false, false, spec::DraftShape::kTree, 16, 8},
      {"chain-2+lookup", false, false, spec::DraftShape::kChain, 2, 8},
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto plain = plain_greedy(p.target, prompts[i], n);
    for (const Mode& m : modes) {
      SpeculativeOptions o;
      o.auto_budget = m.auto_budget;
      o.auto_shape = m.auto_shape;
      o.policy.shape = m.shape;
      o.policy.set_budget(m.budget);
      o.lookup.max_tokens = m.lookup;
      SpeculativeResult r;
      ASSERT_EQ(spec_greedy_with(p, prompts[i], n, o, nullptr, &r), plain) << "prompt " << i << " " << m.name;
      ASSERT_GT(r.acceptance.checks, 0);
      if (m.auto_budget) {
        int64_t no_model_draft = 0;  // checks of budget 0: "plain" or "lookup" alone
        for (const auto& [name, checks] : r.checks_per_setting)
          if (name == "plain" || name == "lookup") no_model_draft += checks;
        EXPECT_GT(no_model_draft, 0) << "the plain warm-up ran through the check loop";
        if (!m.auto_shape) {
          for (const auto& [name, checks] : r.checks_per_setting)
            EXPECT_EQ(name.find("tree"), std::string::npos) << m.name << ": " << name;
        }
      }
      if (m.lookup == 0) {
        EXPECT_EQ(r.acceptance.lookup_drafted, 0);
      }
    }
  }
}

void expect_lossless(const Pair& p, const std::vector<std::vector<int32_t>>& prompts, int n,
                     const std::vector<int>& budgets = {1, 4, 16, 32}) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto plain = plain_greedy(p.target, prompts[i], n);
    for (auto shape : {spec::DraftShape::kChain, spec::DraftShape::kTree}) {
      for (int budget : budgets) {
        spec::AcceptanceStats stats;
        const auto fast = spec_greedy(p, prompts[i], n, shape, budget, &stats);
        ASSERT_EQ(fast, plain) << "prompt " << i << (shape == spec::DraftShape::kChain ? " chain" : " tree")
                               << " budget " << budget;
        ASSERT_GT(stats.checks, 0);
      }
    }
  }
}

TEST(Speculative, GreedyEqualsPlainTargetOnTinyModel) {
  auto source = testing::tiny_weights({});
  for (bool planes : {true, false}) {
    const Pair p = converted(*source, 8, planes);
    expect_lossless(p, {{1, 5, 9}, {1, 20, 3, 3, 7}, {1}}, 40);  // the tiny model's context is 64
    expect_lossless_auto_and_lookup(p, {{1, 5, 9}, {1, 20, 3, 20, 3, 20, 3}, {1}}, 40);
  }
}

// A model file with its tokenizer (the lossless tests on real text).
struct Opened {
  std::unique_ptr<WeightSource> source;
  std::unique_ptr<Tokenizer> tok;
};
Opened open_with_tokenizer(const std::string& path) {
  auto source = open_weights(path);
  BITSPLIT_CHECK(source.is_ok(), source.status().message());
  auto tok = Tokenizer::from_metadata((*source)->metadata());
  BITSPLIT_CHECK(tok.is_ok(), tok.status().message());
  return {std::move(*source), std::move(*tok)};
}

TEST(Speculative, GreedyEqualsPlainTargetOnStories260K) {
  const std::string shared = testing::shared_dir();
  const std::string path = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto [source, tok] = open_with_tokenizer(path);
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"Once upon a time", "The little dog", "Lily and Ben went to the park. They", "One day"})
    prompts.push_back(tok->encode(text));
  expect_lossless(converted(*source, 8), prompts, 256);
  // The 6-bit residual target too, on fewer settings (each run re-decodes 256 tokens).
  expect_lossless(converted(*source, 6), {prompts[0], prompts[2]}, 256, {16});
}

// With a repetition penalty the target's choice depends on the path to each tree node; the
// speculative output must still equal plain decoding.
TEST(Speculative, GreedyWithRepetitionPenaltyEqualsPlain) {
  auto source = testing::tiny_weights({});
  const Pair p = converted(*source);
  SamplingParams sp;
  sp.temperature = 0;
  sp.repeat_penalty = 1.5f;
  sp.repeat_last_n = 16;
  const std::vector<int32_t> prompt = {1, 5, 9, 5};
  Sampler plain_sampler(sp);
  GenerateOptions g;
  g.n_predict = 40;
  std::vector<int32_t> plain, fast;
  ASSERT_TRUE(generate(p.target, prompt, g, plain_sampler, [&](int32_t t) { plain.push_back(t); return true; }).is_ok());
  Sampler spec_sampler(sp);
  SpeculativeOptions o;
  o.n_predict = 40;
  o.policy.budget = 16;
  ASSERT_TRUE(generate_speculative(p.target, p.draft, prompt, o, spec_sampler,
                                   [&](int32_t t) { fast.push_back(t); return true; }).is_ok());
  EXPECT_EQ(fast, plain);
  // The penalty really changes the text here, so the path-dependent history is exercised.
  EXPECT_NE(plain, plain_greedy(p.target, prompt, 40));
}

// The trained fixture models (context 256, so 230 new tokens after the prompt).
TEST(Speculative, GreedyEqualsPlainTargetOnFixtureModels) {
  for (const char* name : {"bible-base", "bible-devil"}) {
    const std::string path = testing::source_dir() + "/tests/models/" + name + ".gguf";
    BITSPLIT_REQUIRE_FILE(path);
    auto [source, tok] = open_with_tokenizer(path);
    const Pair p = converted(*source);
    expect_lossless(p, {tok->encode("And it came to pass"), tok->encode("WAR, n.")}, 230);
    expect_lossless_auto_and_lookup(p, {tok->encode("And it came to pass"), tok->encode("WAR, n.")}, 200);
  }
}

// Every target activation arithmetic (docs/FORMAT.md steps 1 and 1b) keeps greedy speculative
// decoding lossless, and each step of precision brings the target's logits closer to the f32
// product of the same planes (D + R reconstructed, f32 activations).
TEST(Speculative, EveryTargetActivationsIsLosslessAndCloserToF32) {
  const std::string path = testing::source_dir() + "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto [source, tok] = open_with_tokenizer(path);
  Pair p = converted(*source, 6);
  const Pair f32 = converted(*source, 6, false);
  const std::vector<int32_t> prompt = tok->encode("And the LORD spake unto Moses, saying");
  KvCache fc(f32.target.config(), int64_t(prompt.size()));
  const std::vector<float> want = *forward_pass(f32.target, fc, Batch::causal(prompt, 0, true));
  double last_error = INFINITY;
  for (TargetActivations a : {TargetActivations::kInt8, TargetActivations::kDraftRemainder, TargetActivations::kRemainder}) {
    SCOPED_TRACE(target_activations_name(a));
    p.target.set_target_activations(a);
    expect_lossless(p, {tok->encode("And it came to pass"), tok->encode("WAR, n.")}, 100);
    KvCache cache(p.target.config(), int64_t(prompt.size()));
    const std::vector<float> got = *forward_pass(p.target, cache, Batch::causal(prompt, 0, true));
    double error = 0;
    for (size_t i = 0; i < got.size(); ++i) error += std::fabs(double(got[i]) - double(want[i]));
    std::printf("%s: mean |logit - f32 logit| %.3g\n", target_activations_name(a), error / double(got.size()));
    EXPECT_LT(error, last_error * 0.7);
    last_error = error;
  }
}

// The logits reported with each token (for log-probabilities) are, in speculative decoding, the
// verify pass's row of the node that chose the token: bit for bit plain decoding's logits there
// (chain and tree, with lookup), and the token is that row's argmax.
TEST(Speculative, ReportedLogitsAreThePlainPassLogits) {
  const std::string path = testing::source_dir() + "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto [source, tok] = open_with_tokenizer(path);
  const Pair p = converted(*source);
  const auto prompt = tok->encode("And it came to pass");
  const int64_t V = p.target.config().n_vocab;
  auto collect = [&](std::vector<int32_t>& tokens, std::vector<std::vector<float>>& rows) {
    return [&](int32_t token, std::span<const float> logits) {
      EXPECT_EQ(int64_t(logits.size()), V);
      tokens.push_back(token);
      rows.emplace_back(logits.begin(), logits.end());
    };
  };
  std::vector<int32_t> plain_tokens;
  std::vector<std::vector<float>> plain_rows;
  {
    SamplingParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    GenerateOptions o;
    o.n_predict = 60;
    o.on_logits = collect(plain_tokens, plain_rows);
    ASSERT_TRUE(generate(p.target, prompt, o, s, [](int32_t) { return true; }).is_ok());
  }
  ASSERT_EQ(plain_tokens.size(), 60u);
  for (size_t i = 0; i < plain_rows.size(); ++i) EXPECT_EQ(argmax(plain_rows[i]), plain_tokens[i]);
  for (auto shape : {spec::DraftShape::kChain, spec::DraftShape::kTree}) {
    SpeculativeOptions o;
    o.n_predict = 60;
    o.policy.shape = shape;
    o.policy.budget = 6;
    o.lookup.max_tokens = 4;
    std::vector<int32_t> tokens, out;
    std::vector<std::vector<float>> rows;
    o.on_logits = collect(tokens, rows);
    auto r = testing::speculative_greedy(p.target, p.draft, prompt, o, &out);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_GT(r->acceptance.accepted, 0) << "no drafted token was accepted: the verify rows were not exercised";
    EXPECT_EQ(tokens, out);
    EXPECT_EQ(tokens, plain_tokens);
    ASSERT_EQ(rows.size(), plain_rows.size());
    for (size_t i = 0; i < rows.size(); ++i) ASSERT_TRUE(rows[i] == plain_rows[i]) << "token " << i;
  }
}

// A mixed-precision draft (2-, 3- and 4-bit projections, --draft-bpw) changes what is drafted,
// never what is output.
TEST(Speculative, GreedyEqualsPlainWithAMixedDraft) {
  const std::string path = testing::source_dir() + "/tests/models/bible-devil.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto [source, tok] = open_with_tokenizer(path);
  for (int residual : {8, 6}) {
    const Pair p = converted(*source, residual, true, 3.25);
    std::set<int> widths;
    for (int64_t l = 0; l < p.draft.config().n_layers; ++l)
      for (const char* w : {"attn_q", "attn_v", "ffn_down", "ffn_up"})
        widths.insert(p.draft.split("blk." + std::to_string(l) + "." + w + ".weight")->draft_bits);
    EXPECT_GT(widths.size(), 1u) << "the budget should mix draft widths";
    expect_lossless(p, {tok->encode("WAR, n."), tok->encode("And it came to pass")}, 120);
  }
}

// Gemma 2 and 3 (sliding window 8 in the fixtures, so speculation runs far past it; gemma2
// with soft caps), Phi-3 (fused projections, window 6 in every layer; with LongRoPE, whose
// trained context of 32 the 60 tokens pass) and mixtures of experts
// (every expert bit-split; the draft routes with its own activations, the target verifies with
// its own routing): speculative greedy output is plain decoding's, also with a mixed draft.
TEST(Speculative, GreedyEqualsPlainOnGemmaPhi3AndMixturesOfExperts) {
  for (const char* name :
       {"gemma3-tiny", "gemma2-tiny", "phi3-tiny", "phi3-longrope-tiny", "mixtral-tiny", "qwen2moe-tiny", "qwen3moe-tiny",
        "qwen3moe-bible"}) {
    SCOPED_TRACE(name);
    const std::string path = testing::source_dir() + "/tests/models/" + name + ".gguf";
    BITSPLIT_REQUIRE_FILE(path);
    auto [source, tok] = open_with_tokenizer(path);
    const std::vector<std::vector<int32_t>> prompts = {tok->encode("And it came to pass"), tok->encode("Blessed is the man")};
    expect_lossless(converted(*source), prompts, 60, {1, 4, 16});
    expect_lossless(converted(*source, 6, true, 3.0), prompts, 60, {4});
    expect_lossless_auto_and_lookup(converted(*source), prompts, 60);
  }
}

// LongRoPE at its edge: a generation of exactly the trained context (32 positions) turns by the
// short factors in plain decoding; speculative decoding's cache has scratch slots past it and must
// turn the same way (it would pick the long factors by its cache's size).
TEST(Speculative, LongRopeAtItsTrainedContextEqualsPlain) {
  const std::string path = testing::source_dir() + "/tests/models/phi3-longrope-tiny.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto [source, tok] = open_with_tokenizer(path);
  const Pair p = converted(*source);
  ASSERT_EQ(p.target.config().rope_original_context, 32);
  for (const char* text : {"Blessed is the man", "And it came to pass", "In the beginning"}) {
    const auto prompt = tok->encode(text);
    expect_lossless(p, {prompt}, 32 - int(prompt.size()), {1, 4, 16});
  }
}

// Text that repeats itself: the lookup chain must be accepted (and the output still be plain
// decoding's). Fixed settings, so the lookup surely joins the tree.
TEST(Speculative, LookupIsAcceptedOnRepetitiveText) {
  const std::string path = testing::source_dir() + "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto [source, tok] = open_with_tokenizer(path);
  const Pair p = converted(*source);
  std::string text;
  for (int i = 0; i < 4; ++i) text += "And God said, Let there be light: and there was light. ";
  text += "And God said,";
  const auto prompt = tok->encode(text);
  const auto plain = plain_greedy(p.target, prompt, 120);
  for (auto shape : {spec::DraftShape::kChain, spec::DraftShape::kTree}) {
    SpeculativeOptions o;
    o.policy.shape = shape;
    o.policy.set_budget(shape == spec::DraftShape::kChain ? 1 : 4);
    o.lookup.max_tokens = 8;
    spec::AcceptanceStats stats;
    EXPECT_EQ(spec_greedy_with(p, prompt, 120, o, &stats), plain);
    EXPECT_GT(stats.lookup_drafted, 0);
    EXPECT_GT(stats.lookup_accepted, 0) << "the lookup chain was never accepted";
    EXPECT_LE(stats.lookup_accepted, stats.accepted);
    // Per position: never more accepted than drafted at a depth, and depth 1 drafted every check.
    ASSERT_FALSE(stats.drafted_at_depth.empty());
    EXPECT_EQ(stats.drafted_at_depth[0], stats.checks);
    for (size_t d = 0; d < stats.drafted_at_depth.size(); ++d)
      EXPECT_LE(stats.accepted_at_depth[d], stats.drafted_at_depth[d]) << "depth " << d + 1;
  }
  // Lookup alone under the controller: still plain decoding's output.
  SpeculativeOptions o;
  o.auto_budget = o.auto_shape = true;
  o.lookup.max_tokens = 8;
  EXPECT_EQ(spec_greedy_with(p, prompt, 120, o), plain);
}

// Sampled decoding leaves the lookup out (its verifier needs proposals drawn from the draft).
TEST(Speculative, SamplingIgnoresLookup) {
  auto source = testing::tiny_weights({});
  const Pair p = converted(*source);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 3;
  Sampler s(sp);
  SpeculativeOptions o;
  o.n_predict = 30;
  o.policy.budget = 4;
  o.lookup.max_tokens = 8;
  auto r = generate_speculative(p.target, p.draft, std::vector<int32_t>{1, 20, 3, 20, 3, 20, 3}, o, s,
                                [](int32_t) { return true; });
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->acceptance.lookup_drafted, 0);
  EXPECT_EQ(r->generation.generated_tokens, 30);
}

TEST(Speculative, AcceptsMoreThanOneTokenPerCheckWhenDraftIsTheTarget) {
  // With the target as its own draft every drafted greedy token is accepted.
  auto source = testing::tiny_weights({});
  Pair p = converted(*source, 8, /*planes=*/false);
  Pair same{p.target.transformed([](const std::string&, const std::vector<float>& w, int64_t, int64_t) { return w; },
                                 [](const std::string&, const std::vector<float>& w, int64_t, int64_t) { return w; }),
            {}};
  same.draft = same.target.transformed([](const std::string&, const std::vector<float>& w, int64_t, int64_t) { return w; },
                                       [](const std::string&, const std::vector<float>& w, int64_t, int64_t) { return w; });
  spec::AcceptanceStats stats;
  const auto out = spec_greedy(same, {1, 5, 9}, 30, spec::DraftShape::kChain, 4, &stats);
  EXPECT_EQ(out, plain_greedy(same.target, {1, 5, 9}, 30));
  // Every check but the last (cut short by n_predict) accepts its whole chain of 4.
  EXPECT_GE(stats.accepted, 4 * (stats.checks - 1));
  EXPECT_GE(stats.tokens_per_check(), 4.0);
}

// Sampling: the first two generated tokens are distributed as the target's p(t1) p(t2|t1)
// (temperature 1, top-k 3 so the 9 joint outcomes each get enough samples), with the drafting
// options `o` (n_predict is set here). Returns the chi-square statistic over the 9 outcomes and
// adds the settings the checks used to `settings_used`.
double sampled_pair_chi2(SpeculativeOptions o, std::set<std::string>* settings_used = nullptr) {
  auto source = testing::tiny_weights({});
  const Pair p = converted(*source);
  const std::vector<int32_t> prompt = {1, 5, 9};
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 3;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  // Exact target probabilities of (t1, t2).
  auto dist_after = [&](const std::vector<int32_t>& ctx) {
    KvCache cache(p.target.config(), int64_t(ctx.size()));
    auto logits = forward_pass(p.target, cache, Batch::causal(ctx, 0));
    return Sampler(sp).distribution(*logits, ctx);
  };
  const auto p1 = dist_after(prompt);
  std::map<std::pair<int, int>, double> expected;
  for (size_t a = 0; a < p1.size(); ++a) {
    if (p1[a] <= 0) continue;
    auto ctx = prompt;
    ctx.push_back(int32_t(a));
    const auto p2 = dist_after(ctx);
    for (size_t b = 0; b < p2.size(); ++b)
      if (p2[b] > 0) expected[{int(a), int(b)}] = double(p1[a]) * p2[b];
  }
  EXPECT_EQ(expected.size(), 9u);
  const int trials = 6000;
  std::map<std::pair<int, int>, int> counts;
  o.n_predict = 2;
  for (int t = 0; t < trials; ++t) {
    sp.seed = uint64_t(t) + 1;
    Sampler s(sp);
    std::vector<int32_t> out;
    auto r = generate_speculative(p.target, p.draft, prompt, o, s, [&](int32_t tok) { out.push_back(tok); return true; });
    EXPECT_TRUE(r.is_ok());
    if (!r || out.size() != 2) return 1e9;
    counts[{out[0], out[1]}]++;
    if (settings_used)
      for (const auto& [name, n] : r->checks_per_setting) settings_used->insert(name);
  }
  double chi2 = 0;
  for (const auto& [cell, prob] : expected) {
    const double e = prob * trials, d = counts[cell] - e;
    chi2 += d * d / e;
  }
  return chi2;
}

TEST(Speculative, SamplingFollowsTargetDistribution) {
  SpeculativeOptions o;
  o.policy.budget = 4;
  o.policy.top_k = 2;
  o.policy.width = 2;
  const double chi2 = sampled_pair_chi2(o);
  // 8 degrees of freedom: P(chi2 > 37) ~ 1e-5.
  EXPECT_LT(chi2, 37.0);
  RecordProperty("chi2", std::to_string(chi2));
}

// The same under the online controller, made to try draft settings from the second check (one
// plain warm-up check, then a probe every other check): whatever it picks, chain or tree of any budget or plain,
// sampled output keeps the target's distribution.
TEST(Speculative, SamplingFollowsTargetDistributionUnderTheOnlineController) {
  SpeculativeOptions o;
  o.auto_budget = true;
  o.auto_shape = true;
  o.policy.top_k = 2;
  o.policy.width = 2;
  spec::ControllerOptions schedule;
  schedule.warmup = 1;      // the least it takes
  schedule.probe_every = 2;
  o.controller_schedule = schedule;
  std::set<std::string> used;
  const double chi2 = sampled_pair_chi2(o, &used);
  EXPECT_LT(chi2, 37.0);
  RecordProperty("chi2", std::to_string(chi2));
  // The test means something only if a draft setting ran after the plain warm-up check (today
  // the first probe is chain-1: the second token comes from a speculative check).
  EXPECT_TRUE(used.count("plain")) << ::testing::PrintToString(used);
  size_t drafted = 0;
  for (const auto& name : used) drafted += name != "plain";
  EXPECT_GE(drafted, 1u) << "settings used: " << ::testing::PrintToString(used);
}

// After a speculative run the committed cache slots hold exactly the target K/V that one
// plain causal pass over the same tokens writes (scratch slots were compacted in order).
TEST(Speculative, CommittedKvEqualsPlainPass) {
  auto source = testing::tiny_weights({});
  const Pair p = converted(*source);
  const std::vector<int32_t> prompt = {1, 5, 9, 2};
  for (int mode = 0; mode < 4; ++mode) {
    const auto shape = mode % 2 ? spec::DraftShape::kTree : spec::DraftShape::kChain;
    SamplingParams sp;
    sp.temperature = 0;
    Sampler s(sp);
    SpeculativeOptions o;
    o.n_predict = 30;
    o.policy.shape = shape;
    o.policy.budget = 8;
    if (mode >= 2) {  // with the lookup chain, and under the controller
      o.lookup.max_tokens = 6;
      o.auto_budget = mode == 3;
    }
    KvCache cache(p.target.config(), int64_t(prompt.size()) + o.n_predict + 65);
    std::vector<int32_t> tokens = prompt;
    auto r = generate_speculative(p.target, p.draft, prompt, o, s, [&](int32_t t) { tokens.push_back(t); return true; },
                                  &cache);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    // Slots [0, committed) hold the prompt and the emitted tokens in order (the last check's
    // bonus token, and any accepted tokens cut off by n_predict, are not committed).
    ASSERT_GE(r->committed, int64_t(tokens.size()) - 8);
    ASSERT_LE(r->committed, int64_t(tokens.size()));
    KvCache plain(p.target.config(), r->committed);
    ASSERT_TRUE(forward_pass(p.target, plain, Batch::causal(std::span(tokens).first(size_t(r->committed)), 0)).is_ok());
    for (int64_t l = 0; l < p.target.config().n_layers; ++l) {
      for (int64_t slot = 0; slot < r->committed; ++slot) {
        for (int64_t e = 0; e < cache.kv_dim(); ++e) {
          ASSERT_EQ(cache.k(l, slot)[e], plain.k(l, slot)[e]) << "layer " << l << " slot " << slot;
          ASSERT_EQ(cache.v(l, slot)[e], plain.v(l, slot)[e]) << "layer " << l << " slot " << slot;
        }
      }
    }
  }
}

// D·X goes through the model's backend; a different implementation of the backend that
// computes the same integers (here the scalar reference kernel) leaves the target's output
// unchanged — what the CUDA backend must achieve.
TEST(Speculative, TargetDoesNotDependOnWhereDraftRuns) {
  struct ScalarBackend : Backend {
    int calls = 0;
    std::string name() const override { return "scalar-test"; }
    Status draft_matmul(const SplitProjection& planes, const cpu::QuantizedActivations& x, float* y,
                        const cpu::SignPlaneView* delta) override {
      ++calls;
      cpu::draft_matmul_ref(planes.draft(), x, y, delta);
      return Status::ok();
    }
  };
  const auto path = std::filesystem::temp_directory_path() / ("bitsplit_tier_" + std::to_string(::getpid()) + ".gguf");
  auto source = testing::tiny_weights({});
  ASSERT_TRUE(convert_model(*source, path.string(), {}, nullptr, nullptr).is_ok());
  auto w = open_weights(path.string());
  auto cpu_model = Model::load(**w);
  auto backend = std::make_shared<ScalarBackend>();
  auto other = Model::load(**w, {.backend = backend});
  std::filesystem::remove(path);
  ASSERT_TRUE(cpu_model.is_ok() && other.is_ok());
  const std::vector<int32_t> prompt = {1, 5, 9};
  SamplingParams sp;
  sp.temperature = 0;
  auto run_spec = [&](const Model& m) {
    Sampler s(sp);
    SpeculativeOptions o;
    o.n_predict = 24;
    std::vector<int32_t> out;
    auto r = generate_speculative(m, m, prompt, o, s, [&](int32_t t) { out.push_back(t); return true; });
    BITSPLIT_CHECK(r.is_ok());
    return out;
  };
  EXPECT_EQ(run_spec(*other), run_spec(*cpu_model));
  EXPECT_GT(backend->calls, 0);
  KvCache a(cpu_model->config(), 3), b(cpu_model->config(), 3);
  EXPECT_EQ(*forward_pass(*cpu_model, a, Batch::causal(prompt, 0)), *forward_pass(*other, b, Batch::causal(prompt, 0)));
}

TEST(Speculative, RejectsBadOptions) {
  auto source = testing::tiny_weights({});
  const Pair p = converted(*source);
  SamplingParams sp;
  Sampler s(sp);
  SpeculativeOptions o;
  o.policy.budget = 0;
  auto r = generate_speculative(p.target, p.draft, std::vector<int32_t>{1}, o, s, [](int32_t) { return true; });
  EXPECT_FALSE(r.is_ok());
  o.policy.budget = 4;
  o.n_predict = 1000;
  r = generate_speculative(p.target, p.draft, std::vector<int32_t>{1}, o, s, [](int32_t) { return true; });
  EXPECT_NE(r.status().message().find("context length"), std::string::npos);
  // A zero prefill chunk with a multi-token prompt was an endless prefill loop; now an error.
  o.n_predict = 4;
  o.lookup.max_tokens = spec::kMaxBudget + 1;
  r = generate_speculative(p.target, p.draft, std::vector<int32_t>{1}, o, s, [](int32_t) { return true; });
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("lookup"), std::string::npos) << r.status().message();
  o.lookup.max_tokens = 0;
  o.prefill_chunk = 0;
  r = generate_speculative(p.target, p.draft, std::vector<int32_t>{1, 5, 9}, o, s, [](int32_t) { return true; });
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("prefill chunk"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace bitsplit
