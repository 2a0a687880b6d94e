// Which draft planes a GPU backend keeps in VRAM under a byte budget: planes in
// layer order (the output head last) while they fit; the first that does not fit and every
// one after it stay on the CPU backend. The same rule runs in `bitsplit info` (from the
// file's tensor sizes, no GPU needed) and in the CUDA backend at load time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

struct DraftPlaneSize {
  std::string weight;  // "blk.3.ffn_up.weight", "output.weight"
  uint64_t bytes = 0;  // codes + fp16 scales + fp16 offsets
};

// The draft planes of a converted file of n_layers layers in placement order: blk.0's
// projections, blk.1's, …, then the output head. `kinds`: each layer's projection kinds
// (bitsplit::projection_kinds; empty: the seven of a dense layer). An error for a file that is
// not a converted bit-split model.
Result<std::vector<DraftPlaneSize>> draft_plane_sizes(const WeightSource& converted, int64_t n_layers,
                                                      const std::vector<std::string>& kinds = {});
// The projection names of layer-ordered placement for a model with n_layers layers whose layers
// have these projection kinds (empty: a dense layer's seven).
std::vector<std::string> placement_order(int64_t n_layers, const std::vector<std::string>& kinds = {});

struct VramPlan {
  uint64_t budget = 0;
  uint64_t device_bytes = 0, host_bytes = 0;
  size_t device_planes = 0, host_planes = 0;
  std::string first_on_host;  // the first plane that did not fit ("" when all fit)
  std::string summary() const;  // one line for logs and `info`
};
VramPlan plan_vram(const std::vector<DraftPlaneSize>& planes, uint64_t budget);

// VRAM the whole draft on the device (device_draft.h) needs beside its planes: the f32 token
// embedding and norms, the f32 K/V cache of n_slots slots, and scratch for batches of up to
// max_rows rows (activations, int8 copies, attention scores, logits, staging).
struct DeviceDraftBytes {
  uint64_t embedding = 0, kv_cache = 0, scratch = 0;
  uint64_t total() const { return embedding + kv_cache + scratch; }
  std::string summary() const;  // "2.00 GiB (embedding ..., K/V cache ..., scratch ...)"
};
// A mixture of experts (ModelConfig's fields of the same names) adds each layer's f32 router
// (and shared-expert gate) and the routing scratch, and its FFN scratch is as wide as an expert
// or the shared expert (n_ff is then unused).
struct DeviceDraftExperts {
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
};
DeviceDraftBytes device_draft_bytes(int64_t n_layers, int64_t n_embd, int64_t n_heads, int64_t n_kv_heads,
                                    int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t n_slots, int64_t max_rows,
                                    const DeviceDraftExperts& experts = {});

// "123456", "512M", "24G", "1.5GiB", "800MB" (K/M/G/T are powers of 1024). Errors name the text.
Result<uint64_t> parse_byte_size(const std::string& text);
std::string format_bytes(uint64_t bytes);

// The default budget on `device`: its free memory minus a margin of max(1 GiB, 10 %).
Result<uint64_t> default_vram_budget(int device);

}  // namespace bitsplit
