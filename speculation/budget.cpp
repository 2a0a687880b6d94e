// Online choice of the draft budget from measured costs and acceptance.
#include <algorithm>

#include "bitsplit/speculation.h"

namespace bitsplit::speculation {

BudgetController::BudgetController(std::vector<int32_t> candidates, int32_t warmup_checks, int32_t probe_every)
    : candidates_(std::move(candidates)), estimates_(candidates_.size()), warmup_(warmup_checks),
      probe_every_(probe_every) {
  BITSPLIT_CHECK(!candidates_.empty() && warmup_ >= 1 && probe_every_ >= 2);
}

size_t BudgetController::index_of(int32_t budget) const {
  auto it = std::find(candidates_.begin(), candidates_.end(), budget);
  BITSPLIT_CHECK(it != candidates_.end(), "budget was not a candidate");
  return size_t(it - candidates_.begin());
}

double BudgetController::rate(int32_t budget) const {
  const Estimate& e = estimates_[index_of(budget)];
  return e.seconds > 0 ? e.tokens / e.seconds : 0.0;
}

int32_t BudgetController::best() const {
  int32_t best = candidates_.front();
  double best_rate = -1;
  for (int32_t b : candidates_) {
    if (rate(b) > best_rate) {
      best_rate = rate(b);
      best = b;
    }
  }
  return best;
}

int32_t BudgetController::next() {
  // Warm-up: every candidate in turn until each has its checks.
  for (size_t i = 0; i < candidates_.size(); ++i)
    if (estimates_[i].checks < warmup_) return candidates_[i];
  const size_t b = index_of(best());
  // Now and then measure the neighbours again, alternating sides.
  if (checks_ % probe_every_ == 0) {
    const bool up = (checks_ / probe_every_) % 2 == 0;
    if (up && b + 1 < candidates_.size()) return candidates_[b + 1];
    if (!up && b > 0) return candidates_[b - 1];
  }
  return candidates_[b];
}

void BudgetController::record(int32_t budget, int32_t tokens, double seconds) {
  constexpr double kDecay = 0.9;  // per check of that budget: the last ~10 checks dominate
  Estimate& e = estimates_[index_of(budget)];
  e.tokens = e.tokens * kDecay + tokens;
  e.seconds = e.seconds * kDecay + seconds;
  ++e.checks;
  ++checks_;
}

}  // namespace bitsplit::speculation
