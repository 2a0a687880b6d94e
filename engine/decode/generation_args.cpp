// From a front end's generation arguments to session options and sampling parameters
// (generation_args.h).
#include "bitsplit/generation_args.h"

#include <random>

namespace bitsplit {

Result<GenerationConfig> generation_config(const GenerationArgs& args) {
  GenerationConfig config;
  config.sampling = args.sampling;
  config.sampling.seed = args.seed ? *args.seed : std::random_device{}();
  BITSPLIT_RETURN_IF_ERROR(config.sampling.validate());
  SessionOptions& s = config.session;
  s.speculative = args.speculative;
  s.budget = args.budget;
  s.auto_shape = !args.shape_given;
  s.policy.shape = args.shape;
  s.policy.max_depth = args.depth;
  s.policy.top_k = args.tree_top_k;
  s.policy.width = args.tree_top_k;
  // A fixed budget is exactly what was asked for: lookup joins it only when asked to.
  s.lookup.max_tokens = args.lookup.value_or(args.budget ? 0 : kDefaultLookup);
  s.device_draft = args.device_draft;
  s.base_draft = args.base_draft;
  s.reuse_prefix = args.reuse_prefix;
  s.draft_max_sequences = args.draft_max_sequences;
  // Checked even where the model will decode plainly, so a bad budget is refused alike everywhere.
  spec::DraftPolicy policy = s.policy;
  policy.set_budget(s.budget.value_or(policy.budget));
  BITSPLIT_RETURN_IF_ERROR(policy.validate());
  BITSPLIT_RETURN_IF_ERROR(s.lookup.validate());
  return config;
}

}  // namespace bitsplit
