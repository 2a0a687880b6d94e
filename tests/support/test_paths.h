// Locations of test data: the repo's own fixtures and the optional ../shared folder.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace bitsplit::testing {

inline std::string source_dir() { return BITSPLIT_SOURCE_DIR; }

// ../shared (or $BITSPLIT_SHARED_DIR); empty when absent.
inline std::string shared_dir() {
  const char* env = std::getenv("BITSPLIT_SHARED_DIR");
  const std::string dir = env && *env ? env : BITSPLIT_SHARED_DIR;
  return std::filesystem::is_directory(dir) ? dir : std::string();
}

// A fresh empty directory under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("bitsplit-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Appends code point cp as UTF-8 (for tests that build random valid text).
inline void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xf0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3f));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
}

}  // namespace bitsplit::testing

// Skips the test with a message naming the missing file when it does not exist.
#define BITSPLIT_REQUIRE_FILE(path)                                                    \
  do {                                                                                 \
    if ((path).empty() || !std::filesystem::exists(path))                              \
      GTEST_SKIP() << "test data not found: " << ((path).empty() ? "(shared dir absent)" : (path)) \
                   << " (the ../shared folder is optional; see tests/README.md)";       \
  } while (0)
