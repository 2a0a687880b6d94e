// Fuzz harness for the importance-matrix loader: the input is a whole file, read through a
// memfd path with read_imatrix. Asserts that every vector it returns has the length of its
// 1-D tensor in the file and reads every value.
#pragma once

#include "bitsplit/gguf.h"
#include "bitsplit/imatrix.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

inline int run_imatrix(const uint8_t* data, size_t size) {
  MemFile mem(data, size);
  auto m = read_imatrix(mem.path());
  if (!m) {
    BITSPLIT_FUZZ_ASSERT(!m.status().message().empty(), "an error without a message");
    return 0;
  }
  auto file = gguf::File::parse(gguf::storage_from_bytes(std::vector<uint8_t>(data, data + size)), "imatrix");
  BITSPLIT_FUZZ_ASSERT(file.is_ok(), "read_imatrix accepted a file the GGUF reader rejects");
  double sum = 0;
  for (const auto& [name, v] : *m) {
    const gguf::TensorInfo* t = file->find_tensor(name);
    BITSPLIT_FUZZ_ASSERT(t != nullptr && t->n_elements() == int64_t(v.size()), "vector '" + name + "' has the wrong length");
    for (float x : v) sum += double(x);
  }
  volatile double sink = sum;
  (void)sink;
  return 0;
}

}  // namespace bitsplit::fuzz
