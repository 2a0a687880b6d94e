// A model file opened for generation: its weight source, tokenizer and loaded model, with the
// backend chosen for a bit-split model (choose_backend: CUDA when there is a device). What the
// CLI's commands and the C API start from.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bitsplit/model.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/weights.h"

namespace bitsplit {

struct LoadedModel {
  std::unique_ptr<WeightSource> source;
  std::unique_ptr<Tokenizer> tokenizer;
  Model model;
};

// Opens `path`, reads its tokenizer and loads the model. For a bit-split file without a backend
// in `options`, the backend is chosen here (`vram_budget` caps a GPU's draft planes; default:
// free memory minus a margin). `log` (may be null) gets one line naming the backend and, under
// a VRAM budget, one with the planes' placement.
Result<LoadedModel> open_model(const std::string& path, const ModelLoadOptions& options = {},
                               std::optional<uint64_t> vram_budget = std::nullopt,
                               const std::function<void(const std::string&)>& log = nullptr);

}  // namespace bitsplit
