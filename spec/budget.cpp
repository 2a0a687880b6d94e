// Online choice of each check's draft setting (plain decoding, context lookup, chain or tree and
// its budget) from measured costs and measured acceptance.
#include <algorithm>
#include <cmath>

#include "bitsplit/spec.h"

namespace bitsplit::spec {
namespace {

// The depths (levels below the root) of the settings each shape's ladder offers. A chain's budget
// is its depth; a tree's is the nodes of that many full levels. Each rung may cost a check to
// explore, so the ladder thins out with depth and stops at 16 levels or 32 nodes (in our
// measurements chain-8 and tree-16 were already past the best on every model).
constexpr int32_t kLadderDepths[] = {1, 2, 3, 4, 6, 8, 12, 16};
// Acceptance of a depth with no observation yet, before any check of the shape: a coin flip.
constexpr double kPriorAcceptance = 0.5;
constexpr int32_t kMaxLadderBudget = 32;

int shape_index(DraftShape s) { return s == DraftShape::kChain ? 0 : 1; }

}  // namespace

std::string DraftSetting::name() const {
  std::string n = budget == 0 ? (lookup ? "lookup" : "plain")
                              : (shape == DraftShape::kChain ? "chain-" : "tree-") + std::to_string(budget);
  if (budget > 0 && lookup) n += "+lookup";
  return n;
}

BudgetController::BudgetController(const DraftPolicy& policy, ControllerOptions options)
    : policy_(policy), options_(options), verify_(size_t(kMaxBudget) + 2) {
  BITSPLIT_CHECK(options_.chain || options_.tree, "the controller needs a shape to choose from");
  BITSPLIT_CHECK(options_.warmup >= 1 && options_.probe_every >= 2 && options_.decay > 0 && options_.decay <= 1);
  for (DraftShape shape : {DraftShape::kChain, DraftShape::kTree}) {
    if (!(shape == DraftShape::kChain ? options_.chain : options_.tree)) continue;
    DraftPolicy p = policy_;
    p.shape = shape;
    p.set_budget(shape == DraftShape::kChain ? kMaxBudget : kMaxLadderBudget);
    const std::vector<int32_t> sizes = p.level_sizes(p.budget);
    for (int32_t depth : kLadderDepths) {
      if (depth > int32_t(sizes.size())) break;
      int32_t budget = 0;
      for (int32_t l = 0; l < depth; ++l) budget += sizes[size_t(l)];
      if (budget > kMaxLadderBudget) break;
      if (!rungs_.empty() && rungs_.back().shape == shape && rungs_.back().budget == budget) continue;
      int32_t rows = 1;  // the root's pass, then one per node of every level but the last
      for (int32_t l = 0; l + 1 < depth; ++l) rows += sizes[size_t(l)];
      rungs_.push_back({shape, budget, depth, rows, {}, {}});
    }
  }
  candidates_.push_back({});  // plain
  if (options_.lookup) candidates_.push_back({DraftShape::kChain, 0, true});
  for (bool lookup : {false, true}) {
    if (lookup && !options_.lookup) continue;
    for (const Rung& r : rungs_) candidates_.push_back({r.shape, r.budget, lookup});
  }
  interval_ = options_.probe_every;
  next_probe_ = options_.probe_every;
}

int32_t BudgetController::rung_of(const DraftSetting& s) const {
  if (s.budget == 0) return -1;
  for (size_t i = 0; i < rungs_.size(); ++i)
    if (rungs_[i].shape == s.shape && rungs_[i].budget == s.budget) return int32_t(i);
  BITSPLIT_CHECK(false, "setting " + s.name() + " is not a candidate");
  return -1;
}

int32_t BudgetController::depth(const DraftSetting& s) const {
  const int32_t r = rung_of(s);
  return r < 0 ? 0 : rungs_[size_t(r)].depth;
}

void BudgetController::Fit::add(double x, double y, double seconds, double decay) {
  xx = xx * decay + x * x;
  xy = xy * decay + x * y;
  yy = yy * decay + y * y;
  xs = xs * decay + x * seconds;
  ys = ys * decay + y * seconds;
}

double BudgetController::Fit::predict(double x, double y) const {
  if (!known()) return 0.0;
  // Least squares for a, b >= 0. While the checks cannot tell x from y apart (all with the same
  // ratio: plain checks only, or chains only), all cost goes to x: extra rows look free, so
  // settings with more rows get tried and their checks separate the two.
  const double det = xx * yy - xy * xy;
  double a = xs / xx, b = 0;
  if (det > 1e-6 * xx * yy) {
    a = (xs * yy - ys * xy) / det;
    b = (ys * xx - xs * xy) / det;
    if (a < 0) a = 0, b = ys / yy;
    if (b < 0) b = 0, a = xs / xx;
  }
  return a * x + b * y;
}

// A measured mean shrunk toward the fitted line by this many observations' worth.
constexpr double kFitWeight = 2;

double BudgetController::verify_seconds(double rows) const {
  const double fit = verify_fit_.predict(1, rows);
  const size_t r = size_t(std::lround(rows));
  if (std::abs(rows - double(r)) > 1e-9 || r >= verify_.size() || !verify_[r].known()) return fit;
  return (verify_[r].sum + kFitWeight * fit) / (verify_[r].weight + kFitWeight);
}

double BudgetController::draft_seconds(const Rung& r) const {
  const double fit = draft_fit_.predict(r.depth, r.draft_rows);
  return (r.draft_seconds.sum + kFitWeight * fit) / (r.draft_seconds.weight + kFitWeight);
}

std::vector<double> BudgetController::reach(const Shape& sh, int32_t depth) {
  // P(accepted to depth d) for d = 1..depth: the product of the per-depth conditional rates,
  // each shrunk toward a prior: for depth 1 a coin flip worth one observation; deeper, the rate
  // pooled over all deeper depths, itself shrunk toward depth 1's rate, each worth six. A draft
  // that is on track tends to stay so at a rate near its first (Qwen2.5-Coder's 2-bit drafts:
  // 0.93 at depth 1, 0.87 at depth 2), and deep depths are seen rarely: with weaker priors one
  // rejection at depth 2 held a decoder on chain-1 for a whole run that chain-2..4 beat by 15 %.
  constexpr double kFirstPriorWeight = 1, kPoolWeight = 6, kPriorWeight = 6;
  double deep_sum = 0, deep_weight = 0;
  for (int32_t d = 2; d <= kDepths; ++d) {
    deep_sum += sh.accepted[d].sum;
    deep_weight += sh.accepted[d].weight;
  }
  auto shrunk = [&](const Mean& m, double prior, double weight) { return (m.sum + weight * prior) / (m.weight + weight); };
  const double rate1 = shrunk(sh.accepted[1], kPriorAcceptance, kFirstPriorWeight);
  const double deep_prior = (deep_sum + kPoolWeight * rate1) / (deep_weight + kPoolWeight);
  std::vector<double> p;
  double r = 1;
  for (int32_t d = 1; d <= depth; ++d) {
    r *= d == 1 ? rate1 : shrunk(sh.accepted[std::min(d, kDepths)], deep_prior, kPriorWeight);
    p.push_back(r);
  }
  return p;
}

double BudgetController::tokens_per_check(const DraftSetting& s) const {
  const std::vector<double> chain = options_.lookup ? reach(lookup_, options_.lookup_tokens) : std::vector<double>{};
  double tokens = 1;
  if (s.budget == 0) {
    if (s.lookup)
      for (double p : chain) tokens += p;
    return tokens;
  }
  const Rung& r = rungs_[size_t(rung_of(s))];
  const std::vector<double> model = reach(shapes_[shape_index(r.shape)], r.depth);
  for (double p : model) tokens += p;
  if (!s.lookup) return tokens;
  if (r.lookup_gain.known()) return tokens + r.lookup_gain.value();
  // Not measured on top of this budget yet: the lookup chain gains where it goes deeper than the
  // model draft, taken as independent: sum over d of P(chain reaches d) P(model does not).
  for (size_t d = 0; d < chain.size(); ++d) tokens += chain[d] * (1 - (d < model.size() ? model[d] : 0.0));
  return tokens;
}

BudgetController::Value BudgetController::value(const DraftSetting& s) const {
  Value out;
  const double lookup_rows = lookup_nodes_.known() ? lookup_nodes_.value() : double(options_.lookup_tokens);
  double rows = 1, draft = 0;
  out.tokens = 1;
  if (s.plain()) {
    out.known = verify_[1].known();
    draft = plain_draft_.value();
  } else if (s.budget == 0) {  // lookup alone
    out.known = lookup_.ran;
    out.tokens = tokens_per_check(s);
    rows = 1 + lookup_rows;
    draft = lookup_draft_.value();
  } else {
    const int32_t i = rung_of(s);
    const Rung& r = rungs_[size_t(i)];
    const Shape& sh = shapes_[shape_index(r.shape)];
    // Climb one rung at a time: deeper than the next rung after the deepest that ran is not
    // eligible yet (its estimate is all extrapolation, and a deep check is an expensive guess).
    const bool first = i == 0 || rungs_[size_t(i - 1)].shape != r.shape;
    if (!first && rungs_[size_t(i - 1)].depth > sh.deepest) return out;
    out.known = sh.ran && (!s.lookup || lookup_.ran);
    rows = 1 + r.budget + (s.lookup ? lookup_rows : 0.0);
    draft = draft_seconds(r);
    out.tokens = tokens_per_check(s);
  }
  out.seconds = draft + verify_seconds(rows);
  out.rate = out.seconds > 0 ? out.tokens / out.seconds : -1;
  return out;
}

double BudgetController::rate(const DraftSetting& s) const {
  const Value v = value(s);
  return v.known ? std::max(v.rate, 0.0) / load_ : 0.0;  // at the machine's current speed
}

DraftSetting BudgetController::best() const {
  DraftSetting best;
  double best_rate = -1;
  for (const DraftSetting& c : candidates_) {
    const Value v = value(c);
    if (v.known && v.rate > best_rate) {
      best_rate = v.rate;
      best = c;
    }
  }
  return best;
}

DraftSetting BudgetController::probe() {
  const DraftSetting b = best();
  auto family = [](const DraftSetting& s) { return s.budget == 0 ? (s.lookup ? 1 : 0) : 2 + shape_index(s.shape); };
  if (probes_++ % 2 == 0) {  // the next deeper budget of the best's shape
    const int32_t i = rung_of(b);
    if (i >= 0 && size_t(i) + 1 < rungs_.size() && rungs_[size_t(i) + 1].shape == b.shape) {
      return {b.shape, rungs_[size_t(i) + 1].budget, b.lookup};
    }
  }
  // The best of another family (plain, lookup, chain, tree), the families in turn, so a cost or
  // an acceptance that moved while unused (or one unlucky first measurement) is seen again.
  constexpr int kFamilies = 4;
  for (int step = 1; step <= kFamilies; ++step) {
    const int f = (probe_family_ + step) % kFamilies;
    if (f == family(b)) continue;
    DraftSetting pick = b;
    double pick_rate = 0;
    for (const DraftSetting& c : candidates_) {
      const Value v = value(c);
      if (family(c) == f && v.rate > pick_rate) {
        pick_rate = v.rate;
        pick = c;
      }
    }
    if (pick_rate > 0) {
      probe_family_ = f;
      return pick;
    }
  }
  return b;
}

DraftSetting BudgetController::next() {
  if (plain_checks_ < options_.warmup) return {};
  ++checks_;
  const DraftSetting b = best();
  if (!(b == last_best_)) {  // a new best: watch its neighbourhood closely again
    last_best_ = b;
    interval_ = options_.probe_every;
    next_probe_ = std::min(next_probe_, checks_ + interval_);
  }
  if (checks_ >= next_probe_) {
    // Probes grow rarer while the best holds (up to 4x), so a clear winner pays little for them.
    next_probe_ = checks_ + interval_;
    interval_ = std::min(interval_ * 2, int64_t(options_.probe_every) * 4);
    const DraftSetting p = probe();
    if (!(p == b)) return p;
  }
  // The best estimate, settings not run yet included (their acceptance from the per-depth
  // model, their cost from the fitted lines); on equal value the cheaper check.
  DraftSetting choice = b;
  Value chosen = value(b);
  for (const DraftSetting& c : candidates_) {
    const Value v = value(c);
    if (v.rate > chosen.rate || (v.rate == chosen.rate && v.rate > 0 && v.seconds < chosen.seconds)) {
      chosen = v;
      choice = c;
    }
  }
  return choice;
}

bool BudgetController::chooses_like(const BudgetController& o) const {
  const ControllerOptions &a = options_, &b = o.options_;
  if (a.chain != b.chain || a.tree != b.tree || a.lookup != b.lookup || a.lookup_tokens != b.lookup_tokens ||
      a.warmup != b.warmup || a.probe_every != b.probe_every || a.decay != b.decay) {
    return false;
  }
  // The candidates follow from the rungs and options_.lookup.
  if (rungs_.size() != o.rungs_.size()) return false;
  for (size_t i = 0; i < rungs_.size(); ++i) {
    const Rung &x = rungs_[i], &y = o.rungs_[i];
    if (x.shape != y.shape || x.budget != y.budget || x.depth != y.depth || x.draft_rows != y.draft_rows) return false;
  }
  return true;
}

void BudgetController::record(const CheckRecord& c) {
  ++recorded_;
  const DraftSetting& s = c.setting;
  const double d = options_.decay;
  BITSPLIT_CHECK(c.verify_rows >= 1 && c.verify_rows < int32_t(verify_.size()), "verify rows out of range");
  // The machine's speed drifts (other work, clocks), and a setting measured a while ago was
  // measured at another speed. Times are kept in units of a load factor that every verify pass
  // of a row count measured before updates (its time over the time kept for it), so settings
  // measured at different moments compare as if measured together.
  Mean& bin = verify_[size_t(c.verify_rows)];
  if (bin.known() && bin.value() > 0 && c.verify_seconds > 0) {
    // About ten checks: the load moves faster than the costs, but a single check's time varies
    // too (5-15 % between verify passes of the same rows on the development VM), and a factor that
    // chased it carried that noise into every time kept after it. In DeliversNearlyTheBestFixedSetting's
    // Qwen2.5-Coder-1.5B-like world with 15 % noise per check, 0.7 delivered 0.920 / 0.955 of the
    // best fixed setting over 32 / 128 checks, 0.9 0.937 / 0.973; without noise, the same.
    constexpr double kLoadDecay = 0.9;
    load_ = load_ * kLoadDecay + (c.verify_seconds / bin.value()) * (1 - kLoadDecay);
  } else if (c.verify_seconds > 0) {
    // A row count not measured before: more rows never cost less, so a time below what fewer rows
    // were kept at (or above what more rows were) says the machine's speed moved; the least move
    // that keeps the costs in order.
    double below = 0, above = INFINITY;
    for (int32_t r = 1; r < int32_t(verify_.size()); ++r) {
      if (!verify_[size_t(r)].known()) continue;
      if (r < c.verify_rows) below = std::max(below, verify_[size_t(r)].value());
      if (r > c.verify_rows) above = std::min(above, verify_[size_t(r)].value());
    }
    if (c.verify_seconds / load_ < below) load_ = c.verify_seconds / below;
    if (c.verify_seconds / load_ > above) load_ = c.verify_seconds / above;
  }
  const double verify_s = c.verify_seconds / load_, draft_s = c.draft_seconds / load_;
  bin.add(verify_s, d);
  verify_fit_.add(1, c.verify_rows, verify_s, d);
  if (s.plain()) ++plain_checks_;
  // Per position: depths 1..accepted were accepted and the next one (if drafted) was not.
  // Acceptance changes with the text more slowly than timings with the machine: a longer memory.
  constexpr double kAcceptanceDecay = 0.95;
  auto learn = [&](Shape& into, int32_t accepted, int32_t depth) {
    accepted = std::min(accepted, depth);
    into.ran = true;
    into.deepest = std::max(into.deepest, depth);
    for (int32_t k = 1; k <= std::min(accepted + 1, depth); ++k) {
      into.accepted[std::min(k, kDepths)].add(k <= accepted ? 1.0 : 0.0, kAcceptanceDecay);
    }
  };
  if (options_.lookup && c.lookup_proposed >= 0) {
    // A chain shorter than the limit (or none) counts as rejected where it ends: the gain is per
    // check. A censored count says nothing past what was seen.
    const int32_t seen = c.lookup_censored ? c.lookup_accepted : options_.lookup_tokens;
    learn(lookup_, c.lookup_accepted, std::min(seen, options_.lookup_tokens));
    lookup_nodes_.add(c.lookup_proposed, d);
  }
  if (s.budget == 0) {
    (s.lookup ? lookup_draft_ : plain_draft_).add(draft_s, d);
    return;
  }
  const int32_t i = rung_of(s);
  Rung& ran = rungs_[size_t(i)];
  Shape& sh = shapes_[shape_index(s.shape)];
  if (c.model_depth == ran.depth) {  // (a budget cut short at the end of the text drafts less)
    ran.draft_seconds.add(draft_s, d);
    draft_fit_.add(ran.depth, ran.draft_rows, draft_s, d);
  }
  const int32_t accepted = std::min(c.model_accepted, c.model_depth);
  learn(sh, accepted, c.model_depth);
  if (s.shape == DraftShape::kTree && options_.chain && c.chain_depth > 0) learn(shapes_[0], c.chain_accepted, c.chain_depth);
  // What the lookup chain added on top of every budget of this shape no deeper than the check.
  if (s.lookup) {
    for (Rung& r : rungs_) {
      if (r.shape != s.shape || r.depth > c.model_depth) continue;
      const int32_t model = std::min(accepted, r.depth);
      r.lookup_gain.add(std::max(model, c.lookup_accepted) - model, d);
    }
  }
}

}  // namespace bitsplit::spec
