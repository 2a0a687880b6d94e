// Locations of test data: the repo's own fixtures and the optional ../shared folder.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace bitsplit::testing {

inline std::string source_dir() { return BITSPLIT_SOURCE_DIR; }

// ../shared (or $BITSPLIT_SHARED_DIR); empty when absent.
inline std::string shared_dir() {
  const char* env = std::getenv("BITSPLIT_SHARED_DIR");
  const std::string dir = env && *env ? env : BITSPLIT_SHARED_DIR;
  return std::filesystem::is_directory(dir) ? dir : std::string();
}

}  // namespace bitsplit::testing

// Skips the test with a message naming the missing file when it does not exist.
#define BITSPLIT_REQUIRE_FILE(path)                                                    \
  do {                                                                                 \
    if ((path).empty() || !std::filesystem::exists(path))                              \
      GTEST_SKIP() << "test data not found: " << ((path).empty() ? "(shared dir absent)" : (path)) \
                   << " (the ../shared folder is optional; see tests/README.md)";       \
  } while (0)
