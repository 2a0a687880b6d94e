// Opening a model file for generation.
#include "bitsplit/loaded_model.h"

#include "bitsplit/file_kind.h"
#include "bitsplit/gpu.h"
#include "bitsplit/vram_plan.h"
#include "bitsplit/split_format.h"

namespace bitsplit {

Result<LoadedModel> open_model(const std::string& path, const ModelLoadOptions& requested,
                               std::optional<uint64_t> vram_budget, const std::function<void(const std::string&)>& log) {
  BITSPLIT_ASSIGN_OR_RETURN(auto source, open_weights(path));
  BITSPLIT_RETURN_IF_ERROR(require_model(*source, ModelUse::kAny));
  ModelLoadOptions options = requested;
  auto split = read_split_format(source->metadata());
  if (!split) return split.status().with_context(path);
  if (split->has_value()) {
    // A bit-split model: D·X runs on the GPU when one is there (BITSPLIT_DEVICE=cpu forces the CPU).
    if (!options.cpu) options.cpu = std::make_shared<cpu::CpuContext>();
    // An explicit budget the device cannot hold fails here, before anything is allocated (the
    // CPU fallback would hide the mistake).
    if (vram_budget && !options.backend && gpu::device_count() > 0) {
      if (auto free = gpu::free_memory(0); free && *vram_budget > *free) {
        return Status::error("a VRAM budget of " + format_bytes(*vram_budget) + " is more than the " +
                             format_bytes(*free) + " free on CUDA device 0");
      }
    }
    if (!options.backend) {
      std::string why;
      options.backend = choose_backend(options.cpu, &why, vram_budget);
      if (log) log(why);
    }
  }
  auto tokenizer = Tokenizer::from_metadata(source->metadata());
  if (!tokenizer) return tokenizer.status().with_context(path);
  BITSPLIT_ASSIGN_OR_RETURN(Model model, Model::load(*source, options));
  if (log && model.has_planes() && !model.backend().placement().empty()) log(model.backend().placement());
  return LoadedModel{std::move(source), std::move(*tokenizer), std::move(model)};
}

}  // namespace bitsplit
