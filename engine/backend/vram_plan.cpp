// VRAM placement of draft planes: sizes from a converted file, the layer-ordered plan, and
// byte-size parsing for --vram-budget.
#include "bitsplit/vram_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bitsplit/gpu.h"
#include "bitsplit/split_format.h"

namespace bitsplit {

std::vector<std::string> placement_order(int64_t n_layers, const std::vector<std::string>& kinds) {
  static const std::vector<std::string> kDense = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  std::vector<std::string> names;
  for (int64_t l = 0; l < n_layers; ++l) {
    for (const std::string& w : kinds.empty() ? kDense : kinds) names.push_back("blk." + std::to_string(l) + "." + w + ".weight");
  }
  names.push_back("output.weight");
  return names;
}

Result<std::vector<DraftPlaneSize>> draft_plane_sizes(const WeightSource& w, int64_t n_layers,
                                                      const std::vector<std::string>& kinds) {
  BITSPLIT_ASSIGN_OR_RETURN(auto split, read_split_format(w.metadata()));
  if (!split) return Status::error(w.path() + ": not a bit-split model, so it has no draft planes to place");
  std::vector<DraftPlaneSize> sizes;
  for (const std::string& weight : placement_order(n_layers, kinds)) {
    const SplitTensorNames n = split_tensor_names(split_base_name(weight));
    DraftPlaneSize s{weight, 0};
    for (const std::string* t : {&n.draft_codes, &n.draft_scales, &n.draft_offsets}) {
      const gguf::TensorInfo* info = w.find_tensor(*t);
      if (!info) return Status::error(w.path() + ": tensor '" + *t + "' is missing");
      s.bytes += info->nbytes;
    }
    sizes.push_back(std::move(s));
  }
  return sizes;
}

VramPlan plan_vram(const std::vector<DraftPlaneSize>& planes, uint64_t budget) {
  VramPlan p;
  p.budget = budget;
  bool full = false;
  for (const auto& s : planes) {
    if (!full && p.device_bytes + s.bytes <= budget) {
      p.device_bytes += s.bytes;
      ++p.device_planes;
    } else {
      if (!full) p.first_on_host = s.weight;
      full = true;
      p.host_bytes += s.bytes;
      ++p.host_planes;
    }
  }
  return p;
}

std::string VramPlan::summary() const {
  std::string s = "VRAM budget " + format_bytes(budget) + ": " + std::to_string(device_planes) + " of " +
                  std::to_string(device_planes + host_planes) + " draft planes in VRAM (" + format_bytes(device_bytes) + ")";
  if (host_planes == 0) return s + ", all of the draft";
  return s + "; from " + first_on_host + " on, " + std::to_string(host_planes) + " planes (" + format_bytes(host_bytes) +
         ") draft on the CPU (a budget of " + format_bytes(device_bytes + host_bytes) + " holds them all)";
}

DeviceDraftBytes device_draft_bytes(int64_t n_layers, int64_t n_embd, int64_t n_heads, int64_t n_kv_heads,
                                    int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_slots, int64_t max_rows,
                                    const DeviceDraftExperts& experts) {
  if (experts.n_expert > 0) n_ff = std::max(experts.n_ff_exp, experts.n_ff_shexp);
  const uint64_t q = uint64_t(n_heads * head_dim), kv = uint64_t(n_kv_heads * head_dim), r = uint64_t(max_rows);
  const uint64_t widest = std::max({uint64_t(n_embd), q, uint64_t(n_ff)});
  DeviceDraftBytes b;
  b.embedding = 4 * (uint64_t(n_vocab) * uint64_t(n_embd) + uint64_t(n_layers) * 2 * uint64_t(n_embd) + uint64_t(n_embd));
  b.kv_cache = 8 * uint64_t(n_layers) * uint64_t(n_slots) * kv;
  // x, h, proj (n_embd); q, attn; k, v; gate, up; logits; scores; int8 activations + scales;
  // the staged batch in (3 ints + mask per row) and top-k out.
  b.scratch = 4 * r * (3 * uint64_t(n_embd) + 2 * q + 2 * kv + 2 * uint64_t(n_ff) + uint64_t(n_vocab) +
                       uint64_t(n_heads) * uint64_t(n_slots)) +
              r * widest * 2 + 2 * r * (12 + uint64_t(n_slots)) + 2 * r * 32 * 8;
  if (experts.n_expert > 0) {  // routers (+ shared-expert gates); router logits, xe, ye, routed rows
    b.embedding += 4 * uint64_t(n_layers) * uint64_t(n_embd) * (uint64_t(experts.n_expert) + (experts.n_ff_shexp > 0 ? 1 : 0));
    b.scratch += 4 * r * (uint64_t(experts.n_expert) + 2 * uint64_t(n_embd) + 2 * uint64_t(experts.n_expert_used));
  }
  return b;
}

std::string DeviceDraftBytes::summary() const {
  return format_bytes(total()) + " (embedding and norms " + format_bytes(embedding) + ", K/V cache " +
         format_bytes(kv_cache) + ", scratch " + format_bytes(scratch) + ")";
}

Result<uint64_t> parse_byte_size(const std::string& text) {
  auto bad = [&] {
    return Status::error("'" + text + "' is not a byte size (examples: 1073741824, 512M, 24G, 1.5GiB)");
  };
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return bad();
  }
  if (!(v >= 0) || !std::isfinite(v)) return bad();
  std::string unit = text.substr(pos);
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else {
    const std::string prefixes = "KMGT";
    const size_t k = prefixes.find(unit[0]);
    if (k == std::string::npos) return bad();
    const std::string rest = unit.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "IB")) return bad();
    mult = std::pow(1024.0, double(k + 1));
  }
  // At most 2^63 bytes: every size format_bytes prints (two decimals, rounded) of a value in
  // range stays in range, so a printed size always parses again.
  const double bytes = v * mult;
  if (bytes > 9223372036854775808.0) return bad();
  return uint64_t(bytes);
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double b = double(bytes);
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

Result<uint64_t> default_vram_budget(int device) {
  BITSPLIT_ASSIGN_OR_RETURN(uint64_t free, gpu::free_memory(device));
  const uint64_t margin = std::max<uint64_t>(uint64_t(1) << 30, free / 10);
  return free > margin ? free - margin : 0;
}

}  // namespace bitsplit
