// The server's admission (slots, the queue, their metrics) and its pool of kept prompt caches,
// without HTTP: a full queue refuses, a released slot wakes a waiter, slots bound how many run at
// once (also under ThreadSanitizer); the pool hands out the longest prefix made under the same
// variant only and pushes out the cache given back longest ago.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "admission.h"  // engine/serve (an internal header)
#include "prompt_cache_pool.h"  // engine/serve (an internal header)
#include "bitsplit/model.h"
#include "gguf_testing.h"

namespace bitsplit::serve {
namespace {

// Waits (bounded) until `done` holds; the threads it waits for block on a condition variable,
// so there is no event to join on.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

using Tokens = std::vector<int32_t>;

// Whether acquire() refuses a request at once, asked on another thread and given a bound to
// answer. A request it queued instead blocks until `release` frees the slots it may wait for (so
// that a failing test does not hang); once admitted, its slot is released at once.
bool refused(Admission& admission, const std::function<void()>& release) {
  auto request = std::async(std::launch::async, [&] { return admission.acquire() == nullptr; });
  if (request.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "the request was queued, not answered at once";
    release();
  }
  return request.get();
}

// Whether /metrics reports gauge `name` (of an unnamed model) at `value`.
bool reports(const Metrics& metrics, const std::string& name, const std::string& value) {
  return metrics.render().find(name + "{model_name=\"\"} " + value + "\n") != std::string::npos;
}

// The requests running and waiting, as the admission counts them and as /metrics reports them.
void expect_counts(const Admission& admission, const Metrics& metrics, int running, int waiting) {
  EXPECT_EQ(admission.running(), running);
  EXPECT_EQ(admission.waiting(), waiting);
  EXPECT_TRUE(reports(metrics, "vllm:num_requests_running", std::to_string(running)));
  EXPECT_TRUE(reports(metrics, "vllm:num_requests_waiting", std::to_string(waiting)));
}

TEST(ServeAdmission, AFullQueueRefusesAndAReleaseWakesTheWaiter) {
  Metrics metrics;
  Admission admission(/*slots=*/1, /*queue=*/1, metrics);
  auto first = admission.acquire();
  ASSERT_NE(first, nullptr);
  expect_counts(admission, metrics, 1, 0);

  std::shared_ptr<Admission::Slot> second;
  std::atomic<bool> admitted{false};
  std::thread waiter([&] {
    second = admission.acquire();
    admitted = true;
  });
  ASSERT_TRUE(eventually([&] { return admission.waiting() == 1; }));
  EXPECT_FALSE(admitted) << "queued while the one slot is taken";
  expect_counts(admission, metrics, 1, 1);
  // Every slot taken and the queue full: refused at once, not queued.
  EXPECT_TRUE(refused(admission, [&] {
    first.reset();
    waiter.join();
    second.reset();
  }));
  expect_counts(admission, metrics, 1, 1);

  first.reset();  // the waiter takes the freed slot
  // (Failing, this leaves the waiter blocked: the test ends there, its thread unjoined, rather
  // than hang.)
  ASSERT_TRUE(eventually([&] { return admitted.load(); })) << "the release woke no waiter";
  if (waiter.joinable()) waiter.join();
  ASSERT_NE(second, nullptr);
  expect_counts(admission, metrics, 1, 0);
  second.reset();
  expect_counts(admission, metrics, 0, 0);
}

TEST(ServeAdmission, WithoutAQueueTheRequestBeyondTheSlotsIsRefused) {
  Metrics metrics;
  Admission admission(/*slots=*/2, /*queue=*/0, metrics);
  auto a = admission.acquire(), b = admission.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(refused(admission, [&] { b.reset(); }));
  b.reset();
  EXPECT_NE(admission.acquire(), nullptr) << "a released slot admits the next request";
}

// A slot's KV reservation counts in the usage /metrics reports until it is released, and goes
// with the slot if it was not.
TEST(ServeAdmission, KvReservationsMakeTheReportedUsage) {
  Metrics metrics;
  Admission admission(/*slots=*/2, /*queue=*/4, metrics);
  auto a = admission.acquire(), b = admission.acquire();
  a->reserve_kv(50, 100);  // of 2 slots x 100 tokens
  EXPECT_TRUE(reports(metrics, "vllm:kv_cache_usage_perc", "0.25"));
  b->reserve_kv(100, 100);
  EXPECT_TRUE(reports(metrics, "vllm:kv_cache_usage_perc", "0.75"));
  a->release_kv();
  a->release_kv();  // once only
  EXPECT_EQ(admission.kv_reserved(), 100);
  EXPECT_TRUE(reports(metrics, "vllm:kv_cache_usage_perc", "0.5"));
  b.reset();
  EXPECT_EQ(admission.kv_reserved(), 0);
  EXPECT_TRUE(reports(metrics, "vllm:kv_cache_usage_perc", "0"));
}

// Many threads through few slots: never more running than slots, every one admitted (the queue
// holds them all), and the counts back to zero.
TEST(ServeAdmission, SlotsBoundTheRequestsRunningAtOnce) {
  Metrics metrics;
  const int slots = 2, threads = 6, rounds = 40;
  Admission admission(slots, /*queue=*/threads, metrics);
  std::atomic<int> inside{0}, most{0}, admitted{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        auto slot = admission.acquire();
        if (!slot) continue;
        ++admitted;
        const int now = ++inside;
        for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
        }
        std::this_thread::yield();
        --inside;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(admitted.load(), threads * rounds);
  EXPECT_LE(most.load(), slots);
  expect_counts(admission, metrics, 0, 0);
}

// A tiny model and two variants of it (no deltas: the pool only tells variants apart).
class PromptCachePoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(*testing::tiny_weights({}));
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = std::make_unique<Model>(std::move(*m));
    auto a = Variant::make(*model_, "a", {}, {}), b = Variant::make(*model_, "b", {}, {});
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    a_ = *a;
    b_ = *b;
  }
  Session::Kept kept(std::vector<int32_t> tokens) const {
    return {KvCache(model_->config(), int64_t(tokens.size()) + 4), std::move(tokens)};
  }

  std::unique_ptr<Model> model_;
  std::shared_ptr<const Variant> a_, b_;
};

TEST_F(PromptCachePoolTest, TakesTheLongestPrefixUnderTheSameVariantOnly) {
  PromptCachePool pool(8);
  pool.give_back(0, nullptr, kept({1, 2, 9}));
  pool.give_back(0, nullptr, kept({1, 2, 3, 4}));
  pool.give_back(0, a_, kept({1, 2, 3, 4, 5}));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(pool.take(0, b_, prompt).tokens, Tokens{}) << "no cache of b";
  EXPECT_EQ(pool.take(0, nullptr, Tokens{7, 8}).tokens, Tokens{}) << "no shared prefix";
  EXPECT_EQ(pool.size(), 3u);
  // The base takes its own longest match, not a's longer one.
  Session::Kept base = pool.take(0, nullptr, prompt);
  EXPECT_EQ(base.tokens, (Tokens{1, 2, 3, 4}));
  EXPECT_TRUE(base.cache.has_value());
  EXPECT_EQ(pool.take(0, a_, prompt).tokens, (Tokens{1, 2, 3, 4, 5}));
  EXPECT_EQ(pool.take(0, nullptr, prompt).tokens, (Tokens{1, 2, 9}));
  EXPECT_EQ(pool.size(), 0u) << "a taken cache leaves the pool";
}

// A tenant (API key) never gets another's cache: cached_tokens would tell it what the other sent.
TEST_F(PromptCachePoolTest, TakesOnlyTheTenantsOwnCaches) {
  PromptCachePool pool(8);
  pool.give_back(1, nullptr, kept({1, 2, 3, 4}));
  pool.give_back(2, nullptr, kept({1, 2}));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  EXPECT_EQ(pool.take(3, nullptr, prompt).tokens, Tokens{}) << "a third tenant shares nothing";
  EXPECT_EQ(pool.take(2, nullptr, prompt).tokens, (Tokens{1, 2})) << "its own, not tenant 1's longer one";
  EXPECT_EQ(pool.take(2, nullptr, prompt).tokens, Tokens{});
  EXPECT_EQ(pool.take(1, nullptr, prompt).tokens, (Tokens{1, 2, 3, 4}));
}

TEST_F(PromptCachePoolTest, AFullPoolPushesOutTheCacheGivenBackLongestAgo) {
  PromptCachePool pool(2);
  pool.give_back(0, nullptr, kept({1, 1}));
  pool.give_back(0, nullptr, kept({2, 2}));
  // {1, 1} goes back after {2, 2}: {2, 2} is now the one given back longest ago.
  pool.give_back(0, nullptr, pool.take(0, nullptr, Tokens{1, 1, 5}));
  pool.give_back(0, nullptr, kept({3, 3}));
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.take(0, nullptr, Tokens{2, 2, 5}).tokens, Tokens{}) << "pushed out";
  EXPECT_EQ(pool.take(0, nullptr, Tokens{1, 1, 5}).tokens, (Tokens{1, 1}));
  EXPECT_EQ(pool.take(0, nullptr, Tokens{3, 3, 5}).tokens, (Tokens{3, 3}));
}

TEST_F(PromptCachePoolTest, KeepsNothingUselessOrGone) {
  PromptCachePool off(0);
  EXPECT_FALSE(off.enabled());
  off.give_back(0, nullptr, kept({1, 2}));
  EXPECT_EQ(off.size(), 0u);

  PromptCachePool pool(4);
  pool.give_back(0, nullptr, kept({}));            // a failed generation's: no tokens
  pool.give_back(0, nullptr, {std::nullopt, {1}});  // no cache
  EXPECT_EQ(pool.size(), 0u);
  // A variant that no longer exists: its cache is dropped, never handed to another.
  pool.give_back(0, b_, kept({1, 2, 3}));
  b_.reset();
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(pool.take(0, nullptr, Tokens{1, 2, 3, 4}).tokens, Tokens{});
  EXPECT_EQ(pool.size(), 0u);
}

// Requests taking and giving back at once (also under ThreadSanitizer): the pool never holds
// more than its capacity, and every cache taken is one of the requester's variant.
TEST_F(PromptCachePoolTest, ConcurrentRequests) {
  PromptCachePool pool(3);
  std::atomic<int> wrong{0};
  std::vector<std::thread> requests;
  for (int t = 0; t < 4; ++t) {
    requests.emplace_back([&, t] {
      const std::shared_ptr<const Variant> variant = t % 2 ? a_ : nullptr;
      const int32_t mark = t % 2 ? 100 : 200;  // the first token of this variant's prompts
      for (int i = 0; i < 50; ++i) {
        const std::vector<int32_t> prompt = {mark, int32_t(i % 5), 7};
        Session::Kept k = pool.take(0, variant, prompt);
        if (!k.tokens.empty() && k.tokens[0] != mark) ++wrong;
        pool.give_back(0, variant, kept(prompt));
      }
    });
  }
  for (auto& r : requests) r.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(pool.size(), 3u);
}

}  // namespace
}  // namespace bitsplit::serve
