// Test-only: bytes that end exactly where an inaccessible page begins, so a kernel that reads
// past the end of what it was given faults instead of reading a neighbour's heap memory.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "bitsplit/status.h"

namespace bitsplit::testing {

class GuardedBytes {
 public:
  GuardedBytes() = default;
  explicit GuardedBytes(size_t n) : n_(n) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t body = (n + page - 1) / page * page;
    void* map = mmap(nullptr, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BITSPLIT_CHECK(map != MAP_FAILED, "mmap of a guarded test buffer");
    map_ = static_cast<uint8_t*>(map);
    mapped_ = body + page;
    BITSPLIT_CHECK(mprotect(map_ + body, page, PROT_NONE) == 0, "mprotect of the guard page");
    data_ = map_ + body - n;
  }
  ~GuardedBytes() {
    if (map_) munmap(map_, mapped_);
  }
  GuardedBytes(GuardedBytes&& o) noexcept { *this = std::move(o); }
  GuardedBytes& operator=(GuardedBytes&& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    std::swap(mapped_, o.mapped_);
    return *this;
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return n_; }

 private:
  uint8_t* map_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t n_ = 0, mapped_ = 0;
};

}  // namespace bitsplit::testing
