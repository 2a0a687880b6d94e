// Sampling pipeline: repetition penalty -> top-k -> temperature softmax -> top-p -> min-p.
#include "bitsplit/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace bitsplit {

Status SamplingParams::validate() const {
  // A negative temperature would invert the distribution (the least likely token first) and
  // overflow exp() to NaN: refused by every front end alike (the C API, the CLI, the server).
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    return Status::error("the temperature must be a finite number >= 0 (0 for greedy)");
  }
  if (top_k < 0) return Status::error("top-k must be >= 0 (0 disables it)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Status::error("top-p must be in (0, 1] (1 disables it)");
  if (!(min_p >= 0.0f && min_p < 1.0f)) return Status::error("min-p must be in [0, 1) (0 disables it)");
  // Bounded so that dividing or multiplying a logit by it cannot overflow to an infinity, which
  // would turn the whole distribution into NaN (inf - inf).
  if (!(repeat_penalty >= kMinRepeatPenalty && repeat_penalty <= kMaxRepeatPenalty)) {
    return Status::error("the repetition penalty must be a number from 0.001 to 1000 (1 disables it)");
  }
  if (repeat_last_n < 0) return Status::error("the repetition window (repeat-last-n) must be >= 0");
  return Status::ok();
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<std::pair<float, int32_t>> top_logits(std::span<const float> logits, int32_t k) {
  std::vector<std::pair<float, int32_t>> top;  // descending by logit
  if (k <= 0) return top;
  top.reserve(size_t(k) + 1);
  for (size_t t = 0; t < logits.size(); ++t) {
    const float x = logits[t];
    if (!(x > -INFINITY) || (int32_t(top.size()) == k && !(x > top.back().first))) continue;
    auto at = std::find_if(top.begin(), top.end(), [&](const auto& e) { return x > e.first; });
    top.insert(at, {x, int32_t(t)});
    if (int32_t(top.size()) > k) top.pop_back();
  }
  return top;
}

std::vector<float> Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history) const {
  const size_t n = logits.size();
  std::vector<float> l(logits.begin(), logits.end());
  if (params_.repeat_penalty != 1.0f && params_.repeat_last_n > 0) {
    // Each recent token is penalised once, however often it occurred (as llama.cpp does).
    const size_t from = history.size() > size_t(params_.repeat_last_n) ? history.size() - params_.repeat_last_n : 0;
    std::unordered_set<int32_t> seen(history.begin() + from, history.end());
    for (int32_t t : seen) {
      if (t < 0 || size_t(t) >= n) continue;
      l[size_t(t)] = l[size_t(t)] > 0 ? l[size_t(t)] / params_.repeat_penalty : l[size_t(t)] * params_.repeat_penalty;
    }
  }
  std::vector<float> p(n, 0.0f);
  if (params_.greedy()) {
    p[size_t(argmax(l))] = 1.0f;
    return p;
  }
  // Candidates by descending logit; index breaks ties so the order is deterministic.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  size_t keep = n;
  if (params_.top_k > 0) keep = std::min(keep, size_t(params_.top_k));
  auto by_logit = [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b); };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  order.resize(keep);

  std::vector<double> probs(keep);
  const double max = l[size_t(order[0])];
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((double(l[size_t(order[i])]) - max) / params_.temperature);
    sum += probs[i];
  }
  for (double& q : probs) q /= sum;
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cum += probs[i];
      if (cum >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  if (params_.min_p > 0.0f) {
    const double threshold = probs[0] * params_.min_p;
    size_t cut = 1;
    while (cut < keep && probs[cut] >= threshold) ++cut;
    keep = cut;
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += probs[i];
  for (size_t i = 0; i < keep; ++i) p[size_t(order[i])] = float(probs[i] / kept);
  return p;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const std::vector<float> p = distribution(logits, history);
  if (params_.greedy()) return argmax(p);
  // Inverse-CDF draw with our own 53-bit uniform, so results do not depend on the standard
  // library's distribution implementations.
  const double u = double(rng_() >> 11) * 0x1.0p-53;
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0.0f) continue;
    cum += p[i];
    last = int32_t(i);
    if (u < cum) return last;
  }
  return last;
}

}  // namespace bitsplit
