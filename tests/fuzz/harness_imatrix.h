// Fuzz harness for the importance-matrix loader: the input is a whole file, read through a
// memfd path with read_imatrix and read_input_covariances. Asserts that every vector it returns
// has the length of its 1-D tensor in the file and reads every value, and that every covariance
// is square with the size its tensor (or the tensor it shares) has, and reads it whole.
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
  auto cov = read_input_covariances(mem.path());
  if (!cov) {
    BITSPLIT_FUZZ_ASSERT(!cov.status().message().empty(), "an error without a message");
  } else {
    for (const auto& [name, c] : *cov) {
      BITSPLIT_FUZZ_ASSERT(c && c->data && c->n > 0, "covariance '" + name + "' is empty");
      bool found = false;
      for (const auto& t : file->tensors())
        found |= t.dims.size() == 2 && t.dims[0] == c->n && t.dims[1] == c->n && t.n_elements() == c->n * c->n;
      BITSPLIT_FUZZ_ASSERT(found, "covariance '" + name + "' has no tensor of its size");
      for (int64_t i = 0; i < c->n * c->n; ++i) sum += double(c->data[i]);
    }
  }
  volatile double sink = sum;
  (void)sink;
  return 0;
}

}  // namespace bitsplit::fuzz
