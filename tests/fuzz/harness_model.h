// Fuzz harness for the model-file path: the input is a whole GGUF file (an original or a
// bit-split model), parsed in memory and taken through read_split_format, read_model_config and
// Model::load (its shape checks, bit-split planes, Q8_0 blocks); the last byte of the input picks
// the load options. A model that loads and is small runs one token through forward_pass.
// Asserts that a loaded model's tensors match its configuration (logits of n_vocab) and that no
// header makes the loader allocate more than the file could describe (run with -malloc_limit_mb).
#pragma once

#include "bitsplit/fused_tensors.h"
#include "bitsplit/model.h"
#include "bitsplit/split_format.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

inline std::shared_ptr<cpu::CpuContext> fuzz_cpu_context() {
  static const auto ctx = std::make_shared<cpu::CpuContext>(cpu::CpuContext::Options{.threads = 1, .pin = false, .isa = cpu::Isa::kScalar});
  return ctx;
}

// Weights a forward pass touches, as a bound on the work one input may ask for.
inline double model_weights(const ModelConfig& c) {
  const double layer = double(c.n_embd) * double(c.q_dim() + 2 * c.kv_dim()) + double(c.q_dim()) * double(c.n_embd) +
                       3.0 * double(c.n_embd) * double(c.n_ff);
  return double(c.n_layers) * layer + 2.0 * double(c.n_vocab) * double(c.n_embd);
}

inline int run_model(const uint8_t* data, size_t size) {
  auto file = gguf::File::parse(gguf::storage_from_bytes(std::vector<uint8_t>(data, data + size)), "fuzz-model.gguf");
  if (!file) return 0;
  // As open_weights reads it: phi3's fused projections as separate tensors.
  auto unfused = unfuse_projections(weights_from_gguf(std::move(*file)));
  if (!unfused) {
    BITSPLIT_FUZZ_ASSERT(!unfused.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::unique_ptr<WeightSource> source = std::move(*unfused);
  auto split = read_split_format(source->metadata());
  if (split && split->has_value()) {
    const SplitFormat& f = **split;
    BITSPLIT_FUZZ_ASSERT(f.group == 32 || f.group == 64 || f.group == 128, "accepted group size");
  }
  auto config = read_model_config(*source);
  if (!config) return 0;
  BITSPLIT_FUZZ_ASSERT(config->n_layers > 0 && config->n_embd > 0 && config->n_vocab > 0 && config->head_dim > 0,
                       "a configuration with a non-positive size");

  const uint8_t flags = size > 0 ? data[size - 1] : 0;
  ModelLoadOptions options;
  options.keep_planes = (flags & 1) != 0;
  options.draft_only = (flags & 2) != 0;
  options.q8_0_kernels = (flags & 4) != 0;
  options.cpu = fuzz_cpu_context();
  auto model = Model::load(*source, options);
  if (!model) {
    BITSPLIT_FUZZ_ASSERT(!model.status().message().empty(), "an error without a message");
    return 0;
  }
  const ModelConfig& c = model->config();
  if (model_weights(c) > double(1 << 22) || c.n_ctx_train < 2) return 0;
  KvCache cache(c, 2);
  const int32_t token = int32_t(flags % c.n_vocab);
  const Batch batch = Batch::causal(std::span<const int32_t>(&token, 1), 0);
  auto logits = forward_pass(*model, cache, batch);
  if (logits) BITSPLIT_FUZZ_ASSERT(int64_t(logits->size()) == c.n_vocab, "logits of the wrong size");
  return 0;
}

}  // namespace bitsplit::fuzz
