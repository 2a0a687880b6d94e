// Fuzz harness for the safetensors header (engine/format/safetensors.h): the input is one shard's
// bytes, parsed in memory. Asserts: an error has a message; a parsed shard's tensors lie inside the
// data area in order without overlap, each span exactly its dtype × shape bytes, read end to end
// (ASan sees any range outside the input); small ones decode to the right count of floats.
#pragma once

#include "bitsplit/safetensors.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

inline int run_safetensors(const uint8_t* data, size_t size) {
  auto shard = safetensors::parse_shard(gguf::storage_from_bytes({data, data + size}), "fuzz.safetensors");
  if (!shard) {
    BITSPLIT_FUZZ_ASSERT(!shard.status().message().empty(), "an error without a message");
    return 0;
  }
  uint64_t previous_end = 0, h = 0;
  for (const auto& t : shard->tensors) {
    BITSPLIT_FUZZ_ASSERT(t.begin <= t.end && t.end <= size - shard->data_offset, t.name + ": range outside the data area");
    BITSPLIT_FUZZ_ASSERT(t.begin >= previous_end || t.begin == t.end, t.name + ": overlaps the tensor before it");
    previous_end = std::max(previous_end, t.end);
    const auto bytes = shard->bytes(t);
    BITSPLIT_FUZZ_ASSERT(bytes.size() == uint64_t(t.n_elements()) * safetensors::dtype_bytes(t.dtype), t.name + ": size");
    for (uint8_t b : bytes) h += b;
    if (t.n_elements() <= 4096) {
      std::vector<float> out(size_t(t.n_elements()));
      const Status st = gguf::decode_f32(safetensors::ggml_type(t.dtype), bytes, out);
      BITSPLIT_FUZZ_ASSERT(st.is_ok(), t.name + ": " + st.message());
    }
  }
  return int(h & 0);
}

}  // namespace bitsplit::fuzz
