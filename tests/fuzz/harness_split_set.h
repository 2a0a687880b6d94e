// Fuzz harness for split GGUF sets (engine/format/split_gguf.h): the input is two files, a 4-byte
// little-endian length of the first and then both, written as NAME-00001-of-00002.gguf and
// NAME-00002-of-00002.gguf in a folder of the process (/dev/shm when there is one) and opened
// through open_weights on the first. Asserts: an error has a message; an opened set lists every
// tensor once, finds each by name, and hands out exactly nbytes for each, read end to end
// (ASan sees any range outside its part); small tensors convert to the right count.
#pragma once

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>

#include "bitsplit/split_gguf.h"
#include "bitsplit/weights.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

inline const std::string*& split_set_dir_name() {
  static const std::string* name = nullptr;
  return name;
}

// A folder of this process for the parts, removed at exit (the name lives on the heap, never
// freed, so the exit handler can still read it after static destructors ran).
inline const std::string& split_set_dir() {
  static const std::string* dir = [] {
    const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
    auto* d = new std::string(base + "/bitsplit-fuzz-split-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    split_set_dir_name() = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*split_set_dir_name(), ec);
    });
    return d;
  }();
  return *dir;
}

inline int run_split_set(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t first_len = 0;
  std::memcpy(&first_len, data, 4);
  const size_t n1 = std::min<size_t>(first_len, size - 4);
  const std::string prefix = split_set_dir() + "/s";
  const std::string paths[2] = {split_part_path(prefix, 0, 2), split_part_path(prefix, 1, 2)};
  std::ofstream(paths[0], std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data + 4), std::streamsize(n1));
  std::ofstream(paths[1], std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data + 4 + n1), std::streamsize(size - 4 - n1));
  auto set = open_weights(paths[0]);
  if (!set) {
    BITSPLIT_FUZZ_ASSERT(!set.status().message().empty(), "an error without a message");
    return 0;
  }
  const WeightSource& w = **set;
  std::set<std::string> names;
  uint64_t h = 0;
  for (const auto& t : w.tensors()) {
    BITSPLIT_FUZZ_ASSERT(names.insert(t.name).second, "tensor '" + t.name + "' listed twice");
    BITSPLIT_FUZZ_ASSERT(w.find_tensor(t.name) == &t, "tensor '" + t.name + "' does not find itself");
    auto bytes = w.raw_bytes(t);
    BITSPLIT_FUZZ_ASSERT(bytes.is_ok() && bytes->size() == t.nbytes, "tensor '" + t.name + "': bytes differ from nbytes");
    for (uint8_t b : *bytes) h = h * 31 + b;
    if (gguf::File::can_read_f32(t.type) && t.n_elements() <= 4096) {
      auto values = w.load_f32(t);
      if (values) BITSPLIT_FUZZ_ASSERT(int64_t(values->size()) == t.n_elements(), "load_f32 returned the wrong count");
    }
  }
  BITSPLIT_FUZZ_ASSERT(!w.describe().empty(), "no description");
  return int(h & 0);
}

}  // namespace bitsplit::fuzz
