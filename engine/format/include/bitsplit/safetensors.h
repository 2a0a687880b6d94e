// Hugging Face safetensors: one shard (8-byte header length, JSON header, data area) validated
// against its file, and a checkpoint of shards (model.safetensors, or the shards a
// model.safetensors.index.json names, each checked against the index). Tensors stay in the
// memory-mapped shards and are read one at a time. Layout: docs/SAFETENSORS.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/status.h"

namespace bitsplit::safetensors {

// A header larger than this is refused before it is parsed (the reference implementation's bound).
inline constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
// Index files (model.safetensors.index.json) are read whole; larger ones are refused.
inline constexpr uint64_t kMaxIndexBytes = uint64_t(64) << 20;
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";
inline constexpr const char* kSingleFileName = "model.safetensors";

// The element types read: the checkpoint's weights. Others are an error naming tensor and dtype.
enum class Dtype { kF32, kF16, kBF16 };
const char* dtype_name(Dtype d);
gguf::TensorType ggml_type(Dtype d);
uint64_t dtype_bytes(Dtype d);

struct TensorEntry {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;  // as stored (row-major, the last dimension contiguous)
  uint64_t begin = 0, end = 0; // byte range within the data area
  int64_t n_elements() const;
};

// One validated shard: every tensor's range lies in the data area, sizes match dtype and shape,
// no two ranges overlap.
struct Shard {
  std::string path;
  std::shared_ptr<gguf::Storage> storage;
  uint64_t data_offset = 0;  // 8 + header length
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;  // "__metadata__" (string values)

  std::span<const uint8_t> bytes(const TensorEntry& t) const;
  const TensorEntry* find(std::string_view name) const;
};

// Parses a shard held in `storage`; `path` names it in errors.
Result<Shard> parse_shard(std::shared_ptr<gguf::Storage> storage, std::string path);
// Memory-maps and parses a shard file.
Result<Shard> open_shard(const std::string& path);

// Every shard of a checkpoint folder and where each tensor lives, in shard then data order.
struct Checkpoint {
  struct Location {
    size_t shard = 0;
    size_t index = 0;  // into shards[shard].tensors
  };
  std::string folder;
  std::vector<Shard> shards;
  std::vector<Location> order;
  std::unordered_map<std::string, Location> by_name;

  const TensorEntry& entry(const Location& at) const { return shards[at.shard].tensors[at.index]; }
};

// Opens `folder`: with model.safetensors.index.json, the shards its weight_map names (a shard
// missing, a tensor the index names absent from its shard, a tensor in a shard the index does
// not place there, are errors naming file and tensor); without one, model.safetensors.
Result<Checkpoint> open_checkpoint(const std::string& folder);

}  // namespace bitsplit::safetensors
