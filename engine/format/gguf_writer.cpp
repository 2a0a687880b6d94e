// GGUF v3 writer: serialises metadata and tensors; files are written under a temporary name
// and renamed, so a failure never leaves a half-written model behind.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <optional>

#include <sys/types.h>
#include <unistd.h>

#include "bitsplit/gguf.h"
#include "bitsplit/interrupt.h"

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
  BITSPLIT_RETURN_IF_ERROR(add_tensor_info(name, type, dims));
  if (tensors_.back().info.nbytes != bytes.size()) {
    const uint64_t expected = tensors_.back().info.nbytes;
    tensors_.pop_back();
    return Status::error("tensor '" + name + "': " + std::to_string(bytes.size()) + " bytes given, " +
                         std::to_string(expected) + " expected for its type and shape");
  }
  tensors_.back().bytes = std::move(bytes);
  return Status::ok();
}

Status Writer::add_tensor_info(std::string name, TensorType type, std::vector<int64_t> dims) {
  for (const auto& p : tensors_) {
    if (p.info.name == name) return Status::error("tensor '" + name + "' added twice");
  }
  auto nbytes = tensor_nbytes(uint32_t(type), dims);
  if (!nbytes) return nbytes.status().with_context("tensor '" + name + "'");
  Pending p;
  p.info.name = std::move(name);
  p.info.type = type;
  p.info.dims = std::move(dims);
  p.info.nbytes = *nbytes;
  tensors_.push_back(std::move(p));
  return Status::ok();
}

const std::vector<TensorInfo> Writer::tensor_infos() const {
  std::vector<TensorInfo> out;
  for (const auto& p : tensors_) out.push_back(p.info);
  return out;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out = header_bytes();
  ByteSink sink(out);
  for (const auto& p : tensors_) {
    out.insert(out.end(), p.bytes.begin(), p.bytes.end());
    sink.pad_to(alignment_);
  }
  return out;
}

std::vector<uint8_t> Writer::header_bytes() const {
  std::vector<uint8_t> out;
  ByteSink sink(out);
  Metadata meta = metadata_;
  // The key always tells the alignment the data really have (metadata copied from another file
  // may carry that file's).
  if (alignment_ != kDefaultAlignment || meta.find("general.alignment")) {
    meta.set("general.alignment", Value::u32(uint32_t(alignment_)));
  }
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
    offset += p.info.nbytes;
    offset += (alignment_ - offset % alignment_) % alignment_;
  }
  sink.pad_to(alignment_);
  return out;
}

Status Writer::write_file(const std::string& path) const {
  return write_file_streaming(path, [&](size_t i, const TensorInfo&) -> Result<std::vector<uint8_t>> {
    return tensors_[i].bytes;
  });
}

namespace {

// A temporary output file that is removed unless commit() renamed it into place.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {}
  ~TempFile() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  Status open() {
    registration_.emplace(tmp_);  // before the file exists: a signal from here on removes it
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) return Status::error(path_ + ": cannot create " + tmp_ + ": " + std::strerror(errno));
    return Status::ok();
  }
  Status write(const uint8_t* data, size_t n) {
    if (n == 0) return Status::ok();
    if (std::fwrite(data, 1, n, f_) != n) return failed();
    written_ += n;
    return Status::ok();
  }
  uint64_t written() const { return written_; }
  // Grows the file to `size` bytes without writing them (a hole of zeros).
  Status extend_to(uint64_t size) {
    if (std::fflush(f_) != 0 || ::ftruncate(::fileno(f_), off_t(size)) != 0 || ::fseeko(f_, 0, SEEK_END) != 0) {
      return failed();
    }
    written_ = size;
    return Status::ok();
  }
  Status commit() {
    const bool flushed = std::fflush(f_) == 0;
    const int flush_errno = errno;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!flushed || !closed) {
      errno = flush_errno;
      return failed();
    }
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) return Status::error(path_ + ": cannot rename " + tmp_ + ": " + ec.message());
    committed_ = true;
    return Status::ok();
  }

 private:
  Status failed() const {
    const int e = errno;
    return Status::error(path_ + ": writing failed after " + std::to_string(written_) + " bytes: " +
                         std::strerror(e) + (e == ENOSPC ? " (the disk is full)" : ""));
  }
  std::string path_, tmp_;
  std::optional<TempFileRegistration> registration_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace

Status Writer::write_file_streaming(const std::string& path, const TensorProducer& produce) const {
  TempFile out(path);
  BITSPLIT_RETURN_IF_ERROR(out.open());
  const std::vector<uint8_t> header = header_bytes();
  BITSPLIT_RETURN_IF_ERROR(out.write(header.data(), header.size()));
  static const uint8_t kZeros[256] = {};
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo& info = tensors_[i].info;
    auto bytes = produce(i, info);
    if (!bytes) return bytes.status();
    if (bytes->size() != info.nbytes) {
      return Status::error("tensor '" + info.name + "': produced " + std::to_string(bytes->size()) + " bytes, " +
                           std::to_string(info.nbytes) + " expected");
    }
    BITSPLIT_RETURN_IF_ERROR(out.write(bytes->data(), bytes->size()));
    const uint64_t pad = (alignment_ - out.written() % alignment_) % alignment_;
    for (uint64_t left = pad; left > 0;) {
      const size_t n = size_t(std::min<uint64_t>(left, sizeof(kZeros)));
      BITSPLIT_RETURN_IF_ERROR(out.write(kZeros, n));
      left -= n;
    }
  }
  return out.commit();
}

Status Writer::write_file_sparse(const std::string& path) const {
  TempFile out(path);
  BITSPLIT_RETURN_IF_ERROR(out.open());
  const std::vector<uint8_t> header = header_bytes();
  BITSPLIT_RETURN_IF_ERROR(out.write(header.data(), header.size()));
  uint64_t size = out.written();
  for (const Pending& t : tensors_) {
    size += t.info.nbytes;
    size += (alignment_ - size % alignment_) % alignment_;
  }
  BITSPLIT_RETURN_IF_ERROR(out.extend_to(size));
  return out.commit();
}

}  // namespace bitsplit::gguf
