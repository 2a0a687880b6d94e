// Hugging Face model folders (config.json, *.safetensors, tokenizer.json, tokenizer_config.json)
// as a WeightSource: config.json becomes the GGUF metadata llama.cpp's converter would write
// (general.architecture, <arch>.block_count, ..., tokenizer.ggml.*, tokenizer.chat_template) and
// every HF tensor a GGUF tensor name (model.layers.3.self_attn.q_proj.weight ->
// blk.3.attn_q.weight), with the conversions llama.cpp applies (q/k rows of llama-family models
// permuted for its adjacent-pair RoPE, gemma's RMSNorm weights stored as 1 + w). Tensors stay in
// the mapped shards and are converted one at a time. Supported families and keys:
// docs/SAFETENSORS.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "bitsplit/weights.h"

namespace bitsplit {

// Whether `path` names a Hugging Face folder: a directory with config.json, or a *.safetensors or
// model.safetensors.index.json file inside one.
bool is_hf_folder_path(const std::string& path);

// Opens the folder `path` names (is_hf_folder_path); errors name the file, the tensor or the
// config.json field that is wrong, and an unknown architecture is named.
Result<std::unique_ptr<WeightSource>> open_hf_folder(const std::string& path);

// transformers' q/k rows (each head rotating its halves) in the order llama.cpp's llama family
// reads them (each head rotating adjacent pairs): row h·d + 2i + s of the result is row
// h·d + s·d/2 + i of `rows` (d = rows / n_heads). `w` is rows × cols, row-major.
std::vector<float> permute_rope_rows(std::span<const float> w, int64_t rows, int64_t cols, int64_t n_heads);

}  // namespace bitsplit
