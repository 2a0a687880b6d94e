// GGUF reader: every count, length, offset and size read from the file is checked against
// the bytes that remain before it is used, so a corrupt file yields an error, never a crash.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>


#include "bitsplit/gguf.h"
#include "bitsplit/sha256.h"
#include "bitsplit/quant.h"

namespace bitsplit::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected
constexpr uint32_t kMaxDims = 4;         // ggml's GGML_MAX_DIMS

// Smallest encoded size of a value of each type, to bound counts before allocating.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    case ValueType::kString: return 8;   // length prefix
    case ValueType::kArray: return 12;   // element type + count
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= uint32_t(ValueType::kFloat64); }

class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  Status error(const std::string& what) const {
    return Status::error(file_ + ": " + what + " (at byte " + std::to_string(pos_) + " of " +
                         std::to_string(bytes_.size()) + ")");
  }

  Status need(uint64_t n, const std::string& what) const {
    if (n > remaining()) {
      return error(what + ": needs " + std::to_string(n) + " bytes but the file ends after " +
                   std::to_string(remaining()));
    }
    return Status::ok();
  }

  template <typename T>
  Result<T> read(const std::string& what) {
    BITSPLIT_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> read_string(const std::string& what) {
    BITSPLIT_ASSIGN_OR_RETURN(uint64_t len, read<uint64_t>(what + " length"));
    if (len > remaining()) {
      return error(what + ": string length " + std::to_string(len) + " runs past the end of the file");
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), size_t(len));
    pos_ += len;
    return s;
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

Result<Value> read_value(Cursor& c, ValueType type, const std::string& what, int depth);

Result<Value> read_scalar(Cursor& c, ValueType type, const std::string& what) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::kUint8: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<uint8_t>(what)); v.data = uint64_t{x}; break; }
    case ValueType::kInt8: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<int8_t>(what)); v.data = int64_t{x}; break; }
    case ValueType::kUint16: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<uint16_t>(what)); v.data = uint64_t{x}; break; }
    case ValueType::kInt16: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<int16_t>(what)); v.data = int64_t{x}; break; }
    case ValueType::kUint32: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<uint32_t>(what)); v.data = uint64_t{x}; break; }
    case ValueType::kInt32: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<int32_t>(what)); v.data = int64_t{x}; break; }
    case ValueType::kUint64: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<uint64_t>(what)); v.data = x; break; }
    case ValueType::kInt64: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<int64_t>(what)); v.data = x; break; }
    case ValueType::kFloat32: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<float>(what)); v.data = double{x}; break; }
    case ValueType::kFloat64: { BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<double>(what)); v.data = x; break; }
    case ValueType::kBool: {
      BITSPLIT_ASSIGN_OR_RETURN(auto x, c.read<uint8_t>(what));
      if (x > 1) return c.error(what + ": bool value " + std::to_string(x) + " is neither 0 nor 1");
      v.data = x == 1;
      break;
    }
    case ValueType::kString: { BITSPLIT_ASSIGN_OR_RETURN(auto s, c.read_string(what)); v.data = std::move(s); break; }
    case ValueType::kArray: BITSPLIT_CHECK(false, "arrays are not scalars");
  }
  return v;
}

Result<Value> read_array(Cursor& c, const std::string& what, int depth) {
  if (depth >= kMaxArrayDepth) {
    return c.error(what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  }
  BITSPLIT_ASSIGN_OR_RETURN(uint32_t elem, c.read<uint32_t>(what + " element type"));
  if (!valid_value_type(elem)) return c.error(what + ": unknown array element type " + std::to_string(elem));
  BITSPLIT_ASSIGN_OR_RETURN(uint64_t count, c.read<uint64_t>(what + " element count"));
  const ValueType elem_type = ValueType(elem);
  if (count > c.remaining() / min_encoded_size(elem_type)) {
    return c.error(what + ": array of " + std::to_string(count) + " " + value_type_name(elem_type) +
                   " values cannot fit in the rest of the file");
  }
  Array array;
  array.elem_type = elem_type;
  array.items.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) {
    BITSPLIT_ASSIGN_OR_RETURN(Value item, read_value(c, elem_type, what, depth + 1));
    array.items.push_back(std::move(item));
  }
  Value v;
  v.type = ValueType::kArray;
  v.data = std::move(array);
  return v;
}

Result<Value> read_value(Cursor& c, ValueType type, const std::string& what, int depth) {
  if (type == ValueType::kArray) return read_array(c, what, depth);
  return read_scalar(c, type, what);
}

struct HeaderCounts {
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
};

// Magic, version and the two counts. Each entry needs a few bytes at least, so counts the file
// cannot hold are rejected before anything is allocated for them.
Result<HeaderCounts> read_header(Cursor& c, const std::string& name) {
  if (c.remaining() < 4) return c.error("not a GGUF file: too short to hold the magic number");
  BITSPLIT_ASSIGN_OR_RETURN(uint32_t magic, c.read<uint32_t>("magic"));
  if (magic != kMagic) return Status::error(name + ": not a GGUF file (the first 4 bytes are not 'GGUF')");
  HeaderCounts h;
  BITSPLIT_ASSIGN_OR_RETURN(h.version, c.read<uint32_t>("version"));
  if (h.version == 1) return Status::error(name + ": GGUF version 1 is not supported (only versions 2 and 3)");
  if ((h.version & 0xffff) == 0 && (h.version >> 16) != 0) {
    return Status::error(name + ": looks like a big-endian GGUF file, which is not supported");
  }
  if (h.version != 2 && h.version != 3) {
    return Status::error(name + ": GGUF version " + std::to_string(h.version) +
                         " is not supported (only versions 2 and 3)");
  }
  BITSPLIT_ASSIGN_OR_RETURN(h.n_tensors, c.read<uint64_t>("tensor count"));
  BITSPLIT_ASSIGN_OR_RETURN(h.n_kv, c.read<uint64_t>("metadata count"));
  if (h.n_kv > c.remaining() / (8 + 4 + 1)) {
    return c.error("header declares " + std::to_string(h.n_kv) + " metadata entries, more than the file can hold");
  }
  if (h.n_tensors > c.remaining() / (8 + 4 + 8 + 4 + 8)) {
    return c.error("header declares " + std::to_string(h.n_tensors) + " tensors, more than the file can hold");
  }
  return h;
}

Status read_metadata(Cursor& c, uint64_t n_kv, Metadata& metadata) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    BITSPLIT_ASSIGN_OR_RETURN(std::string key, c.read_string("metadata key #" + std::to_string(i)));
    const std::string what = "metadata key '" + key + "'";
    BITSPLIT_ASSIGN_OR_RETURN(uint32_t type, c.read<uint32_t>(what + " type"));
    if (!valid_value_type(type)) return c.error(what + ": unknown value type " + std::to_string(type));
    BITSPLIT_ASSIGN_OR_RETURN(Value value, read_value(c, ValueType(type), what, 0));
    if (metadata.contains(key)) return c.error(what + " appears twice");
    metadata.set(std::move(key), std::move(value));
  }
  return Status::ok();
}

// general.alignment when the file sets it (a uint32 power of two), else the default.
Result<uint64_t> read_alignment(const Metadata& metadata, const std::string& name, uint64_t fallback) {
  const Value* a = metadata.find("general.alignment");
  if (!a) return fallback;
  const auto* u = std::get_if<uint64_t>(&a->data);
  if (a->type != ValueType::kUint32 || u == nullptr) {
    return Status::error(name + ": metadata key 'general.alignment' must be a uint32, found " +
                         value_type_name(a->type));
  }
  if (*u == 0 || (*u & (*u - 1)) != 0) {
    return Status::error(name + ": general.alignment = " + std::to_string(*u) + " is not a power of two");
  }
  return *u;
}

// One tensor's dimensions, type, size and offset (after its name, which the caller has read).
Status read_tensor_info(Cursor& c, const std::string& what, uint64_t alignment, TensorInfo& t) {
  BITSPLIT_ASSIGN_OR_RETURN(uint32_t n_dims, c.read<uint32_t>(what + " dimension count"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return c.error(what + ": " + std::to_string(n_dims) + " dimensions (must be 1 to 4)");
  }
  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    BITSPLIT_ASSIGN_OR_RETURN(uint64_t dim, c.read<uint64_t>(what + " dimension"));
    if (dim == 0) return c.error(what + ": dimension " + std::to_string(d) + " is 0");
    if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(n_elements, dim, &n_elements) ||
        n_elements > uint64_t(INT64_MAX)) {
      return c.error(what + ": dimensions overflow 64 bits (dimension " + std::to_string(d) + " = " +
                     std::to_string(dim) + ")");
    }
    t.dims.push_back(int64_t(dim));
  }
  BITSPLIT_ASSIGN_OR_RETURN(uint32_t type, c.read<uint32_t>(what + " type"));
  if (!tensor_type_traits(type)) {
    return c.error(what + ": unknown tensor type id " + std::to_string(type));
  }
  t.type = TensorType(type);
  auto nbytes = tensor_nbytes(type, t.dims);
  if (!nbytes) return c.error(what + ": " + nbytes.status().message());
  t.nbytes = *nbytes;
  BITSPLIT_ASSIGN_OR_RETURN(t.offset, c.read<uint64_t>(what + " offset"));
  if (t.offset % alignment != 0) {
    return c.error(what + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                   std::to_string(alignment));
  }
  return Status::ok();
}

// Every tensor's data lies inside the data section.
Status check_tensor_data(const std::string& name, uint64_t file_size, uint64_t data_offset,
                         const std::vector<TensorInfo>& tensors) {
  if (data_offset > file_size) {
    return Status::error(name + ": the tensor data section would start at byte " + std::to_string(data_offset) +
                         ", past the end of the file (" + std::to_string(file_size) + " bytes)");
  }
  const uint64_t data_size = file_size - data_offset;
  for (const auto& t : tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return Status::error(name + ": tensor '" + t.name + "': data at offset " + std::to_string(data_offset + t.offset) +
                           " + " + std::to_string(t.nbytes) + " bytes runs past the end of the file (" +
                           std::to_string(file_size) + " bytes)");
    }
  }
  return Status::ok();
}

}  // namespace

Result<File> File::open(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(auto storage, map_file(path));
  return parse(std::move(storage), path);
}

Result<File> File::parse(std::shared_ptr<Storage> storage, std::string name) {
  File f;
  f.storage_ = std::move(storage);
  f.name_ = std::move(name);
  const auto bytes = f.storage_->bytes();
  Cursor c(bytes, f.name_);

  BITSPLIT_ASSIGN_OR_RETURN(HeaderCounts header, read_header(c, f.name_));
  f.version_ = header.version;
  BITSPLIT_RETURN_IF_ERROR(read_metadata(c, header.n_kv, f.metadata_));
  BITSPLIT_ASSIGN_OR_RETURN(f.alignment_, read_alignment(f.metadata_, f.name_, f.alignment_));

  f.tensors_.reserve(size_t(header.n_tensors));
  for (uint64_t i = 0; i < header.n_tensors; ++i) {
    TensorInfo t;
    BITSPLIT_ASSIGN_OR_RETURN(t.name, c.read_string("tensor #" + std::to_string(i) + " name"));
    const std::string what = "tensor '" + t.name + "'";
    if (f.tensor_index_.count(t.name)) return c.error(what + " appears twice");
    BITSPLIT_RETURN_IF_ERROR(read_tensor_info(c, what, f.alignment_, t));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t header_end = c.pos();
  f.data_offset_ = header_end + (f.alignment_ - header_end % f.alignment_) % f.alignment_;
  if (f.tensors_.empty()) return f;
  BITSPLIT_RETURN_IF_ERROR(check_tensor_data(f.name_, bytes.size(), f.data_offset_, f.tensors_));
  return f;
}

Status decode_f32(TensorType type, std::span<const uint8_t> bytes, std::span<float> out) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16: {
      const size_t width = type == TensorType::F32 ? 4 : 2;
      if (bytes.size() != out.size() * width) {
        return Status::error(std::string(tensor_type_name(type)) + ": " + std::to_string(bytes.size()) +
                             " bytes for " + std::to_string(out.size()) + " values");
      }
      if (type == TensorType::F32) {
        if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // an empty span's data may be null
        return Status::ok();
      }
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = type == TensorType::F16 ? quant::fp16_to_fp32(h) : quant::bf16_to_fp32(h);
      }
      return Status::ok();
    }
    default:
      return quant::dequantize_ggml_row(uint32_t(type), bytes, out);
  }
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> File::tensor_bytes(const TensorInfo& t) const {
  return storage_->bytes().subspan(size_t(data_offset_ + t.offset), size_t(t.nbytes));
}

Result<std::vector<float>> File::read_f32(const TensorInfo& t) const {
  const auto src = tensor_bytes(t);
  const size_t n = size_t(t.n_elements());
  std::vector<float> out(n);
  switch (t.type) {
    case TensorType::F32:
      std::memcpy(out.data(), src.data(), n * 4);
      break;
    case TensorType::F16:
    case TensorType::BF16:
      tbb::parallel_for(tbb::blocked_range<size_t>(0, n, 1 << 16), [&](const tbb::blocked_range<size_t>& r) {
        const Status s = decode_f32(t.type, src.subspan(2 * r.begin(), 2 * r.size()),
                                    std::span<float>(out).subspan(r.begin(), r.size()));
        BITSPLIT_CHECK(s.is_ok(), s.message());  // sizes follow from n
      });
      break;
    case TensorType::I8:  // bit-split code planes
      for (size_t i = 0; i < n; ++i) out[i] = float(int8_t(src[i]));
      break;
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: {
      // Block formats: decoded from the mapped bytes, which need not be aligned. The first row
      // alone checks the type and sizes (its error names the problem); the rest in parallel.
      const size_t rows = t.dims.empty() || t.dims[0] <= 0 ? 1 : n / size_t(t.dims[0]);
      if (rows <= 1 || src.size() % rows != 0) {
        const Status s = quant::dequantize_ggml_row(uint32_t(t.type), src, out);
        if (!s.is_ok()) return s.with_context(name_ + ": tensor '" + t.name + "'");
        break;
      }
      const size_t row_bytes = src.size() / rows, row_weights = n / rows;
      const auto rows_of = [&](size_t r0, size_t r1) {
        return quant::dequantize_ggml_row(uint32_t(t.type), src.subspan(r0 * row_bytes, (r1 - r0) * row_bytes),
                                          std::span<float>(out).subspan(r0 * row_weights, (r1 - r0) * row_weights));
      };
      const Status first = rows_of(0, 1);
      if (!first.is_ok()) return first.with_context(name_ + ": tensor '" + t.name + "'");
      tbb::parallel_for(tbb::blocked_range<size_t>(1, rows, 16), [&](const tbb::blocked_range<size_t>& r) {
        const Status s = rows_of(r.begin(), r.end());
        BITSPLIT_CHECK(s.is_ok(), s.message());  // every row has the first row's shape
      });
      break;
    }
    default:
      return Status::error(name_ + ": tensor '" + t.name + "' has type " + tensor_type_name(t.type) +
                           ", which cannot be loaded (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
                           "Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, I8)");
  }
  return out;
}

}  // namespace bitsplit::gguf

namespace bitsplit::gguf {

bool File::can_read_f32(TensorType type) {
  return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16 || type == TensorType::I8 ||
         quant::ggml_dequantize_supported(uint32_t(type));
}

void File::release(const TensorInfo& t) const { storage_->release(data_offset_ + t.offset, t.nbytes); }

void File::will_need(const TensorInfo& t) const { storage_->will_need(data_offset_ + t.offset, t.nbytes); }

Result<std::string> File::content_sha256() const {
  std::lock_guard<std::mutex> lock(sha256_->mu);  // a second caller waits for the first's result
  if (!sha256_->hex.empty()) return sha256_->hex;
  const auto bytes = storage_->bytes();
  // In chunks, releasing each afterwards, so hashing a large model does not pin it in memory.
  Sha256 digest;
  constexpr size_t kChunk = size_t(64) << 20;
  for (size_t at = 0; at < bytes.size(); at += kChunk) {
    const size_t n = std::min(kChunk, bytes.size() - at);
    digest.update(bytes.subspan(at, n));
    storage_->release(at, n);
  }
  auto hex = digest.hex();
  if (!hex) return hex.status().with_context(name_);
  sha256_->hex = *hex;
  return *hex;
}

}  // namespace bitsplit::gguf
