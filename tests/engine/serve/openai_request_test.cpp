// The server's request parsing, stop strings and metrics, without a server: every field's
// check names the field, OpenAI's defaults apply, stop strings never leak into the text.
#include <gtest/gtest.h>

#include <cmath>

#include "bitsplit/logprobs.h"
#include "bitsplit/metrics.h"
#include "bitsplit/openai_request.h"
#include "bitsplit/stop_strings.h"

namespace bitsplit::serve {
namespace {

ParsedRequest completions(const std::string& body) { return parse_generation_request(body, Endpoint::kCompletions); }
ParsedRequest chat(const std::string& body) { return parse_generation_request(body, Endpoint::kChat); }

TEST(ServeRequest, CompletionDefaultsFollowOpenAI) {
  auto p = completions(R"({"model": "m", "prompt": "hello"})");
  ASSERT_TRUE(p.request.has_value()) << p.error.message;
  EXPECT_EQ(p.request->prompt, "hello");
  EXPECT_EQ(p.request->model, "m");
  EXPECT_FALSE(p.request->max_tokens.has_value());
  EXPECT_FLOAT_EQ(p.request->sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.request->sampling.top_p, 1.0f);
  EXPECT_EQ(p.request->sampling.top_k, 0);
  EXPECT_FALSE(p.request->stream);
  EXPECT_FALSE(p.request->seed_given);
  p = completions(R"({"prompt": ["one"], "max_tokens": 7, "temperature": 0, "seed": 5, "stop": "\n", "stream": true,
                      "stream_options": {"include_usage": true}, "bitsplit": {"speculative": false, "budget": 8}})");
  ASSERT_TRUE(p.request.has_value()) << p.error.message;
  EXPECT_EQ(p.request->prompt, "one");
  EXPECT_EQ(*p.request->max_tokens, 7);
  EXPECT_TRUE(p.request->sampling.greedy());
  EXPECT_EQ(p.request->sampling.seed, 5u);
  EXPECT_EQ(p.request->stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(p.request->stream && p.request->include_usage);
  EXPECT_EQ(p.request->speculative, std::optional<bool>(false));
  EXPECT_EQ(p.request->budget, std::optional<std::string>("8"));
}

TEST(ServeRequest, ChatContentPartsBecomeText) {
  auto p = chat(R"({"messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                 {"role": "assistant", "content": null}]})");
  ASSERT_TRUE(p.request.has_value()) << p.error.message;
  ASSERT_EQ(p.request->messages.size(), 3u);
  EXPECT_EQ(p.request->messages[1]["content"], "ab");
  EXPECT_EQ(p.request->messages[2]["content"], "");
}

TEST(ServeRequest, BadRequestsNameTheField) {
  struct Case {
    Endpoint endpoint;
    const char* body;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {Endpoint::kCompletions, "not json", "", "not valid JSON"},
      {Endpoint::kCompletions, "[]", "", "must be a JSON object"},
      {Endpoint::kCompletions, "{}", "prompt", "'prompt' is required"},
      {Endpoint::kCompletions, R"({"prompt": []})", "prompt", "must be a string or an array of token ids"},
      {Endpoint::kCompletions, R"({"prompt": [1, "a"]})", "prompt", "hold integers, not a string"},
      {Endpoint::kCompletions, R"({"prompt": [1, -2]})", "prompt", "token id -2 is not a token id"},
      {Endpoint::kCompletions, R"({"prompt": [[1, 2], [3]]})", "prompt", "batches of several prompts"},
      {Endpoint::kCompletions, R"({"prompt": [[]]})", "prompt", "empty token array"},
      {Endpoint::kCompletions, R"({"prompt": [1.5]})", "prompt", "hold integers"},
      {Endpoint::kCompletions, R"({"prompt": "x", "model": 3})", "model", "must be a string"},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "between 1 and"},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "must be an integer"},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens", "between 1 and"},
      {Endpoint::kCompletions, R"({"prompt": "x", "temperature": 3})", "temperature", "between 0 and 2"},
      {Endpoint::kCompletions, R"({"prompt": "x", "temperature": "hot"})", "temperature", "must be a number"},
      {Endpoint::kCompletions, R"({"prompt": "x", "top_p": 0})", "top_p", "greater than 0"},
      {Endpoint::kCompletions, R"({"prompt": "x", "n": 2})", "n", "must be 1"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": [""]})", "stop", "must not be empty"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": [7]})", "stop", "strings"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stream": "yes"})", "stream", "must be a boolean"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 21})", "logprobs", "between 0 and 20"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logprobs": true})", "logprobs", "must be an integer"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 2})", "logprobs",
       "must be a boolean"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "top_logprobs",
       "needs 'logprobs': true"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": -1})",
       "top_logprobs", "between 0 and 20"},
      {Endpoint::kCompletions, R"({"prompt": "x", "bitsplit": {"budget": 0}})", "bitsplit.budget", "budget"},
      {Endpoint::kCompletions, R"({"prompt": "x", "bitsplit": 1})", "bitsplit", "must be an object"},
      {Endpoint::kChat, R"({"messages": []})", "messages", "must not be empty"},
      {Endpoint::kChat, R"({"messages": "hi"})", "messages", "must be an array"},
      {Endpoint::kChat, R"({"messages": [{"content": "hi"}]})", "messages[0].role", "role is required"},
      {Endpoint::kChat, R"({"messages": [{"role": "robot", "content": "hi"}]})", "messages[0].role", "is not one of"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content",
       "only text"},
  };
  for (const Case& c : cases) {
    auto p = parse_generation_request(c.body, c.endpoint);
    SCOPED_TRACE(c.body);
    ASSERT_FALSE(p.request.has_value());
    EXPECT_EQ(p.error.status, 400);
    EXPECT_EQ(p.error.param, c.param);
    EXPECT_NE(p.error.message.find(c.says), std::string::npos) << p.error.message;
    const auto j = p.error.to_json();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["message"], p.error.message);
  }
}

// JSON nested past kMaxJsonDepth is refused while it is parsed (a message carrying a value
// 20,000 deep crashed the server); nesting within it parses.
TEST(ServeRequest, DeepNestingIsRefusedWhileParsing) {
  auto nested = [](int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); };
  auto body = [&](int depth) {
    return R"({"messages": [{"role": "user", "content": "hi", "extra": )" + nested(depth) + "}]}";
  };
  EXPECT_TRUE(chat(body(kMaxJsonDepth - 4)).request.has_value());
  for (int depth : {kMaxJsonDepth + 1, 20000, 1000000}) {
    auto p = chat(body(depth));
    ASSERT_FALSE(p.request.has_value()) << depth;
    EXPECT_EQ(p.error.status, 400);
    EXPECT_NE(p.error.message.find("levels deep"), std::string::npos) << p.error.message;
  }
}

TEST(ServeRequest, TokenArrayPrompts) {
  auto p = completions(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(p.request.has_value()) << p.error.message;
  EXPECT_EQ(p.request->prompt_tokens, std::optional(std::vector<int32_t>{1, 2, 3}));
  p = completions(R"({"prompt": [[7]]})");
  ASSERT_TRUE(p.request.has_value()) << p.error.message;
  EXPECT_EQ(p.request->prompt_tokens, std::optional(std::vector<int32_t>{7}));
  p = completions(R"({"prompt": "text"})");
  ASSERT_TRUE(p.request.has_value());
  EXPECT_FALSE(p.request->prompt_tokens.has_value());
}

TEST(ServeRequest, LogprobsPerEndpoint) {
  auto p = completions(R"({"prompt": "x"})");
  ASSERT_TRUE(p.request.has_value());
  EXPECT_FALSE(p.request->logprobs.has_value());
  p = completions(R"({"prompt": "x", "logprobs": 0})");
  ASSERT_TRUE(p.request.has_value());
  EXPECT_EQ(p.request->logprobs, std::optional<int32_t>(0));
  p = completions(R"({"prompt": "x", "logprobs": 5})");
  ASSERT_TRUE(p.request.has_value());
  EXPECT_EQ(p.request->logprobs, std::optional<int32_t>(5));
  p = chat(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": false})");
  ASSERT_TRUE(p.request.has_value());
  EXPECT_FALSE(p.request->logprobs.has_value());
  p = chat(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true})");
  ASSERT_TRUE(p.request.has_value());
  EXPECT_EQ(p.request->logprobs, std::optional<int32_t>(0));
  p = chat(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 20})");
  ASSERT_TRUE(p.request.has_value());
  EXPECT_EQ(p.request->logprobs, std::optional<int32_t>(20));
}

TEST(ServeLogprobs, LogSoftmaxOfTheRawLogitsAndTheBestAlternatives) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  const TokenLogprob t = token_logprob(logits, 4, 3);
  EXPECT_EQ(t.token, 4);
  EXPECT_NEAR(t.logprob, 0.5 - std::log(z), 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);  // the tie of 1 and 2 goes to the lower id
  EXPECT_EQ(t.top[1].first, 2);
  EXPECT_EQ(t.top[2].first, 0);
  EXPECT_NEAR(t.top[0].second, 3.0 - std::log(z), 1e-6);
  EXPECT_TRUE(token_logprob(logits, 0, 0).top.empty());
  EXPECT_EQ(token_logprob(logits, 0, 99).top.size(), logits.size());  // at most the vocabulary

  const PieceOf piece = [](int32_t id) { return std::vector<std::string>{"a", "bb", "\xc3", "", "e"}[size_t(id)]; };
  const std::vector<TokenLogprob> tokens = {token_logprob(logits, 1, 2), token_logprob(logits, 2, 0)};
  int64_t offset = 10;
  const auto c = completion_logprobs(tokens, piece, offset);
  EXPECT_EQ(offset, 13) << "left past the last token's 1 byte";
  EXPECT_EQ(c["tokens"], nlohmann::json({"bb", "\xc3"}));
  EXPECT_EQ(c["text_offset"], nlohmann::json({10, 12}));
  ASSERT_EQ(c["token_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(c["token_logprobs"][0].get<float>(), tokens[0].logprob);
  EXPECT_EQ(c["top_logprobs"][0].size(), 2u);
  EXPECT_FLOAT_EQ(c["top_logprobs"][0]["bb"].get<float>(), tokens[0].top[0].second);
  EXPECT_TRUE(c["top_logprobs"][1].empty());
  const auto chat_lp = chat_logprobs(tokens, piece);
  ASSERT_EQ(chat_lp["content"].size(), 2u);
  EXPECT_EQ(chat_lp["content"][1]["token"], "\xc3");
  EXPECT_EQ(chat_lp["content"][1]["bytes"], nlohmann::json({0xc3}));  // part of a character: the bytes tell
  EXPECT_EQ(chat_lp["content"][0]["top_logprobs"][1]["token"], "\xc3");
  EXPECT_EQ(chat_lp["content"][0]["top_logprobs"][1]["bytes"], nlohmann::json({0xc3}));
}

TEST(ServeStopStrings, HoldBackPrefixesAndCutAtTheFirstStop) {
  StopMatcher m({"END", "\n\n"});
  std::string out;
  out += m.push("hello E");
  EXPECT_EQ(out, "hello ");  // "E" may start END
  out += m.push("N");
  EXPECT_EQ(out, "hello ");
  out += m.push("x more");  // "ENx" is not a stop: released
  EXPECT_EQ(out, "hello ENx more");
  out += m.push(" text\n");
  out += m.push("\nafter");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "hello ENx more text");
  EXPECT_EQ(m.push("ignored"), "");
  EXPECT_EQ(m.flush(), "");
  StopMatcher tail({"END"});
  EXPECT_EQ(tail.push("abcEN"), "abc");
  EXPECT_EQ(tail.flush(), "EN");  // a partial stop at the end is text
  // A stop string that completes first wins over one that started earlier but is not complete
  // yet: generation stops as soon as the text holds a stop string (as OpenAI's API does).
  StopMatcher order({"END", "N"});
  std::string cut = order.push("hello E");
  cut += order.push("N");
  EXPECT_TRUE(order.stopped());
  EXPECT_EQ(cut, "hello E");
  StopMatcher none({});
  EXPECT_EQ(none.push("any"), "any");
}

TEST(ServeMetrics, RenderTheVllmNames) {
  Metrics m;
  m.set_model_name("base \"q\"");
  m.request_running(+1);
  m.request_finished("stop", 10, 5, 0.02, 0.3, {0.01, 0.2});
  m.add_speculative({4, 12, 6, {3, 2, 1}});
  m.set_variants({"v1"}, {"v1", "v2"});
  const std::string text = m.render();
  for (const char* name : {"vllm:num_requests_running{model_name=\"base \\\"q\\\"\"} 1", "vllm:num_requests_waiting",
                           "vllm:prompt_tokens_total{model_name=\"base \\\"q\\\"\"} 10", "vllm:generation_tokens_total",
                           "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_count",
                           "vllm:spec_decode_num_drafts_total{model_name=\"base \\\"q\\\"\"} 4",
                           "vllm:spec_decode_num_draft_tokens_total{model_name=\"base \\\"q\\\"\"} 12",
                           "vllm:spec_decode_num_accepted_tokens_total{model_name=\"base \\\"q\\\"\"} 6",
                           "vllm:spec_decode_num_accepted_tokens_per_pos{model_name=\"base \\\"q\\\"\",position=\"2\"} 1",
                           "vllm:kv_cache_usage_perc", "running_lora_adapters=\"v1\"", "registered=\"v1,v2\""}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  // Histogram buckets are cumulative: both inter-token times are under 0.25 s.
  EXPECT_NE(text.find("vllm:inter_token_latency_seconds_bucket{model_name=\"base \\\"q\\\"\",le=\"0.3\"} 2"), std::string::npos);
}

}  // namespace
}  // namespace bitsplit::serve
