#include "bitsplit/sha256.h"

#include <openssl/evp.h>

namespace bitsplit {

struct Sha256::Context {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), nullptr) == 1;
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {}
Sha256::~Sha256() = default;

void Sha256::update(std::span<const uint8_t> bytes) {
  if (ctx_->ok) ctx_->ok = EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) == 1;
}

Result<std::string> Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!ctx_->ok || EVP_DigestFinal_ex(ctx_->md, digest, &length) != 1) return Status::error("cannot compute SHA-256");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

Result<std::string> sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  return h.hex();
}

}  // namespace bitsplit
