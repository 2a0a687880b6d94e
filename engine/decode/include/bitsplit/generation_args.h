// What a front end asks of a generation (the CLI's run, chat, serve and bench accept; the C API),
// in its users' terms, and the one function from it to the session's options and the sampler's
// parameters: the defaults (context lookup with an online budget, the draft tree's shape) and the
// checks of these values live here once, as vLLM builds one config from its engine arguments.
#pragma once

#include <cstdint>
#include <optional>

#include "bitsplit/sampling.h"
#include "bitsplit/session.h"
#include "bitsplit/spec.h"

namespace bitsplit {

// The longest context-lookup chain by default, joined to an online budget (docs/PERFORMANCE.md,
// "Choosing among settings").
inline constexpr int32_t kDefaultLookup = 8;

struct GenerationArgs {
  SamplingParams sampling;       // its seed is `seed`
  std::optional<uint64_t> seed;  // unset: one drawn at random
  bool speculative = true;       // on a bit-split model (a model without planes decodes plainly)
  // Drafted nodes per check, 1..spec::kMaxBudget (text as users write it: spec::parse_budget);
  // unset: chosen online for the most tokens/s.
  std::optional<int32_t> budget;
  spec::DraftShape shape = spec::DraftShape::kTree;
  // With an online budget: keep to `shape` (false: a chain or a tree, chosen online).
  bool shape_given = false;
  int32_t depth = spec::DraftPolicy{}.max_depth;   // a tree's deepest level
  int32_t tree_top_k = spec::DraftPolicy{}.top_k;  // children considered per node and nodes kept per level
  // Context lookup tokens per check (0: off); unset: kDefaultLookup with an online budget, off
  // with a fixed one.
  std::optional<int32_t> lookup;
  bool device_draft = true;         // the whole draft on the backend's device when it offers it
  bool base_draft = false;          // with a variant: draft with the plain base D
  bool reuse_prefix = true;         // SessionOptions::reuse_prefix
  int32_t draft_max_sequences = 0;  // SessionOptions::draft_max_sequences
};

struct GenerationConfig {
  SessionOptions session;
  SamplingParams sampling;  // the seed set
};

// Checks `args` (the sampling parameters; the draft policy under the budget and the lookup length,
// even where the model will decode plainly) and fills in the defaults. The errors are those of
// SamplingParams::validate, DraftPolicy::validate and LookupOptions::validate: they name the
// value, not a front end's option (the front end adds that).
Result<GenerationConfig> generation_config(const GenerationArgs& args);

}  // namespace bitsplit
