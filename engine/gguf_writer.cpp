// GGUF v3 writer: serialises metadata and tensors; files are written under a temporary name
// and renamed, so a failure never leaves a half-written model behind.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "bitsplit/gguf.h"

namespace bitsplit::gguf {
namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }

 private:
  std::vector<uint8_t>& out_;
};

void put_value(ByteSink& sink, const Value& v) {
  switch (v.type) {
    case ValueType::kUint8: sink.put<uint8_t>(uint8_t(std::get<uint64_t>(v.data))); break;
    case ValueType::kInt8: sink.put<int8_t>(int8_t(std::get<int64_t>(v.data))); break;
    case ValueType::kUint16: sink.put<uint16_t>(uint16_t(std::get<uint64_t>(v.data))); break;
    case ValueType::kInt16: sink.put<int16_t>(int16_t(std::get<int64_t>(v.data))); break;
    case ValueType::kUint32: sink.put<uint32_t>(uint32_t(std::get<uint64_t>(v.data))); break;
    case ValueType::kInt32: sink.put<int32_t>(int32_t(std::get<int64_t>(v.data))); break;
    case ValueType::kUint64: sink.put<uint64_t>(std::get<uint64_t>(v.data)); break;
    case ValueType::kInt64: sink.put<int64_t>(std::get<int64_t>(v.data)); break;
    case ValueType::kFloat32: sink.put<float>(float(std::get<double>(v.data))); break;
    case ValueType::kFloat64: sink.put<double>(std::get<double>(v.data)); break;
    case ValueType::kBool: sink.put<uint8_t>(std::get<bool>(v.data) ? 1 : 0); break;
    case ValueType::kString: sink.put_string(std::get<std::string>(v.data)); break;
    case ValueType::kArray: {
      const auto& a = std::get<Array>(v.data);
      sink.put<uint32_t>(uint32_t(a.elem_type));
      sink.put<uint64_t>(a.items.size());
      for (const auto& item : a.items) put_value(sink, item);
      break;
    }
  }
}

}  // namespace

Status Writer::add_tensor(std::string name, TensorType type, std::vector<int64_t> dims,
                          std::vector<uint8_t> bytes) {
  for (const auto& p : tensors_) {
    if (p.info.name == name) return Status::error("tensor '" + name + "' added twice");
  }
  auto nbytes = tensor_nbytes(uint32_t(type), dims);
  if (!nbytes) return nbytes.status().with_context("tensor '" + name + "'");
  if (*nbytes != bytes.size()) {
    return Status::error("tensor '" + name + "': " + std::to_string(bytes.size()) + " bytes given, " +
                         std::to_string(*nbytes) + " expected for its type and shape");
  }
  Pending p;
  p.info.name = std::move(name);
  p.info.type = type;
  p.info.dims = std::move(dims);
  p.info.nbytes = *nbytes;
  p.bytes = std::move(bytes);
  tensors_.push_back(std::move(p));
  return Status::ok();
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  ByteSink sink(out);
  Metadata meta = metadata_;
  if (alignment_ != kDefaultAlignment) meta.set("general.alignment", Value::u32(uint32_t(alignment_)));
  sink.put<uint32_t>(0x46554747);
  sink.put<uint32_t>(3);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(meta.entries().size());
  for (const auto& [key, value] : meta.entries()) {
    sink.put_string(key);
    sink.put<uint32_t>(uint32_t(value.type));
    put_value(sink, value);
  }
  uint64_t offset = 0;
  for (const auto& p : tensors_) {
    sink.put_string(p.info.name);
    sink.put<uint32_t>(uint32_t(p.info.dims.size()));
    for (int64_t d : p.info.dims) sink.put<uint64_t>(uint64_t(d));
    sink.put<uint32_t>(uint32_t(p.info.type));
    sink.put<uint64_t>(offset);
    offset += p.bytes.size();
    offset += (alignment_ - offset % alignment_) % alignment_;
  }
  sink.pad_to(alignment_);
  for (const auto& p : tensors_) {
    out.insert(out.end(), p.bytes.begin(), p.bytes.end());
    sink.pad_to(alignment_);
  }
  return out;
}

Status Writer::write_file(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !closed) {
    std::remove(tmp.c_str());
    return Status::error(path + ": writing failed after " + std::to_string(written) + " of " +
                         std::to_string(bytes.size()) + " bytes: " + std::strerror(write_errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return Status::error(path + ": cannot rename " + tmp + ": " + ec.message());
  }
  return Status::ok();
}

}  // namespace bitsplit::gguf
