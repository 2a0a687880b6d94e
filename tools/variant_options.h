// The variant options `run`, `bench` and `serve` share: --delta NAME=FILE and --lora
// NAME=FILE[:SCALE] register fine-tuned variants (BitDelta files or LoRA adapters) on the
// loaded base, and every one is checked against it before anything runs.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "bitsplit/variant.h"

namespace bitsplit::cli {

struct VariantSpecs {
  std::vector<std::string> deltas;  // NAME=FILE
  std::vector<std::string> loras;   // NAME=FILE or NAME=FILE:SCALE
  bool empty() const { return deltas.empty() && loras.empty(); }
  size_t size() const { return deltas.size() + loras.size(); }
  // Every name, in the order given (deltas first).
  std::vector<std::string> names() const;
};

// Adds --delta and --lora to `cmd`; `what` ends the help text ("run with --variant NAME").
void add_variant_options(CLI::App* cmd, VariantSpecs* specs, const std::string& what);

// Registers every spec; the error names the option and the spec. A --lora whose file is a
// delta (or the other way round) is refused, so each option means what it says.
Status register_variants(VariantRegistry& registry, const VariantSpecs& specs);

}  // namespace bitsplit::cli
