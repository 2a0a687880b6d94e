// GGUF (llama.cpp's model file format, versions 2 and 3): metadata values, tensor infos,
// a bounds-checked memory-mapped reader and a writer. Byte layout: docs/FORMAT.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* value_type_name(ValueType t);

// ggml tensor types by their on-disk id. Only ids that exist in current llama.cpp are named.
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35,
};

struct TensorTypeTraits {
  const char* name;
  int64_t block_size;  // weights per block
  int64_t type_size;   // bytes per block
};
// Traits of a raw on-disk type id; nullopt for ids that are unknown or were removed from ggml.
std::optional<TensorTypeTraits> tensor_type_traits(uint32_t type_id);
std::string tensor_type_name(TensorType t);

struct Value;
struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::vector<Value> items;
  bool operator==(const Array& o) const;
};

// One metadata value. Integers keep their declared width in `type`; payloads are widened.
struct Value {
  ValueType type = ValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  static Value u16(uint16_t v) { return {ValueType::kUint16, uint64_t{v}}; }
  static Value u32(uint32_t v) { return {ValueType::kUint32, uint64_t{v}}; }
  static Value u64(uint64_t v) { return {ValueType::kUint64, v}; }
  static Value i32(int32_t v) { return {ValueType::kInt32, int64_t{v}}; }
  static Value f32(float v) { return {ValueType::kFloat32, double{v}}; }
  static Value boolean(bool v) { return {ValueType::kBool, v}; }
  static Value string(std::string v) { return {ValueType::kString, std::move(v)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::kArray, Array{elem, std::move(items)}};
  }
  static Value string_array(const std::vector<std::string>& v);
  static Value f32_array(const std::vector<float>& v);
  static Value i32_array(const std::vector<int32_t>& v);

  bool operator==(const Value& o) const;
};

// Key/value metadata in file order, with lookup by key and typed getters whose errors name
// the key and what was found.
class Metadata {
 public:
  const Value* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  void set(std::string key, Value value);  // replaces an existing key in place
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

  Result<int64_t> get_int(std::string_view key) const;
  Result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  Result<double> get_float(std::string_view key) const;
  Result<double> get_float_or(std::string_view key, double fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;

  bool operator==(const Metadata& o) const { return entries_ == o.entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
  TensorType type = TensorType::F32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  int64_t n_elements() const;
  int64_t rows() const { return dims.empty() ? 1 : n_elements() / dims[0]; }
  std::string shape_string() const;  // "[64, 512]"
};

// Read-only bytes of a model file (memory-mapped) or of a buffer (tests).
class Storage {
 public:
  virtual ~Storage() = default;
  virtual std::span<const uint8_t> bytes() const = 0;
  // Drops the pages of [offset, offset + size) from memory (mapped files only).
  virtual void release(uint64_t offset, uint64_t size) const { (void)offset; (void)size; }
  // Starts reading [offset, offset + size) into memory in the background (mapped files only).
  virtual void will_need(uint64_t offset, uint64_t size) const { (void)offset; (void)size; }
};
Result<std::shared_ptr<Storage>> map_file(const std::string& path);
// For tests and in-memory files: bytes held as storage.
std::shared_ptr<Storage> storage_from_bytes(std::vector<uint8_t> bytes);

inline constexpr uint64_t kDefaultAlignment = 32;

class File {
 public:
  // Opens and validates the whole header; tensor data stay mapped and are read lazily.
  static Result<File> open(const std::string& path);
  // Parses bytes already in memory; `name` is used in error messages.
  static Result<File> parse(std::shared_ptr<Storage> storage, std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return storage_->bytes().size(); }
  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  std::span<const uint8_t> tensor_bytes(const TensorInfo& t) const;
  // The bytes' owner: tensor_bytes spans stay valid while a copy of this handle lives.
  std::shared_ptr<const Storage> storage() const { return storage_; }
  // Converts F32, F16, BF16, I8 and the ggml block types quant/ decodes (Q4_0 ... Q6_K) to
  // f32; any other type is an error naming it and the tensor.
  Result<std::vector<float>> read_f32(const TensorInfo& t) const;
  // True when read_f32 can convert tensors of this type.
  static bool can_read_f32(TensorType type);
  // Advises the OS that a tensor's mapped pages are no longer needed ...
  void release(const TensorInfo& t) const;
  // ... or will be read soon (read-ahead in the background).
  void will_need(const TensorInfo& t) const;
  // Hex SHA-256 of the whole file; computed once per opened file (a registry checking several
  // deltas, or a merge of several, against one base reads the base once).
  Result<std::string> content_sha256() const;

 private:
  File() = default;
  std::shared_ptr<Storage> storage_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  struct Sha256Cache {
    std::mutex mu;
    std::string hex;  // empty until computed
  };
  std::shared_ptr<Sha256Cache> sha256_ = std::make_shared<Sha256Cache>();
};

// Builds a GGUF v3 file: metadata in insertion order, tensors in insertion order, each
// tensor's data aligned to `alignment`.
class Writer {
 public:
  Metadata& metadata() { return metadata_; }
  const Metadata& metadata() const { return metadata_; }
  uint64_t alignment() const { return alignment_; }
  void set_alignment(uint64_t alignment) { alignment_ = alignment; }  // a power of two (default 32)
  // dims in ggml order; bytes.size() must match the type and dims.
  Status add_tensor(std::string name, TensorType type, std::vector<int64_t> dims,
                    std::vector<uint8_t> bytes);
  // Declares a tensor whose bytes are produced later by write_file_streaming.
  Status add_tensor_info(std::string name, TensorType type, std::vector<int64_t> dims);
  std::vector<uint8_t> to_bytes() const;
  // Writes to path + ".tmp" and renames at the end, so no half-written file is left behind.
  Status write_file(const std::string& path) const;
  // Like write_file, but asks `produce(i)` for the bytes of tensor i (in order) while
  // writing, so only one tensor's data is in memory at a time. A failed produce or write
  // removes the temporary file and returns the error.
  using TensorProducer = std::function<Result<std::vector<uint8_t>>(size_t index, const TensorInfo& info)>;
  Status write_file_streaming(const std::string& path, const TensorProducer& produce) const;
  // The header, and every tensor's bytes left a hole that reads as zeros: a file of the full size
  // that takes (almost) no disk where the file system keeps sparse files. A model's shape for
  // planning (`bitsplit synth --sparse`, `convert --dry-run`), not a model to run.
  Status write_file_sparse(const std::string& path) const;
  const std::vector<TensorInfo> tensor_infos() const;

 private:
  std::vector<uint8_t> header_bytes() const;
  struct Pending {
    TensorInfo info;
    std::vector<uint8_t> bytes;
  };
  Metadata metadata_;
  uint64_t alignment_ = kDefaultAlignment;
  std::vector<Pending> tensors_;
};

// Bytes of a tensor of `type` and `dims`, or an error (unknown type, row not a multiple of
// the block size, overflow).
Result<uint64_t> tensor_nbytes(uint32_t type_id, std::span<const int64_t> dims);

// Decodes values stored as `type` (F32, F16, BF16, or whole blocks of a ggml block type) into
// out; `bytes` may have any alignment. File::read_f32 decodes tensors with it; a caller that
// needs a few rows (an embedding's) decodes just those. Errors: another type, a size mismatch.
Status decode_f32(TensorType type, std::span<const uint8_t> bytes, std::span<float> out);

}  // namespace bitsplit::gguf
