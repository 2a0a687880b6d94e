// Read-only storage for model files: an RAII memory map, or an owned buffer for tests.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "bitsplit/gguf.h"

namespace bitsplit::gguf {
namespace {

class MappedFile final : public Storage {
 public:
  MappedFile(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~MappedFile() override {
    if (addr_ != nullptr) munmap(addr_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const uint8_t> bytes() const override {
    return {static_cast<const uint8_t*>(addr_), size_};
  }
  void release(uint64_t offset, uint64_t size) const override {
    // Whole pages inside the range only; a read-only private mapping re-reads from the file
    // if they are touched again.
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    const uint64_t begin = (offset + page - 1) / page * page;
    const uint64_t end = std::min<uint64_t>(offset + size, size_) / page * page;
    if (end > begin) madvise(static_cast<uint8_t*>(addr_) + begin, end - begin, MADV_DONTNEED);
  }
  void will_need(uint64_t offset, uint64_t size) const override {
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    const uint64_t begin = offset / page * page, end = std::min<uint64_t>(offset + size, size_);
    if (end > begin) madvise(static_cast<uint8_t*>(addr_) + begin, end - begin, MADV_WILLNEED);
  }

 private:
  void* addr_;
  size_t size_;
};

class BufferStorage final : public Storage {
 public:
  explicit BufferStorage(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  std::span<const uint8_t> bytes() const override { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Closes a file descriptor on every path out of map_file.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) close(fd);
  }
};

// What a file that is not a regular one is, for the error that refuses it.
const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// Only a regular file can be mapped: a FIFO or a device would block or be read without end.
Status require_regular(const std::string& path, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return Status::ok();
  return Status::error(path + ": is " + file_type_name(st.st_mode) + ", not a regular file");
}

}  // namespace

Result<std::shared_ptr<Storage>> map_file(const std::string& path) {
  // Checked before opening: opening a FIFO for reading waits for a writer (forever if none
  // comes), and opening a device can act on it. The descriptor is checked again (the path may
  // have changed in between), opened without blocking for the same reason.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) BITSPLIT_RETURN_IF_ERROR(require_regular(path, st));
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (fd.fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  if (fstat(fd.fd, &st) != 0) return Status::error(path + ": cannot stat: " + std::strerror(errno));
  BITSPLIT_RETURN_IF_ERROR(require_regular(path, st));
  const size_t size = size_t(st.st_size);
  if (size == 0) return std::shared_ptr<Storage>(std::make_shared<BufferStorage>(std::vector<uint8_t>{}));
  // Mapped at a 2 MiB-aligned address (so file offset and address agree modulo a huge page) with
  // MADV_HUGEPAGE: where the file system keeps large folios in the page cache (ext4, xfs on
  // recent kernels), the read-ahead then reads whole 2 MiB folios and the faults map them with
  // huge pages, so the kernels streaming the residual from the map take 512x fewer TLB entries.
  // Elsewhere the advice is ignored and the map works as any other.
  constexpr size_t kHuge = size_t(2) << 20;
  void* addr = MAP_FAILED;
  if (void* reserve = mmap(nullptr, size + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      reserve != MAP_FAILED) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(reserve);
    const uintptr_t aligned = (begin + kHuge - 1) / kHuge * kHuge;
    addr = mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd.fd, 0);
    if (addr == MAP_FAILED) {
      munmap(reserve, size + kHuge);
    } else {  // hand back the reservation around the map
      const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
      const uintptr_t map_end = (aligned + size + page - 1) / page * page, end = begin + size + kHuge;
      if (aligned > begin) munmap(reserve, aligned - begin);
      if (end > map_end) munmap(reinterpret_cast<void*>(map_end), end - map_end);
    }
  }
  if (addr == MAP_FAILED) addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (addr == MAP_FAILED) return Status::error(path + ": cannot map into memory: " + std::strerror(errno));
  madvise(addr, size, MADV_HUGEPAGE);  // advice: an error (no THP) changes nothing
  return std::shared_ptr<Storage>(std::make_shared<MappedFile>(addr, size));
}

std::shared_ptr<Storage> storage_from_bytes(std::vector<uint8_t> bytes) {
  return std::make_shared<BufferStorage>(std::move(bytes));
}

}  // namespace bitsplit::gguf
