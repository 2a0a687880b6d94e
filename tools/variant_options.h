// The variant options `run`, `bench` and `serve` share: --delta NAME=FILE and --lora
// NAME=FILE[:SCALE] register fine-tuned variants (BitDelta files or LoRA adapters) on the
// loaded base, and every one is checked against it before anything runs. With
// --variant-storage-budget the LoRA adapters go through a K-Merge pool (engine/merge/adapter_pool.h)
// in the order given: each is admitted, merged into its most similar member, or refused, and
// the decision is logged.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "bitsplit/loaded_model.h"
#include "bitsplit/variant.h"

namespace bitsplit::cli {

struct VariantSpecs {
  std::vector<std::string> deltas;        // NAME=FILE
  std::vector<std::string> loras;         // NAME=FILE or NAME=FILE:SCALE
  std::string storage_budget;             // SIZE; empty: no pool
  std::vector<std::string> calibrations;  // NAME=TEXT, one per --lora with a budget
  double kl_threshold = 0.05;
  bool empty() const { return deltas.empty() && loras.empty(); }
  size_t size() const { return deltas.size() + loras.size(); }
  // Every name, in the order given (deltas first).
  std::vector<std::string> names() const;
};

// Adds --delta, --lora and the pool's options to `cmd`; `what` ends the help text ("run with
// --variant NAME").
void add_variant_options(CLI::App* cmd, VariantSpecs* specs, const std::string& what);

// Registers every spec on `base`; the error names the option and the spec. A --lora whose file
// is a delta (or the other way round) is refused, so each option means what it says. `log`
// takes the pool's decisions.
Status register_variants(VariantRegistry& registry, const VariantSpecs& specs, const LoadedModel& base,
                         const std::function<void(const std::string&)>& log);

}  // namespace bitsplit::cli
