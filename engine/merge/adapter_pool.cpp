// The K-Merge adapter pool (adapter_pool.h).
#include "bitsplit/adapter_pool.h"

#include <cmath>
#include <cstdio>

#include "bitsplit/merge.h"
#include "bitsplit/quality.h"

namespace bitsplit {
namespace {

double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return s;
}

// The low-rank factors U_r·diag(σ_r), V_rᵀ of an SVD.
LowRankDelta factors_of(const ThinSvd& svd, int64_t rank) {
  LowRankDelta d;
  d.out = svd.rows;
  d.in = svd.cols;
  d.rank = std::min(rank, svd.k);
  d.up.resize(size_t(d.out * d.rank));
  d.down.resize(size_t(d.rank * d.in));
  for (int64_t r = 0; r < d.out; ++r)
    for (int64_t i = 0; i < d.rank; ++i) d.up[size_t(r * d.rank + i)] = svd.u[size_t(r * svd.k + i)] * svd.s[size_t(i)];
  for (int64_t i = 0; i < d.rank; ++i)
    for (int64_t c = 0; c < d.in; ++c) d.down[size_t(i * d.in + c)] = svd.vt[size_t(i * d.in + c)];
  return d;
}

// ⟨X·Y, Z·W⟩_F for two low-rank products (X: out x r1, Y: r1 x in; Z: out x r2, W: r2 x in):
// Σ_ij (XᵀZ)_ij (Y·Wᵀ)_ij, without forming either product.
double low_rank_dot(const LowRankDelta& a, const LowRankDelta& b) {
  const int64_t r1 = a.rank, r2 = b.rank;
  double s = 0;
  for (int64_t i = 0; i < r1; ++i)
    for (int64_t j = 0; j < r2; ++j) {
      double uu = 0, vv = 0;
      for (int64_t o = 0; o < a.out; ++o) uu += double(a.up[size_t(o * r1 + i)]) * b.up[size_t(o * r2 + j)];
      for (int64_t c = 0; c < a.in; ++c) vv += double(a.down[size_t(i * a.in + c)]) * b.down[size_t(j * a.in + c)];
      s += uu * vv;
    }
  return s;
}

}  // namespace

std::vector<float> opcm_project(const std::vector<float>& delta, const ThinSvd& tau, double alpha) {
  const int64_t m = tau.rows, n = tau.cols, k = tau.k;
  double total = 0;
  for (float s : tau.s) total += s;
  // r: the fewest leading singular values whose sum exceeds alpha of the total (none for τ = 0).
  int64_t r = 0;
  for (double run = 0; total > 0 && r < k && run / total <= alpha; ++r) run += tau.s[size_t(r)];
  // The diagonal beyond r: only directions τ has (σ above the f32 SVD's noise, 1e-5 of σ₁); the
  // thin SVD's completions of a rank-deficient τ are arbitrary, and Δ's parts along them are not τ's.
  int64_t nonzero = 0;
  while (nonzero < k && tau.s[size_t(nonzero)] > 1e-5f * tau.s[0]) ++nonzero;
  // X = Uᵀ·Δ for the rows of U that take part: all k (the diagonal needs every u_i).
  std::vector<double> x(size_t(k * n), 0.0);  // k x n
  for (int64_t row = 0; row < m; ++row) {
    const float* d = delta.data() + row * n;
    for (int64_t i = 0; i < k; ++i) {
      const double u = tau.u[size_t(row * k + i)];
      if (u == 0.0) continue;
      double* xi = x.data() + i * n;
      for (int64_t c = 0; c < n; ++c) xi[c] += u * d[c];
    }
  }
  // P[i][j] = X_i · v_j; the removed entries: i, j < r, and i == j >= r.
  std::vector<double> removed(size_t(k * k), 0.0);
  auto p = [&](int64_t i, int64_t j) {
    double s = 0;
    const double* xi = x.data() + i * n;
    const float* vj = tau.vt.data() + j * n;
    for (int64_t c = 0; c < n; ++c) s += xi[c] * vj[c];
    return s;
  };
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < r; ++j) removed[size_t(i * k + j)] = p(i, j);
  for (int64_t i = r; i < nonzero; ++i) removed[size_t(i * k + i)] = p(i, i);
  // out = Δ − U·removed·Vᵀ
  std::vector<double> rv(size_t(k * n), 0.0);  // removed·Vᵀ
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const double e = removed[size_t(i * k + j)];
      if (e == 0.0) continue;
      const float* vj = tau.vt.data() + j * n;
      double* ri = rv.data() + i * n;
      for (int64_t c = 0; c < n; ++c) ri[c] += e * vj[c];
    }
  std::vector<float> out = delta;
  for (int64_t row = 0; row < m; ++row) {
    float* o = out.data() + row * n;
    for (int64_t i = 0; i < k; ++i) {
      const double u = tau.u[size_t(row * k + i)];
      if (u == 0.0) continue;
      const double* ri = rv.data() + i * n;
      for (int64_t c = 0; c < n; ++c) o[c] = float(double(o[c]) - u * ri[c]);
    }
  }
  return out;
}

std::vector<float> LowRankDelta::dense() const {
  std::vector<float> d(size_t(out * in), 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    float* row = d.data() + o * in;
    for (int64_t k = 0; k < rank; ++k) {
      const float u = up[size_t(o * rank + k)];
      const float* v = down.data() + k * in;
      for (int64_t i = 0; i < in; ++i) row[i] += u * v[i];
    }
  }
  return d;
}

uint64_t PoolAdapter::bytes() const {
  uint64_t b = 0;
  for (const auto& [w, d] : weights) b += 4 * uint64_t(d.rank) * uint64_t(d.out + d.in);
  return b;
}

Result<std::shared_ptr<const Variant>> PoolAdapter::variant(const Model& base) const {
  std::map<std::string, VariantLora> lora;
  for (const auto& [w, d] : weights) lora[w] = VariantLora{d.out, d.in, d.rank, 1.0f, d.up, d.down};
  return Variant::make(base, name, {}, {}, std::move(lora));
}

Result<PoolAdapter> read_pool_adapter(const LoraFile& lora, float scale, std::string name) {
  PoolAdapter a;
  a.name = std::move(name);
  for (const auto& [w, t] : lora.tensors) {
    BITSPLIT_ASSIGN_OR_RETURN(LoraFactors f, read_lora_factors(lora, t));
    const float s = lora.effective_scale(t, scale);
    if (!std::isfinite(s)) return Status::error(lora.path + ": the scale of '" + w + "' is not finite");
    for (float& u : f.up) {
      u *= s;
      if (!std::isfinite(u)) return Status::error(lora.path + ": '" + w + "' overflows at scale " + std::to_string(scale));
    }
    a.weights[w] = LowRankDelta{t.out, t.in, t.rank, std::move(f.up), std::move(f.down)};
  }
  return a;
}

double task_vector_cosine(const PoolAdapter& a, const PoolAdapter& b) {
  double dot = 0, na = 0, nb = 0;
  for (const auto& [w, d] : a.weights) {
    na += low_rank_dot(d, d);
    auto it = b.weights.find(w);
    if (it != b.weights.end() && it->second.out == d.out && it->second.in == d.in) dot += low_rank_dot(d, it->second);
  }
  for (const auto& [w, d] : b.weights) nb += low_rank_dot(d, d);
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0.0;
}

std::string PoolDecision::describe() const {
  char line[512];
  switch (kind) {
    case Kind::kAdmitted:
      std::snprintf(line, sizeof line, "pool: '%s' admitted as it is (%.2f MiB used)", name.c_str(), double(used_bytes) / (1 << 20));
      break;
    case Kind::kMerged:
      std::snprintf(line, sizeof line,
                    "pool: '%s' merged into '%s' (cosine %.3f; worst task KL %.4f on '%s'; %.2f MiB used)", name.c_str(),
                    member.c_str(), cosine, worst_kl, worst_task.c_str(), double(used_bytes) / (1 << 20));
      break;
    case Kind::kRefused:
      if (over_budget) {
        std::snprintf(line, sizeof line,
                      "pool: '%s' refused: merged into '%s' (cosine %.3f) it would outgrow the budget (%.2f MiB used)",
                      name.c_str(), member.c_str(), cosine, double(used_bytes) / (1 << 20));
        break;
      }
      std::snprintf(line, sizeof line,
                    "pool: '%s' refused: the budget is full and merging it into the most similar member '%s' (cosine "
                    "%.3f) would cost task '%s' a KL of %.4f (%.2f MiB used)",
                    name.c_str(), member.c_str(), cosine, worst_task.c_str(), worst_kl, double(used_bytes) / (1 << 20));
      break;
  }
  return line;
}

AdapterPool::AdapterPool(const Model& base, AdapterPoolOptions options) : base_(base), options_(options) {}

std::map<std::string, std::string> AdapterPool::served() const {
  std::map<std::string, std::string> s;
  for (const Member& m : members_)
    for (const std::string& n : m.names) s[n] = m.adapter.name;
  return s;
}

const PoolAdapter* AdapterPool::adapter_of(const std::string& name) const {
  for (const Member& m : members_)
    for (const std::string& n : m.names)
      if (n == name) return &m.adapter;
  return nullptr;
}

Result<AdapterPool::Member> AdapterPool::opcm_merge(const Member& m, const PoolAdapter& a) const {
  Member r;
  r.names = m.names;
  r.names.push_back(a.name);
  r.adapter.name = m.adapter.name + "+" + a.name;
  std::map<std::string, const LowRankDelta*> all;
  for (const auto& [w, d] : m.adapter.weights) all[w] = &d;
  for (const auto& [w, d] : a.weights) all.emplace(w, &d);
  for (const auto& [w, shape] : all) {
    auto mi = m.adapter.weights.find(w);
    auto ai = a.weights.find(w);
    WeightStats st;
    if (auto si = m.stats.find(w); si != m.stats.end()) st = si->second;
    if (ai == a.weights.end()) {  // the new task leaves this weight alone: the member's merge stays
      r.adapter.weights[w] = mi->second;
      r.stats[w] = st;
      continue;
    }
    const std::vector<float> delta = ai->second.dense();
    const double delta_norm = std::sqrt(norm2(delta));
    std::vector<float> sum;  // S: the unscaled sum of the projected task vectors
    int64_t rank = ai->second.rank;
    if (mi == m.adapter.weights.end()) {
      sum = delta;
    } else {
      const std::vector<float> tau = mi->second.dense();
      BITSPLIT_ASSIGN_OR_RETURN(ThinSvd svd, thin_svd(tau, shape->out, shape->in));
      sum = opcm_project(delta, svd, options_.alpha);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = float(st.lambda * tau[i] + double(sum[i]));
      rank = std::max(rank, mi->second.rank);
    }
    st.norm_sum += delta_norm;
    st.count += 1;
    const double mean_norm = st.norm_sum / double(st.count), sum_norm = std::sqrt(norm2(sum));
    st.lambda = mean_norm > 0 && sum_norm > 0 ? sum_norm / mean_norm : 1.0;
    for (float& v : sum) v = float(double(v) / st.lambda);
    BITSPLIT_ASSIGN_OR_RETURN(ThinSvd merged, thin_svd(sum, shape->out, shape->in));
    r.adapter.weights[w] = factors_of(merged, rank);
    r.stats[w] = st;
  }
  return r;
}

Result<double> AdapterPool::task_kl(const Task& task, const Variant& merged) const {
  BITSPLIT_ASSIGN_OR_RETURN(PoolAdapter ref_adapter, task.reference());
  BITSPLIT_ASSIGN_OR_RETURN(std::shared_ptr<const Variant> ref, ref_adapter.variant(base_));
  const ModelConfig& c = base_.config();
  const int64_t per_window = std::max<int64_t>(1, options_.ctx - 1);
  double kl_sum = 0;
  int64_t n = 0;
  std::vector<double> lp, lq;
  for (size_t at = 0; at + 1 < task.calibration.size() && n < options_.max_tokens; at += size_t(per_window)) {
    std::vector<int32_t> window;
    if (options_.bos >= 0) window.push_back(options_.bos);
    const size_t take = std::min(task.calibration.size() - at, size_t(per_window) + (options_.bos >= 0 ? 0 : 1));
    window.insert(window.end(), task.calibration.begin() + long(at), task.calibration.begin() + long(at + take));
    if (window.size() < 2) break;
    auto run = [&](const Variant* v) -> Result<std::vector<float>> {
      KvCache cache(c, int64_t(window.size()));
      return forward_pass(base_, cache, Batch::causal(window, 0, true), nullptr, Pass::kDefault, v);
    };
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> p, run(ref.get()));
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> q, run(&merged));
    // Positions 0 .. size-2 predict the next token; the last one predicts past the window.
    for (size_t pos = 0; pos + 1 < window.size() && n < options_.max_tokens; ++pos, ++n) {
      log_softmax(p.data() + pos * size_t(c.n_vocab), c.n_vocab, lp);
      log_softmax(q.data() + pos * size_t(c.n_vocab), c.n_vocab, lq);
      double kl = 0;
      for (int64_t t = 0; t < c.n_vocab; ++t) kl += std::exp(lp[size_t(t)]) * (lp[size_t(t)] - lq[size_t(t)]);
      kl_sum += kl;
    }
  }
  if (n == 0) return Status::error("no calibration predictions");
  return kl_sum / double(n);
}

Result<PoolDecision> AdapterPool::request(PoolAdapter adapter, std::vector<int32_t> calibration,
                                          std::function<Result<PoolAdapter>()> reference) {
  PoolDecision d;
  d.name = adapter.name;
  if (tasks_.contains(adapter.name)) return Status::error("adapter '" + adapter.name + "' is already in the pool");
  if (calibration.size() < 2) {
    return Status::error("adapter '" + adapter.name + "' needs a calibration text of at least 2 tokens");
  }
  const uint64_t size = adapter.bytes();
  if (size > options_.budget_bytes) {
    return Status::error("adapter '" + adapter.name + "' takes " + std::to_string(size) +
                         " bytes, more than the whole storage budget (" + std::to_string(options_.budget_bytes) +
                         " bytes): a budget smaller than one adapter");
  }
  Task task{std::move(calibration), std::move(reference)};
  if (used_ + size <= options_.budget_bytes) {
    Member m;
    m.names = {adapter.name};
    for (const auto& [w, ld] : adapter.weights) m.stats[w] = WeightStats{1.0, std::sqrt(std::max(0.0, low_rank_dot(ld, ld))), 1};
    m.adapter = std::move(adapter);
    used_ += size;
    tasks_[d.name] = std::move(task);
    members_.push_back(std::move(m));
    d.kind = PoolDecision::Kind::kAdmitted;
    d.used_bytes = used_;
    return d;
  }
  size_t best = 0;
  d.cosine = -2;
  for (size_t i = 0; i < members_.size(); ++i) {
    const double c = task_vector_cosine(adapter, members_[i].adapter);
    if (c > d.cosine) {
      d.cosine = c;
      best = i;
    }
  }
  d.member = members_[best].adapter.name;
  BITSPLIT_ASSIGN_OR_RETURN(Member merged, opcm_merge(members_[best], adapter));
  const uint64_t new_used = used_ - members_[best].adapter.bytes() + merged.adapter.bytes();
  BITSPLIT_ASSIGN_OR_RETURN(std::shared_ptr<const Variant> v, merged.adapter.variant(base_));
  // Every task the merge would serve, the new one included, must stay within the threshold.
  tasks_[d.name] = task;
  for (const std::string& n : merged.names) {
    auto kl = task_kl(tasks_.at(n), *v);
    if (!kl) {
      tasks_.erase(d.name);
      return kl.status().with_context("adapter '" + n + "'");
    }
    const double kl_value = std::isfinite(*kl) ? *kl : INFINITY;  // a NaN never passes
    if (kl_value >= d.worst_kl) {
      d.worst_kl = kl_value;
      d.worst_task = n;
    }
  }
  if (d.worst_kl > options_.kl_threshold || new_used > options_.budget_bytes) {
    d.over_budget = d.worst_kl <= options_.kl_threshold;
    tasks_.erase(d.name);
    d.kind = PoolDecision::Kind::kRefused;
    d.used_bytes = used_;
    return d;
  }
  used_ = new_used;
  members_[best] = std::move(merged);
  d.kind = PoolDecision::Kind::kMerged;
  d.used_bytes = used_;
  return d;
}

}  // namespace bitsplit
