// LoRA adapters in llama.cpp's GGUF adapter format: general.type = "adapter", adapter.type =
// "lora", adapter.lora.alpha, and for each adapted base weight W a pair of tensors
// "W.lora_a" / "W.lora_b". The adapted weight is W + s · B·A with s = scale · alpha / rank
// (scale · 1 when alpha is 0, as llama.cpp does).
//
// Shapes (ggml order, dims[0] contiguous): for a projection W of [out x in], lora_a is
// [in, rank] (A: rank x in) and lora_b is [rank, out] (B: out x rank). For token_embd
// ([n_vocab x n_embd], rows read by token) llama.cpp stores the pair the other way round:
// lora_a is [rank, n_vocab] and lora_b is [rank, n_embd], and row t of the change is
// s · Σ_k a[t][k] · b[k-th column]. open_lora() reads both conventions into one form:
// ΔW = s · U·V with U [out x rank] and V [rank x in].
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/status.h"

namespace bitsplit {

inline constexpr const char* kLoraASuffix = ".lora_a";
inline constexpr const char* kLoraBSuffix = ".lora_b";

// One adapted weight's pair of tensors, as found in the file (data still mapped).
struct LoraTensor {
  std::string weight;  // "blk.3.attn_q.weight"
  int64_t out = 0, in = 0, rank = 0;
  bool embedding = false;  // token_embd's convention (see above)
  const gguf::TensorInfo* a = nullptr;
  const gguf::TensorInfo* b = nullptr;
};

// An opened, validated adapter file.
struct LoraFile {
  std::string path;
  std::unique_ptr<gguf::File> file;
  std::string architecture, name;
  float alpha = 0.0f;
  std::map<std::string, LoraTensor> tensors;  // by weight name
  // s for one tensor at a user scale: scale · alpha / rank, or scale when alpha is 0.
  float effective_scale(const LoraTensor& t, float scale) const {
    return alpha != 0.0f ? scale * alpha / float(t.rank) : scale;
  }
  // Adapted weights (rank × (in + out) each).
  int64_t parameters() const;
};

// Opens `path` and checks everything that does not need the base: the metadata keys, that
// every lora_a has its lora_b and nothing else is in the file, 2-D shapes with one rank per
// pair (rank >= 1), and tensor types read_f32 converts. Errors name the file and the tensor.
Result<LoraFile> open_lora(const std::string& path);

// The factors of one pair in f32: U [out x rank] row-major and V [rank x in] row-major, so
// that ΔW = s · U·V.
struct LoraFactors {
  std::vector<float> up, down;
};
Result<LoraFactors> read_lora_factors(const LoraFile& lora, const LoraTensor& t);

}  // namespace bitsplit
