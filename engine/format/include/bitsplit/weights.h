// Where weights come from: a model file behind one interface, so that a safetensors folder
// (config.json + *.safetensors + tokenizer.json) can be added without changing callers.
// Metadata and tensor names always follow the GGUF/llama.cpp conventions; other formats
// translate into them.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/status.h"

namespace bitsplit {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const std::string& path() const = 0;
  virtual const gguf::Metadata& metadata() const = 0;
  virtual const std::vector<gguf::TensorInfo>& tensors() const = 0;
  virtual const gguf::TensorInfo* find_tensor(std::string_view name) const = 0;
  // The tensor converted to f32 (row-major, dims[0] fastest), or an error naming it.
  virtual Result<std::vector<float>> load_f32(const gguf::TensorInfo& tensor) const = 0;
  // A short description of the container ("GGUF v3, 48 tensors").
  virtual std::string describe() const = 0;
  // The tensor's bytes as stored (for packed planes that need no conversion), or an error
  // when the container cannot hand them out.
  virtual Result<std::span<const uint8_t>> raw_bytes(const gguf::TensorInfo& tensor) const {
    return Status::error("tensor '" + tensor.name + "': raw bytes are not available from this container");
  }
  // A handle that keeps every span raw_bytes hands out valid for as long as it lives (the file's
  // memory map): a loader can keep using tensor bytes in place instead of copying them. Null
  // when the container cannot promise that (the caller copies).
  virtual std::shared_ptr<const void> keep_alive() const { return nullptr; }
  // Lets the OS drop a tensor's pages once it has been consumed (streaming conversion).
  virtual void release(const gguf::TensorInfo& tensor) const { (void)tensor; }
  // Asks the OS to start reading a tensor's pages in the background (a tensor used in place).
  virtual void will_need(const gguf::TensorInfo& tensor) const { (void)tensor; }
  // Hex SHA-256 of the model file's bytes (identifies a base model).
  virtual Result<std::string> content_sha256() const { return Status::error("no file content to hash"); }
};

// Opens a model: a GGUF file (or a split set by its first part), or a Hugging Face folder
// (hf_folder.h); errors name the path and what is wrong.
Result<std::unique_ptr<WeightSource>> open_weights(const std::string& path);
// Wraps an already parsed GGUF (a file or bytes in memory; tests build models this way).
std::unique_ptr<WeightSource> weights_from_gguf(gguf::File file);

}  // namespace bitsplit
