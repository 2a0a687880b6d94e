// Opening a model file for generation.
#include "bitsplit/loaded_model.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "bitsplit/file_kind.h"
#include "bitsplit/gpu.h"
#include "bitsplit/vram_plan.h"
#include "bitsplit/split_format.h"

namespace bitsplit {
namespace {

// A size field of /proc/self/status ("RssAnon:"), bytes; 0 where it cannot be read.
uint64_t process_status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  const size_t n = std::strlen(field);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, n, field) == 0) return std::strtoull(line.c_str() + n, nullptr, 10) * 1024;
  }
  return 0;
}

}  // namespace

Result<LoadedModel> open_model(const std::string& path, const ModelLoadOptions& requested,
                               std::optional<uint64_t> vram_budget, const std::function<void(const std::string&)>& log) {
  const auto t0 = std::chrono::steady_clock::now();
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
    if (log && !(*split)->packed_residual()) {
      log("note: " + path + " is bit-split format version " + std::to_string((*split)->version) +
          ": its residual planes are repacked into a copy in RAM at load; `bitsplit convert " + path +
          " NEW.gguf` rewrites it as format " + std::to_string(kSplitFormatVersion) +
          " (the same planes, nothing re-fitted), which is used straight from the file");
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
  if (log) {
    // How long the load took and where the weights now live: memory of the process's own
    // (copies) and pages of the file's map (a format-3 residual is used in place).
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t bytes = 0;
    for (const auto& t : source->tensors()) bytes += t.nbytes;
    char line[256];
    std::snprintf(line, sizeof line, "load: %.2f s for %s of tensors (%.2f GB/s); resident: %s own memory, %s mapped from the file",
                  seconds, format_bytes(bytes).c_str(), seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0,
                  format_bytes(process_status_bytes("RssAnon:")).c_str(),
                  format_bytes(process_status_bytes("RssFile:")).c_str());
    log(line);
  }
  if (log && model.has_planes() && !model.backend().placement().empty()) log(model.backend().placement());
  return LoadedModel{std::move(source), std::move(*tokenizer), std::move(model)};
}

}  // namespace bitsplit
