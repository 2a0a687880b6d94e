// Prometheus text (metrics.h).
#include "bitsplit/metrics.h"

#include <cstdio>

namespace bitsplit::serve {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// Label values escaped as the text format asks (backslash, quote, newline).
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
  return out;
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}) {}

void Metrics::set_model_name(std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  model_ = std::move(name);
}
void Metrics::request_waiting(int delta) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_ += delta;
}
void Metrics::request_running(int delta) {
  std::lock_guard<std::mutex> lock(mu_);
  running_ += delta;
}
void Metrics::request_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                               double time_to_first_token, double e2e_seconds, const std::vector<double>& inter_token) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[finish_reason];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
  if (time_to_first_token >= 0) ttft_.observe(time_to_first_token);
  e2e_.observe(e2e_seconds);
  for (double t : inter_token) itl_.observe(t);
}
void Metrics::request_served(const std::string& served_name) {
  std::lock_guard<std::mutex> lock(mu_);
  ++served_[served_name];
}
void Metrics::set_draining(bool draining) {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = draining;
}
void Metrics::request_rejected(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_[status];
}
void Metrics::add_speculative(const SpeculativeCounts& s) {
  std::lock_guard<std::mutex> lock(mu_);
  spec_.drafts += s.drafts;
  spec_.draft_tokens += s.draft_tokens;
  spec_.accepted += s.accepted;
  if (spec_.accepted_per_pos.size() < s.accepted_per_pos.size()) spec_.accepted_per_pos.resize(s.accepted_per_pos.size());
  for (size_t i = 0; i < s.accepted_per_pos.size(); ++i) spec_.accepted_per_pos[i] += s.accepted_per_pos[i];
}
void Metrics::add_prefix_cache(int64_t queried_tokens, int64_t hit_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  prefix_queries_ += queried_tokens;
  prefix_hits_ += hit_tokens;
}
void Metrics::set_kv_cache_usage(double fraction) {
  std::lock_guard<std::mutex> lock(mu_);
  kv_usage_ = fraction;
}
void Metrics::set_variants(std::vector<std::string> resident, std::vector<std::string> registered) {
  std::lock_guard<std::mutex> lock(mu_);
  resident_ = std::move(resident);
  registered_ = std::move(registered);
}

void Metrics::set_forward_passes(int64_t passes, int64_t sequences, int64_t rows, int64_t shared) {
  std::lock_guard<std::mutex> lock(mu_);
  passes_ = passes;
  pass_sequences_ = sequences;
  pass_rows_ = rows;
  pass_shared_ = shared;
}

void Metrics::set_http(const http::Counters& c) {
  std::lock_guard<std::mutex> lock(mu_);
  http_ = c;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string model = "model_name=\"" + escape(model_) + "\"";
  std::string out;
  // A metric with one sample, labelled with the model.
  auto sample = [&](const std::string& name, const char* type, const char* help, const std::string& value) {
    header(out, name, type, help);
    out += name + "{" + model + "} " + value + "\n";
  };
  sample("vllm:num_requests_running", "gauge", "Requests decoding now.", std::to_string(running_));
  sample("vllm:num_requests_waiting", "gauge", "Requests queued for a slot.", std::to_string(waiting_));
  sample("vllm:prompt_tokens_total", "counter", "Prompt tokens processed.", std::to_string(prompt_tokens_));
  sample("vllm:generation_tokens_total", "counter", "Tokens generated.", std::to_string(generation_tokens_));
  header(out, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto& [reason, n] : finished_) {
    out += "vllm:request_success_total{" + model + ",finished_reason=\"" + escape(reason) + "\"} " + std::to_string(n) + "\n";
  }
  header(out, "bitsplit:requests_by_model_total", "counter",
         "Finished requests by the model id they asked for (the base's or a variant's).");
  for (const auto& [name, n] : served_) {
    out += "bitsplit:requests_by_model_total{" + model + ",requested_model=\"" + escape(name) + "\"} " + std::to_string(n) + "\n";
  }
  sample("bitsplit:draining", "gauge", "1 while the server drains (admits no new requests).", draining_ ? "1" : "0");
  header(out, "bitsplit:request_rejected_total", "counter", "Requests answered with an error, by HTTP status.");
  for (const auto& [status, n] : rejected_) {
    out += "bitsplit:request_rejected_total{" + model + ",status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  }
  header(out, "vllm:time_to_first_token_seconds", "histogram", "Time from request to the first generated token.");
  out += ttft_.render("vllm:time_to_first_token_seconds", model);
  header(out, "vllm:inter_token_latency_seconds", "histogram", "Time between generated tokens.");
  out += itl_.render("vllm:inter_token_latency_seconds", model);
  header(out, "vllm:e2e_request_latency_seconds", "histogram", "Time from request to its last token.");
  out += e2e_.render("vllm:e2e_request_latency_seconds", model);
  sample("vllm:spec_decode_num_drafts_total", "counter", "Verify passes of speculative decoding.", std::to_string(spec_.drafts));
  sample("vllm:spec_decode_num_draft_tokens_total", "counter", "Drafted tokens (tree nodes).", std::to_string(spec_.draft_tokens));
  sample("vllm:spec_decode_num_accepted_tokens_total", "counter", "Accepted drafted tokens.", std::to_string(spec_.accepted));
  header(out, "vllm:spec_decode_num_accepted_tokens_per_pos", "counter", "Accepted drafted tokens by position (0-based).");
  for (size_t i = 0; i < spec_.accepted_per_pos.size(); ++i) {
    out += "vllm:spec_decode_num_accepted_tokens_per_pos{" + model + ",position=\"" + std::to_string(i) + "\"} " +
           std::to_string(spec_.accepted_per_pos[i]) + "\n";
  }
  sample("bitsplit:forward_passes_total", "counter", "Forward passes run (each over one or more sequences).", std::to_string(passes_));
  sample("bitsplit:forward_pass_sequences_total", "counter", "Sequence passes run inside those forward passes.", std::to_string(pass_sequences_));
  sample("bitsplit:forward_pass_rows_total", "counter", "Token rows run through those forward passes.", std::to_string(pass_rows_));
  sample("bitsplit:forward_pass_shared_sequences_total", "counter", "Sequence passes that shared a forward pass (one stream of the weights) with another sequence.", std::to_string(pass_shared_));
  sample("bitsplit:http_connections_total", "counter", "Connections accepted.", std::to_string(http_.connections));
  sample("bitsplit:http_connections_open", "gauge", "Connections open now.", std::to_string(http_.open_connections));
  sample("bitsplit:http_connections_refused_total", "counter", "Connections over the limit (answered 503, closed).",
         std::to_string(http_.connections_refused));
  sample("bitsplit:http_timeouts_total", "counter", "Connections closed at a deadline (slow to send a request or to read a reply).",
         std::to_string(http_.timeouts));
  sample("bitsplit:http_bad_requests_total", "counter", "Requests the HTTP layer refused (malformed, over a limit, wrong route or type).",
         std::to_string(http_.bad_requests));
  sample("bitsplit:http_busy_total", "counter", "Requests answered 503 because every worker was busy.", std::to_string(http_.busy));
  sample("vllm:kv_cache_usage_perc", "gauge", "Fraction of the KV cache in use (1 = full).", number(kv_usage_));
  sample("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the kept KV caches (--prompt-cache).",
         std::to_string(prefix_queries_));
  sample("vllm:prefix_cache_hits_total", "counter", "Prompt tokens found there (not run again).", std::to_string(prefix_hits_));
  header(out, "vllm:lora_requests_info", "gauge", "Variants: registered, and resident (loaded) now.");
  std::string resident, registered;
  for (const auto& v : resident_) resident += (resident.empty() ? "" : ",") + v;
  for (const auto& v : registered_) registered += (registered.empty() ? "" : ",") + v;
  out += "vllm:lora_requests_info{" + model + ",running_lora_adapters=\"" + escape(resident) +
         "\",waiting_lora_adapters=\"\",max_lora=\"" + std::to_string(registered_.size()) + "\",registered=\"" +
         escape(registered) + "\"} 1\n";
  return out;
}

}  // namespace bitsplit::serve
