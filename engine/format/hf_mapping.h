// Internal to engine/format: how one Hugging Face folder maps onto GGUF conventions (hf_folder.h).
// hf_config.cpp reads config.json, hf_tensor_names.cpp maps tensor names, hf_tokenizer.cpp turns
// tokenizer.json and tokenizer_config.json into tokenizer.ggml.* keys.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/status.h"

namespace bitsplit::hf {

enum class Family { kLlama, kQwen2, kQwen3, kGemma2, kGemma3, kPhi3, kMixtral, kQwen2Moe, kQwen3Moe };

// What config.json says, in GGUF terms.
struct ModelMap {
  Family family = Family::kLlama;
  std::string hf_architecture;  // "LlamaForCausalLM"
  std::string gguf_architecture;  // "llama"
  gguf::Metadata metadata;
  int64_t n_heads = 0, n_kv_heads = 0;
  bool tied_embeddings = false;
  int64_t vocab_size = 0;  // config.json's vocab_size (the embedding's rows), 0 when absent
  // Tensors computed from config.json (RoPE factors), f32, with their GGUF names.
  std::vector<std::pair<std::string, std::vector<float>>> computed_tensors;
};

// config.json's text; `path` names it in errors.
Result<ModelMap> map_config(const std::string& text, const std::string& path);

// How a tensor's values change on the way (llama.cpp's converter does the same).
enum class Transform { kNone, kPermuteQ, kPermuteK, kAddOne };
struct MappedTensor {
  std::string name;
  Transform transform = Transform::kNone;
};
// The GGUF name of an HF tensor; nullopt for tensors a GGUF leaves out (a tied head, rotary
// caches); an error names a tensor that belongs to no known role.
Result<std::optional<MappedTensor>> map_tensor(const ModelMap& model, const std::string& hf_name);

// tokenizer.ggml.* and tokenizer.chat_template from the folder's tokenizer files (none: nothing).
Status add_tokenizer(const std::string& folder, int64_t vocab_size, gguf::Metadata& metadata);

}  // namespace bitsplit::hf
