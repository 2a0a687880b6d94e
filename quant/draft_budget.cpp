// Draft precision under a bits-per-weight budget: per-tensor error measurement and the greedy
// allocation of 2/3/4-bit drafts (quant.h, "draft precision under a budget").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bitsplit/quant.h"

namespace bitsplit::quant {

double draft_class_weight(const std::string& base, int64_t n_layers) {
  if (base == "output") return 2.5 * double(std::max<int64_t>(1, n_layers));
  const auto ends_with = [&](const char* s) {
    const std::string_view n = base, t = s;
    return n.size() >= t.size() && n.substr(n.size() - t.size()) == t;
  };
  // The first block: its 7 projections at 2 bits cost ~2x an average block's share.
  const double layer = base.starts_with("blk.0.") ? 2.0 : 1.0;
  if (ends_with(".attn_v") || ends_with(".ffn_down")) return 3.5 * layer;
  if (ends_with(".ffn_gate") || ends_with(".ffn_up")) return 1.25 * layer;
  return layer;
}

int64_t draft_plane_bytes(int64_t rows, int64_t cols, int group, int bits) {
  return rows * (code_row_bytes(cols, group, bits) + groups_per_row(cols, group) * 4);
}

void draft_row_errors(const float* w, const float* importance, int64_t in, const SplitParams& p,
                      double err[kMaxDraftBits - kMinDraftBits + 1], double* signal) {
  const int64_t groups = groups_per_row(in, p.group);
  std::vector<uint8_t> codes(static_cast<size_t>(code_row_bytes(in, p.group, kMaxDraftBits)));
  std::vector<uint16_t> scales(static_cast<size_t>(groups)), offsets(static_cast<size_t>(groups));
  std::vector<float> d(static_cast<size_t>(in));
  for (int64_t j = 0; j < in; ++j) {
    const double imp = importance ? std::max(double(importance[j]), 0.0) : 1.0;
    *signal += imp * double(w[j]) * double(w[j]);
  }
  for (int bits = kMinDraftBits; bits <= kMaxDraftBits; ++bits) {
    SplitParams q = p;
    q.draft_bits = bits;
    q.residual_bits = 0;
    split_row(w, importance, in, q, {codes.data(), scales.data(), offsets.data()}, {nullptr, nullptr});
    dequantize_draft_row_ref(codes.data(), scales.data(), offsets.data(), in, q.group, bits, d.data());
    double e = 0.0;
    for (int64_t j = 0; j < in; ++j) {
      const double imp = importance ? std::max(double(importance[j]), 0.0) : 1.0;
      const double diff = double(w[j]) - double(d[size_t(j)]);
      e += imp * diff * diff;
    }
    err[bits - kMinDraftBits] += e;
  }
}

Result<DraftAllocation> allocate_draft_bits(const std::vector<DraftTensorErrors>& tensors, int group,
                                            double budget_bpw) {
  if (!(budget_bpw > 0.0) || !std::isfinite(budget_bpw)) return Status::error("the draft budget must be a positive number of bits per weight");
  double weights = 0.0;
  int64_t bytes = 0, max_bytes = 0;
  for (const auto& t : tensors) {
    weights += double(t.rows) * double(t.cols);
    bytes += draft_plane_bytes(t.rows, t.cols, group, kMinDraftBits);
    max_bytes += draft_plane_bytes(t.rows, t.cols, group, kMaxDraftBits);
  }
  DraftAllocation a;
  if (tensors.empty()) return a;
  const double budget_bytes = budget_bpw * weights / 8.0;
  const double min_bpw = 8.0 * double(bytes) / weights;
  // Round-off in the caller's arithmetic (a budget printed with 2 decimals) must not reject
  // exactly the all-2-bit size.
  if (budget_bytes + 1e-9 * weights < double(bytes)) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "a draft budget of %.3g bits per weight is below the smallest draft (%.3f: 2 bits, group %d)",
                  budget_bpw, min_bpw, group);
    return Status::error(msg);
  }
  std::vector<int> bits(tensors.size(), kMinDraftBits);
  if (budget_bytes >= double(max_bytes)) {
    std::fill(bits.begin(), bits.end(), kMaxDraftBits);
    bytes = max_bytes;
  } else {
    // Each round upgrades the tensor (by one or two bits) with the largest error drop per byte
    // among the upgrades that still fit; ties go to the earlier tensor, so the result depends
    // only on the inputs.
    for (;;) {
      double best_gain = 0.0;
      size_t best = tensors.size();
      int best_to = 0;
      int64_t best_cost = 0;
      for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        const int from = bits[i];
        for (int to = from + 1; to <= kMaxDraftBits; ++to) {
          const int64_t cost = draft_plane_bytes(t.rows, t.cols, group, to) - draft_plane_bytes(t.rows, t.cols, group, from);
          if (double(bytes + cost) > budget_bytes) continue;
          const double gain = (t.error[from - kMinDraftBits] - t.error[to - kMinDraftBits]) / double(cost);
          if (gain > best_gain) {
            best_gain = gain;
            best = i;
            best_to = to;
            best_cost = cost;
          }
        }
      }
      if (best == tensors.size()) break;
      bits[best] = best_to;
      bytes += best_cost;
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    a.bits[tensors[i].name] = bits[i];
    a.weighted_error += tensors[i].error[bits[i] - kMinDraftBits];
  }
  a.bits_per_weight = 8.0 * double(bytes) / weights;
  return a;
}

}  // namespace bitsplit::quant
