// Server metrics in the Prometheus text format, under the names vLLM exports (so routers and
// dashboards that scrape vLLM read ours unchanged): requests running/waiting, prompt and
// generation token counters, time-to-first-token and inter-token latency histograms, the
// speculative-decoding counters (drafts, draft tokens, accepted tokens, accepted per position),
// KV-cache usage and which variants are resident. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bitsplit/http_server.h"

namespace bitsplit::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Lines "NAME_bucket{le=...} n", NAME_sum, NAME_count.
  std::string render(const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct SpeculativeCounts {
  int64_t drafts = 0;         // verify passes (checks)
  int64_t draft_tokens = 0;   // drafted nodes
  int64_t accepted = 0;       // accepted drafted tokens
  std::vector<int64_t> accepted_per_pos;  // index d-1: accepted at depth d
};

class Metrics {
 public:
  Metrics();
  void set_model_name(std::string name);
  void request_waiting(int delta);
  void request_running(int delta);
  void request_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                        double time_to_first_token, double e2e_seconds, const std::vector<double>& inter_token);
  void request_rejected(int status);
  // A finished request's model id as the client named it (the base's or a variant's): routers
  // and tests see which replica served which variant.
  void request_served(const std::string& served_name);
  void set_draining(bool draining);
  void add_speculative(const SpeculativeCounts& s);
  void set_kv_cache_usage(double fraction);
  // A request's prompt looked up in the kept caches (--prompt-cache): its tokens, and how many
  // of them were found (vLLM's prefix_cache counters, in tokens).
  void add_prefix_cache(int64_t queried_tokens, int64_t hit_tokens);
  void set_variants(std::vector<std::string> resident, std::vector<std::string> registered);
  // The combined forward passes so far (PassBatcher::Stats): passes, the sequence passes in them,
  // their rows, and the sequence passes that shared a pass with another sequence.
  void set_forward_passes(int64_t passes, int64_t sequences, int64_t rows, int64_t shared);
  void set_http(const http::Counters& c);  // the HTTP layer's connection counts
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string model_;
  int64_t waiting_ = 0, running_ = 0;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, int64_t> finished_;  // by finish reason
  std::map<int, int64_t> rejected_;          // by HTTP status
  std::map<std::string, int64_t> served_;    // by the model id requested
  bool draining_ = false;
  Histogram ttft_, itl_, e2e_;
  SpeculativeCounts spec_;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  double kv_usage_ = 0;
  std::vector<std::string> resident_, registered_;
  int64_t passes_ = 0, pass_sequences_ = 0, pass_rows_ = 0, pass_shared_ = 0;
  http::Counters http_;
};

}  // namespace bitsplit::serve
