// SHA-256 as the files name their contents: lower-case hex digests (OpenSSL's EVP underneath).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "bitsplit/status.h"

namespace bitsplit {

// A digest fed in pieces (a large file chunk by chunk, releasing each as it goes).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const uint8_t> bytes);
  // The hex digest of everything fed; an error only if OpenSSL cannot hash at all.
  Result<std::string> hex();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

// The hex digest of one string of bytes.
Result<std::string> sha256_hex(std::string_view bytes);

}  // namespace bitsplit
