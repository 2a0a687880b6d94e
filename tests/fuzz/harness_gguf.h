// Fuzz harness for the GGUF reader: the input is a whole file, parsed in memory
// (gguf::File::parse). Every metadata value is read through every typed getter and walked, every
// tensor's byte range is read end to end (an offset or size past the file would be an ASan
// report), and small tensors the reader can convert are converted to f32. Asserts that each
// tensor's bytes lie inside the file and match its type and shape, and that lookups find what
// the listing holds.
#pragma once

#include <variant>

#include "bitsplit/gguf.h"
#include "bitsplit/weights.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

// Reads every byte of a value (so ASan sees any string pointing outside its buffer).
inline uint64_t walk_value(const gguf::Value& v) {
  uint64_t h = uint64_t(v.type);
  if (const auto* s = std::get_if<std::string>(&v.data)) {
    for (char c : *s) h = h * 31 + uint8_t(c);
  } else if (const auto* a = std::get_if<gguf::Array>(&v.data)) {
    for (const auto& item : a->items) {
      BITSPLIT_FUZZ_ASSERT(item.type == a->elem_type, "array item of another type than the array's");
      h = h * 31 + walk_value(item);
    }
  } else if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    h ^= *u;
  } else if (const auto* i = std::get_if<int64_t>(&v.data)) {
    h ^= uint64_t(*i);
  }
  return h;
}

// Every getter on every key: each either returns a value or an error, never crashes.
inline uint64_t touch_metadata(const gguf::Metadata& m) {
  uint64_t h = 0;
  for (const auto& [key, value] : m.entries()) {
    BITSPLIT_FUZZ_ASSERT(m.find(key) == &value, "metadata key '" + key + "' does not find its own entry");
    h += walk_value(value);
    if (auto r = m.get_int(key)) h += uint64_t(*r);
    if (auto r = m.get_float(key)) h += uint64_t(*r != *r);
    if (auto r = m.get_bool_or(key, false)) h += *r;
    if (auto r = m.get_string(key)) h += r->size();
    if (auto r = m.get_string_array(key)) h += r->size();
    if (auto r = m.get_float_array(key)) h += r->size();
    if (auto r = m.get_int_array(key)) h += r->size();
  }
  return h;
}

// Reads every tensor's bytes and converts the small ones; returns a checksum so nothing is
// optimised away.
inline uint64_t touch_tensors(const gguf::File& f) {
  uint64_t h = 0;
  for (const auto& t : f.tensors()) {
    BITSPLIT_FUZZ_ASSERT(f.find_tensor(t.name) == &t, "tensor '" + t.name + "' does not find itself");
    auto want = gguf::tensor_nbytes(uint32_t(t.type), t.dims);
    BITSPLIT_FUZZ_ASSERT(want && *want == t.nbytes, "tensor '" + t.name + "': nbytes does not match its type and shape");
    BITSPLIT_FUZZ_ASSERT(f.data_offset() + t.offset + t.nbytes <= f.file_size(),
                         "tensor '" + t.name + "' runs past the end of the file");
    const auto bytes = f.tensor_bytes(t);
    BITSPLIT_FUZZ_ASSERT(bytes.size() == t.nbytes, "tensor '" + t.name + "': span size differs from nbytes");
    for (uint8_t b : bytes) h = h * 31 + b;
    h += uint64_t(t.rows()) + t.shape_string().size();
    if (gguf::File::can_read_f32(t.type) && t.n_elements() <= kMaxElementsToRead) {
      auto values = f.read_f32(t);
      if (values) BITSPLIT_FUZZ_ASSERT(int64_t(values->size()) == t.n_elements(), "read_f32 returned the wrong count");
    }
  }
  return h;
}

inline int run_gguf(const uint8_t* data, size_t size) {
  auto file = gguf::File::parse(gguf::storage_from_bytes(std::vector<uint8_t>(data, data + size)), "fuzz.gguf");
  if (!file) {
    BITSPLIT_FUZZ_ASSERT(!file.status().message().empty(), "an error without a message");
    return 0;
  }
  BITSPLIT_FUZZ_ASSERT(file->data_offset() % file->alignment() == 0, "data section is not aligned");
  volatile uint64_t sink = touch_metadata(file->metadata()) + touch_tensors(*file);
  (void)sink;
  auto source = weights_from_gguf(std::move(*file));
  (void)source->describe();
  return 0;
}

}  // namespace bitsplit::fuzz
