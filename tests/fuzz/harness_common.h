// Shared pieces of the fuzz harnesses (tests/fuzz/harness_*.h): the property check that aborts
// with a message, in-memory files for loaders that take a path, and a byte reader for inputs
// that carry several fields. Used by the libFuzzer targets and by tests/fuzz/fuzz_regression_test.cpp.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

// A property of the parsed result that must hold for every input: failing it is a finding, like
// a crash, so it aborts (libFuzzer saves the input; a GoogleTest binary dies with the message).
#define BITSPLIT_FUZZ_ASSERT(cond, what)                                                                 \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s: %s\n", __FILE__, __LINE__, #cond,            \
                   std::string(what).c_str());                                                           \
      std::abort();                                                                                      \
    }                                                                                                    \
  } while (0)

namespace bitsplit::fuzz {

// Bytes as a file with a path (/proc/self/fd/N of a memfd) for loaders that open paths; the
// descriptor closes with the object. Nothing touches the disk.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("bitsplit-fuzz", MFD_CLOEXEC)) {
    BITSPLIT_FUZZ_ASSERT(fd_ >= 0, "memfd_create failed");
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      BITSPLIT_FUZZ_ASSERT(n > 0, "writing the memfd failed");
      done += size_t(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// Writes `text` to `path` (for loaders that look beside a file, such as tokenizer_config.json).
inline void write_file(const std::filesystem::path& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  BITSPLIT_FUZZ_ASSERT(f != nullptr, "cannot write " + path.string());
  if (!text.empty()) BITSPLIT_FUZZ_ASSERT(std::fwrite(text.data(), 1, text.size(), f) == text.size(), path.string());
  std::fclose(f);
}

// Takes fields off the front of an input; reads past the end give zeros / empty strings.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t remaining() const { return size_ - pos_; }
  template <typename T>
  T take() {
    T v{};
    const size_t n = std::min(sizeof(T), remaining());
    if (n > 0) std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }
  // Up to a 0 byte (consumed) or the end.
  std::string take_string() {
    const uint8_t* end = static_cast<const uint8_t*>(std::memchr(data_ + pos_, 0, remaining()));
    const size_t n = end ? size_t(end - (data_ + pos_)) : remaining();
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += end ? n + 1 : n;
    return s;
  }
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), remaining());
    pos_ = size_;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Upper bound on the elements a harness converts to f32 per tensor, so the fuzzer spends its time
// on parsing rather than on dequantising large (valid) tensors.
inline constexpr int64_t kMaxElementsToRead = int64_t(1) << 20;

}  // namespace bitsplit::fuzz
