// The server under concurrent use, in process (so ThreadSanitizer sees its threads): many
// clients at once on the base and a variant, streamed and not, a client leaving mid-stream,
// /metrics and /v1/models read meanwhile. Every request succeeds and greedy text is the same
// whichever order the requests ran in.
#include <gtest/gtest.h>
#include <httplib.h>

#include <tbb/global_control.h>

#include <map>
#include <mutex>
#include <chrono>
#include <thread>

#include "bitsplit/convert.h"
#include "bitsplit/delta_format.h"
#include "bitsplit/server.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

const std::string kModels = BITSPLIT_SOURCE_DIR "/tests/models";

#if defined(__SANITIZE_THREAD__)
// As in capi_test.cpp: ThreadSanitizer cannot see oneTBB's own synchronisation (libtbb is not
// instrumented), so under TSan oneTBB runs on the calling thread; what is checked is the
// server's threading (HTTP workers, slots, the pass batcher, metrics), not the kernels' split.
const tbb::global_control serial_tbb(tbb::global_control::max_allowed_parallelism, 1);
#endif

// bible-base converted to a bit-split file and bible-devil as its BitDelta variant, in `dir`:
// {the converted base, the delta}.
std::pair<std::string, std::string> convert_base_and_devil(testing::TempDir& dir) {
  auto base = open_weights(kModels + "/bible-base.gguf");
  auto devil = open_weights(kModels + "/bible-devil.gguf");
  BITSPLIT_CHECK(base.is_ok() && devil.is_ok());
  const std::string converted = dir.file("base.bitsplit.gguf"), delta = dir.file("devil.delta.gguf");
  BITSPLIT_CHECK(convert_model(**base, converted, {}, nullptr, nullptr).is_ok());
  BITSPLIT_CHECK(make_delta(**base, **devil, delta, {}, nullptr).is_ok());
  return {converted, delta};
}

LoadedModel open_or_die(const std::string& path) {
  auto loaded = open_model(path);
  BITSPLIT_CHECK(loaded.is_ok(), loaded.status().message());
  return std::move(*loaded);
}

// The converted bible-base loaded, with bible-devil registered as its variant "devil", in a
// temporary folder named after `tag` (the caller skips when tests/models is missing).
struct BaseAndDevil {
  explicit BaseAndDevil(const std::string& tag)
      : dir(tag), files(convert_base_and_devil(dir)), loaded(open_or_die(files.first)),
        variants(loaded.model, *loaded.source, {.budget_bytes = UINT64_MAX}) {
    BITSPLIT_CHECK(variants.add("devil", files.second).is_ok());
  }
  testing::TempDir dir;
  std::pair<std::string, std::string> files;  // the converted base, the delta
  LoadedModel loaded;
  VariantRegistry variants;
};

// A server (options.port 0: an ephemeral port) for `b`'s model and variants, serving HTTP on its
// own thread; stopped and joined when it goes out of scope, also when an assertion returns early.
class RunningServer {
 public:
  RunningServer(const serve::ServerOptions& options, BaseAndDevil& b) : server_(options) {
    const Status bound = server_.bind();
    EXPECT_TRUE(bound.is_ok()) << bound.message();
    http_ = std::thread([this] { (void)server_.serve(); });
    server_.attach(b.loaded, b.variants, std::nullopt);
  }
  ~RunningServer() {
    server_.stop();
    http_.join();
  }
  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;
  serve::Server& server() { return server_; }

 private:
  serve::Server server_;
  std::thread http_;
};

TEST(ServeConcurrency, ManyClientsOnTheBaseAndAVariant) {
  if (!std::filesystem::exists(kModels + "/bible-base.gguf")) GTEST_SKIP() << "tests/models is missing";
  BaseAndDevil b("serve-concurrency");
  ASSERT_TRUE(b.variants.add("unused", b.files.second).is_ok());  // registered, never requested: not resident
  ASSERT_TRUE(b.variants.add("lora", kModels + "/bible-devil-lora.gguf").is_ok());  // a LoRA adapter beside the delta

  serve::ServerOptions options;
  options.port = 0;
  options.parallel = 3;
  options.queue = 64;
  options.model_name = "base";
  RunningServer running(options, b);
  serve::Server& server = running.server();

  const std::vector<std::string> prompts = {"And God said", "In the beginning", "The LORD is my"};
  std::mutex mu;
  std::map<std::string, std::string> first_text;  // model|prompt -> text
  int failures = 0, mismatches = 0;
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", server.port());
      client.set_read_timeout(120, 0);
      for (int i = 0; i < 3; ++i) {
        const char* names[] = {"base", "devil", "lora"};
        const std::string model = names[i % 3];  // every client asks for each model once
        const std::string& prompt = prompts[size_t(c) % prompts.size()];
        const nlohmann::json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
        auto res = client.Post("/v1/completions", body.dump(), "application/json");
        std::lock_guard<std::mutex> lock(mu);
        if (!res || res->status != 200) {
          ++failures;
          continue;
        }
        const std::string text = nlohmann::json::parse(res->body)["choices"][0]["text"];
        auto [it, fresh] = first_text.emplace(model + "|" + prompt, text);
        if (!fresh && it->second != text) ++mismatches;
      }
    });
  }
  // A streamed request whose client leaves after the first event.
  clients.emplace_back([&] {
    httplib::Client client("127.0.0.1", server.port());
    const nlohmann::json body = {{"prompt", "And God said"}, {"max_tokens", 64}, {"temperature", 0}, {"stream", true}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    int events = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++events < 2; };
    (void)client.send(req);
  });
  // Readers of /metrics and /v1/models meanwhile.
  clients.emplace_back([&] {
    httplib::Client client("127.0.0.1", server.port());
    for (int i = 0; i < 20; ++i) {
      auto m = client.Get("/metrics");
      auto v = client.Get("/v1/models");
      std::lock_guard<std::mutex> lock(mu);
      if (!m || m->status != 200 || !v || v->status != 200) ++failures;
    }
  });
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(first_text.size(), 9u);
  EXPECT_NE(first_text["base|And God said"], first_text["devil|And God said"]) << "the variant decodes differently";
  EXPECT_NE(first_text["base|And God said"], first_text["lora|And God said"]) << "the adapter decodes differently";
  // The variant that ran is resident and the one never asked for is not; /metrics tells them
  // apart (router affinity).
  {
    httplib::Client client("127.0.0.1", server.port());
    auto m = client.Get("/metrics");
    ASSERT_TRUE(m && m->status == 200);
    EXPECT_NE(m->body.find("running_lora_adapters=\"devil,lora\""), std::string::npos) << m->body;
    EXPECT_NE(m->body.find("registered=\"devil,lora,unused\""), std::string::npos) << m->body;
  }
  // A client has its whole response before the server's handler returns and releases its slot:
  // wait (bounded) for the last handlers to finish.
  std::string metrics = server.metrics().render();
  for (int i = 0; i < 500 && metrics.find("vllm:num_requests_running{model_name=\"base\"} 0") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    metrics = server.metrics().render();
  }
  EXPECT_NE(metrics.find("vllm:num_requests_running{model_name=\"base\"} 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("vllm:num_requests_waiting{model_name=\"base\"} 0"), std::string::npos) << metrics;
}

// A finished request's KV cache is kept for the next one (--prompt-cache): a request whose prompt
// starts with an earlier prompt + its reply runs only the rest, says so in
// usage.prompt_tokens_details.cached_tokens, and answers as a server without the pool; another
// variant never takes the base's cache.
TEST(ServeConcurrency, KeptCachesServeTheNextRequest) {
  if (!std::filesystem::exists(kModels + "/bible-base.gguf")) GTEST_SKIP() << "tests/models is missing";
  BaseAndDevil b("serve-prompt-cache");
  // Text and cached tokens of each request, on a server with the pool (`kept` caches) or without.
  auto ask = [&](int kept, const std::vector<std::pair<std::string, std::string>>& requests) {
    serve::ServerOptions options;
    options.port = 0;
    options.parallel = 2;
    options.prompt_cache = kept;
    options.model_name = "base";
    RunningServer running(options, b);
    serve::Server& server = running.server();
    httplib::Client client("127.0.0.1", server.port());
    client.set_read_timeout(120, 0);
    std::vector<std::pair<std::string, int64_t>> out;
    std::string last;
    for (const auto& [model, prompt] : requests) {
      const std::string text = prompt == "+" ? last : prompt;  // "+": the last prompt and its reply
      const nlohmann::json body = {{"model", model}, {"prompt", text}, {"max_tokens", 12}, {"temperature", 0}};
      auto res = client.Post("/v1/completions", body.dump(), "application/json");
      EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
      if (!res || res->status != 200) break;
      const auto j = nlohmann::json::parse(res->body);
      const std::string reply = j["choices"][0]["text"];
      out.push_back({reply, j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>()});
      last = text + reply + " and";
    }
    // /metrics counts the prompt tokens looked up and found (vLLM's prefix-cache counters).
    const std::string metrics = server.metrics().render();
    const bool found = metrics.find("vllm:prefix_cache_hits_total{model_name=\"base\"} 0\n") == std::string::npos;
    EXPECT_EQ(found, kept > 0) << metrics;
    EXPECT_EQ(metrics.find("vllm:prefix_cache_queries_total{model_name=\"base\"} 0\n") == std::string::npos, kept > 0);
    return out;
  };
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"base", "In the beginning"}, {"base", "+"}, {"devil", "+"}, {"base", "+"}};
  const auto with = ask(2, requests), without = ask(0, requests);
  ASSERT_EQ(with.size(), 4u);
  ASSERT_EQ(without.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(with[i].first, without[i].first) << "request " << i;
    EXPECT_EQ(without[i].second, 0);
  }
  EXPECT_EQ(with[0].second, 0);
  EXPECT_GT(with[1].second, 5) << "the first request's prompt and reply";
  EXPECT_EQ(with[2].second, 0) << "the variant does not take the base's cache";
  EXPECT_GT(with[3].second, with[1].second) << "the base's kept cache, two turns on";
}

// A request's own budget goes through the front ends' one rule (generation_config): a fixed budget
// drafts no context lookup unless the server's defaults ask for one, as `bitsplit run --budget N`.
TEST(ServeConcurrency, ARequestsFixedBudgetDraftsLookupOnlyWhenAsked) {
  if (!std::filesystem::exists(kModels + "/bible-base.gguf")) GTEST_SKIP() << "tests/models is missing";
  BaseAndDevil b("serve-request-budget");
  // Lookup tokens drafted for one greedy request with "bitsplit": {"budget": 4}, on a server whose
  // defaults are `defaults`.
  auto lookup_drafted = [&](const GenerationArgs& defaults) -> int64_t {
    serve::ServerOptions options;
    options.port = 0;
    options.generation = defaults;
    RunningServer running(options, b);
    httplib::Client client("127.0.0.1", running.server().port());
    client.set_read_timeout(120, 0);
    const std::string verse = "And the LORD spake unto Moses, saying, ";
    const nlohmann::json body = {{"prompt", verse + verse + verse},
                                 {"max_tokens", 32},
                                 {"temperature", 0},
                                 {"bitsplit", {{"budget", 4}}}};
    auto res = client.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
    if (!res || res->status != 200) return -1;
    const auto j = nlohmann::json::parse(res->body);
    EXPECT_EQ(j["bitsplit"]["checks"].get<int64_t>() > 0, true) << res->body;
    return j["bitsplit"]["lookup_drafted_tokens"].get<int64_t>();
  };
  EXPECT_EQ(lookup_drafted(GenerationArgs{}), 0) << "the server's --budget auto default must not add lookup to a fixed budget";
  GenerationArgs with_lookup;
  with_lookup.lookup = 8;
  EXPECT_GT(lookup_drafted(with_lookup), 0) << "lookup asked for by the server's defaults joins the request's budget";
}

}  // namespace
}  // namespace bitsplit

namespace bitsplit {
namespace {

// Draining: a request running when the drain starts finishes with its whole text; from then on
// generation requests are 503 (a router retries them elsewhere) and /health says draining; drain()
// returns true once nothing is in flight. POST /admin/drain needs a key.
TEST(ServeConcurrency, ADrainFinishesWhatRunsAndRefusesWhatComes) {
  if (!std::filesystem::exists(kModels + "/bible-base.gguf")) GTEST_SKIP() << "tests/models is missing";
  BaseAndDevil b("serve-drain");
  serve::ServerOptions options;
  options.port = 0;
  options.parallel = 2;
  options.api_keys = {"k"};
  std::atomic<int> drain_requests{0};
  options.on_drain_request = [&] { ++drain_requests; };
  RunningServer running(options, b);
  serve::Server& server = running.server();
  httplib::Headers auth = {{"Authorization", "Bearer k"}};

  const nlohmann::json body = {{"prompt", "And God said"}, {"max_tokens", 48}, {"temperature", 0}};
  httplib::Client plain("127.0.0.1", server.port());
  plain.set_read_timeout(120, 0);
  auto alone = plain.Post("/v1/completions", auth, body.dump(), "application/json");
  ASSERT_TRUE(alone && alone->status == 200);
  const std::string want = nlohmann::json::parse(alone->body)["choices"][0]["text"];

  std::string got;
  int status = 0;
  std::atomic<bool> sent{false};
  std::thread client([&] {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    sent = true;
    auto res = c.Post("/v1/completions", auth, body.dump(), "application/json");
    if (res) {
      status = res->status;
      got = nlohmann::json::parse(res->body)["choices"][0]["text"];
    }
  });
  while (!sent.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Until the request holds its slot, a drain could refuse it: wait until /metrics shows it running.
  for (int i = 0; i < 2000; ++i) {
    auto m = plain.Get("/metrics", auth);
    if (m && m->body.find("vllm:num_requests_running{model_name=\"base.bitsplit.gguf\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto drained = plain.Post("/admin/drain", auth, "{}", "application/json");
  ASSERT_TRUE(drained);
  EXPECT_EQ(drained->status, 202);
  EXPECT_EQ(drain_requests.load(), 1);
  EXPECT_TRUE(server.draining());
  auto health = plain.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_NE(health->body.find("draining"), std::string::npos);
  auto refused = plain.Post("/v1/completions", auth, body.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_NE(refused->body.find("draining"), std::string::npos);
  EXPECT_TRUE(server.drain(std::chrono::seconds(120)));
  client.join();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(got, want) << "the request running when the drain began finished whole";
  auto metrics = plain.Get("/metrics", auth);
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("bitsplit:draining{model_name=\"base.bitsplit.gguf\"} 1"), std::string::npos);
  EXPECT_NE(metrics->body.find("requested_model=\"base.bitsplit.gguf\"} 2"), std::string::npos);
}

TEST(ServeConcurrency, AdminDrainNeedsAnApiKey) {
  if (!std::filesystem::exists(kModels + "/bible-base.gguf")) GTEST_SKIP() << "tests/models is missing";
  BaseAndDevil b("serve-drain-keys");
  serve::ServerOptions options;
  options.port = 0;
  RunningServer running(options, b);
  httplib::Client c("127.0.0.1", running.server().port());
  auto res = c.Post("/admin/drain", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_NE(res->body.find("--api-key"), std::string::npos);
  EXPECT_FALSE(running.server().draining());
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

}  // namespace
}  // namespace bitsplit
