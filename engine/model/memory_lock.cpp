// Model::lock_planes: the planes pinned in RAM with mlock(2).
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "bitsplit/model.h"
#include "bitsplit/planes.h"
#include "bitsplit/vram_plan.h"

namespace bitsplit {

namespace {

std::string memlock_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0) return "unknown";
  if (r.rlim_cur == RLIM_INFINITY) return "unlimited";
  return format_bytes(uint64_t(r.rlim_cur));
}

}  // namespace

Result<uint64_t> Model::lock_planes() const {
  // Every plane buffer the kernels read: the packed planes (copies, or the file map's pages they
  // borrow), and the file-layout bytes still held (a GPU backend's CPU fallback reads those).
  std::vector<std::pair<const void*, size_t>> ranges;
  auto add = [&](const void* p, size_t n) {
    if (p && n > 0) ranges.push_back({p, n});
  };
  for (const auto& [name, s] : splits_) {
    for (const auto* packed : {s.packed_residual.get(), s.packed_draft.get()}) {
      if (packed) add(packed->data(), packed->size_bytes());
    }
    add(s.resid_codes.data(), s.resid_codes.size());
    add(s.resid_scales.data(), s.resid_scales.size() * sizeof(uint16_t));
    add(s.draft_codes.data(), s.draft_codes.size());
    add(s.draft_scales.data(), s.draft_scales.size() * sizeof(uint16_t));
    add(s.draft_offsets.data(), s.draft_offsets.size() * sizeof(uint16_t));
  }
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;
  uint64_t locked = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (mlock(ranges[i].first, ranges[i].second) != 0) {
      const int err = errno;
      for (size_t j = 0; j < i; ++j) munlock(ranges[j].first, ranges[j].second);
      return Status::error("cannot lock the model's planes in RAM (" + format_bytes(total) + ", " + format_bytes(locked) +
                           " locked when mlock failed: " + std::strerror(err) +
                           "); the locked-memory limit is " + memlock_limit() +
                           " (raise it with `ulimit -l`, or LimitMEMLOCK= for a service), or run without --mlock");
    }
    locked += ranges[i].second;
  }
  return locked;
}

}  // namespace bitsplit
