// Speculative decoding: the draft model proposes a token tree, the target verifies all of
// it in one batched pass with a tree mask, and the accepted path plus one token of the
// target's own is committed. Greedy output equals plain greedy decoding of the target token
// for token; sampled output has exactly the target's distribution.
#pragma once

#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bitsplit/device_draft.h"
#include "bitsplit/generate.h"
#include "bitsplit/spec.h"

namespace bitsplit {
class PassBatcher;
}

namespace bitsplit {

struct SpeculativeOptions {
  spec::DraftPolicy policy;
  // Choose each check's setting with spec::BudgetController: plain decoding (no draft) or
  // a budget of policy.shape (with auto_shape: of a chain or a tree), and, with lookup on, whether
  // the lookup chain joins; the one that maximises measured tokens/s. Greedy output is the same
  // whatever it picks and sampled output keeps its distribution, but sampled output then depends
  // on timing, so fix the budget for reproducible sampling.
  bool auto_budget = false;
  bool auto_shape = false;
  // The online controller's schedule (warm-up checks, probing); its shapes and lookup still
  // follow the options here. Default: ControllerOptions{}. Tests set warmup 1 and probe_every 2
  // to make it try draft settings from the second check.
  std::optional<spec::ControllerOptions> controller_schedule;
  // With auto_budget: in/out, what earlier generations on this model taught the controller. A
  // controller held here that chooses like this generation's (BudgetController::chooses_like) is
  // continued — its acceptance and cost estimates, its probing schedule — instead of a new one
  // that starts with plain warm-up checks; otherwise a new one replaces it. Either way it holds
  // the controller as the generation left it. Null: a new controller, dropped at the end.
  std::optional<spec::BudgetController>* controller_state = nullptr;
  // Context lookup (prompt lookup decoding), greedy decoding only: the tokens that followed the
  // latest earlier occurrence of the history's longest recurring suffix (lookup.max_ngram down to
  // min_ngram tokens), at most lookup.max_tokens of them, as a chain under the root beside the
  // model draft's nodes (which it does not displace: the tree holds up to budget + max_tokens
  // nodes, at most kMaxBudget). The model draft never expands lookup nodes (it has no K/V for
  // them). Sampled decoding ignores lookup: its verifier needs proposals drawn from the draft's q.
  spec::LookupOptions lookup;
  int32_t n_predict = 64;
  int32_t eos_token = -1;
  int32_t prefill_chunk = 256;
  // With a cache given to generate_speculative: its first `reuse` slots already hold the
  // target's K/V of the prompt's first `reuse` tokens (an earlier generation's, kept by Session),
  // which are not run again (reuse < prompt size).
  int64_t reuse = 0;
  // The fine-tuned variant to decode (null: the base). The draft is the variant's own
  // D + α ⊙ S unless base_draft asks for the plain base draft D (for comparing acceptance).
  const Variant* variant = nullptr;
  bool base_draft = false;
  // Run the whole draft on the backend's device when it offers that (draft_source.h; the CUDA
  // backend with every plane in VRAM): per level only the batch goes in and each row's top k
  // comes out; a variant's draft too (its signs fused in the kernel).
  bool device_draft = true;
  spec::SamplingVerifyOptions verify;  // test-only switches
  // Concurrent generations on the model: every pass (prefill, draft levels on the host, verify)
  // joins theirs, and device draft work takes its turn with them (pass_batcher.h); null: alone.
  PassBatcher* batcher = nullptr;
  // With a batcher: while more than this many generations are joined, checks draft nothing
  // (plain decoding, plus the lookup chain when chosen): the combined pass already shares each
  // weight read among the sequences, so a draft's extra passes cost more than they save. Greedy
  // output is unchanged and sampled output keeps its distribution (a seeded sampled text then
  // depends on the concurrency). 0: no limit.
  int32_t draft_max_sequences = 0;
  // Each emitted token's target logits (generate.h), from the verify pass that chose it.
  LogitsCallback on_logits;
  // Polled before each prompt chunk (generate.h's StopCallback); optional.
  StopCallback stop;
};

struct SpeculativeResult {
  GenerationStats generation;
  spec::AcceptanceStats acceptance;
  std::string final_setting;                 // the setting in use at the end ("chain-4", "plain", ...)
  int64_t committed = 0;                     // cache slots holding committed target K/V at the end
  // Checks per setting (DraftSetting::name), in the order the settings were first used.
  std::vector<std::pair<std::string, int64_t>> checks_per_setting;
  // Checks the online controller had learned from before this generation (0: it started new).
  int64_t controller_checks_before = 0;
  // Where the draft's forward pass ran: "device (cuda:0)", or "host" and why not on a device.
  std::string draft_pass;
  // Bytes the whole-draft device path moved during this generation (zero without it): batches,
  // committed K/V and top-k; weight_bytes stays 0 (the draft's weights went in when it was made).
  DeviceTransfers device_transfers;
};

// What the online controller learned on one model (and variant), carried from generation to
// generation of every Session holding it (SessionOptions::controller_memory): a server's requests,
// bench accept's prompts of one setting. Thread-safe: concurrent generations each continue the
// state kept when they started, and the one that ends last is kept.
class ControllerMemory {
 public:
  std::optional<spec::BudgetController> recall() const {
    std::lock_guard<std::mutex> lock(mu_);
    return kept_;
  }
  void keep(spec::BudgetController controller) {
    std::lock_guard<std::mutex> lock(mu_);
    kept_ = std::move(controller);
  }

 private:
  mutable std::mutex mu_;
  std::optional<spec::BudgetController> kept_;
};

// `cache` (optional: for inspection, or kept for the next generation) must have at least prompt +
// n_predict + kMaxBudget + 1 slots (prompt + n_predict + budget + 1 for a fixed budget without
// lookup); it is left holding the committed K/V (SpeculativeResult::committed slots). `draft` runs its draft pass (D) and `target` its target pass (D + R): for a
// bit-split model pass the same model as both. Models without planes run their f32 weights.
// KV cache discipline: slots [0, committed) always hold the target's K/V of committed
// tokens. Each check writes the tree's nodes to scratch slots [committed, committed +
// nodes) — the draft's K/V during drafting (reusing the target's prefix), the target's
// during verification — then moves the accepted path's target K/V down to the committed
// positions; everything else is dropped.
// The cache slots generate_speculative needs for a prompt of `prompt_tokens` tokens: the sequence
// (prompt + n_predict) and the largest tree a check may grow (kMaxBudget under an online budget
// or greedy lookup, else the budget) plus its root.
int64_t speculative_cache_slots(const SpeculativeOptions& options, size_t prompt_tokens, bool greedy);

Result<SpeculativeResult> generate_speculative(const Model& target, const Model& draft, std::span<const int32_t> prompt,
                                               const SpeculativeOptions& options, Sampler& sampler,
                                               const TokenCallback& on_token, KvCache* cache = nullptr);

}  // namespace bitsplit
