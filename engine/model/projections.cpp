// The projections of a layer (dense or mixture of experts) and LayerWeights' lookup by kind.
#include <charconv>

#include "bitsplit/model.h"

namespace bitsplit {

std::vector<ProjectionSlot> layer_projections(const ModelConfig& c) {
  std::vector<ProjectionSlot> p = {{"attn_q", c.q_dim(), c.n_embd},
                                   {"attn_k", c.kv_dim(), c.n_embd},
                                   {"attn_v", c.kv_dim(), c.n_embd},
                                   {"attn_output", c.n_embd, c.q_dim()}};
  if (!c.is_moe()) {
    p.insert(p.end(), {{"ffn_gate", c.n_ff, c.n_embd}, {"ffn_up", c.n_ff, c.n_embd}, {"ffn_down", c.n_embd, c.n_ff}});
    return p;
  }
  for (int64_t e = 0; e < c.n_expert; ++e) {
    std::string n(1, '.');  // (not "." + ...: GCC 12's -Wrestrict misfires on that)
    n += std::to_string(e);
    p.insert(p.end(), {{"ffn_gate" + n, c.n_ff_exp, c.n_embd},
                       {"ffn_up" + n, c.n_ff_exp, c.n_embd},
                       {"ffn_down" + n, c.n_embd, c.n_ff_exp}});
  }
  if (c.n_ff_shexp > 0) {
    p.insert(p.end(), {{"ffn_gate_shexp", c.n_ff_shexp, c.n_embd},
                       {"ffn_up_shexp", c.n_ff_shexp, c.n_embd},
                       {"ffn_down_shexp", c.n_embd, c.n_ff_shexp}});
  }
  return p;
}

std::vector<std::string> projection_kinds(const ModelConfig& c) {
  std::vector<std::string> kinds;
  for (auto& s : layer_projections(c)) kinds.push_back(std::move(s.kind));
  return kinds;
}

std::vector<float>& LayerWeights::projection(std::string_view kind) {
  if (kind == "attn_q") return wq;
  if (kind == "attn_k") return wk;
  if (kind == "attn_v") return wv;
  if (kind == "attn_output") return wo;
  if (kind == "ffn_gate") return w_gate;
  if (kind == "ffn_up") return w_up;
  if (kind == "ffn_down") return w_down;
  if (kind == "ffn_gate_shexp") return w_gate_shexp;
  if (kind == "ffn_up_shexp") return w_up_shexp;
  if (kind == "ffn_down_shexp") return w_down_shexp;
  // "ffn_gate.<expert>" and the like.
  const size_t dot = kind.find('.');
  BITSPLIT_CHECK(dot != std::string_view::npos, "no projection kind " + std::string(kind));
  size_t e = 0;
  const auto digits = kind.substr(dot + 1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), e);
  BITSPLIT_CHECK(ec == std::errc() && end == digits.data() + digits.size() && e < experts.size(),
                 "no projection kind " + std::string(kind));
  ExpertWeights& x = experts[e];
  const auto base = kind.substr(0, dot);
  if (base == "ffn_gate") return x.w_gate;
  if (base == "ffn_up") return x.w_up;
  BITSPLIT_CHECK(base == "ffn_down", "no projection kind " + std::string(kind));
  return x.w_down;
}

const std::vector<float>& LayerWeights::projection(std::string_view kind) const {
  return const_cast<LayerWeights*>(this)->projection(kind);
}

}  // namespace bitsplit
