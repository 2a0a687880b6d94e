// Test helper: safetensors files built byte by byte (well-formed ones, and headers a test breaks on
// purpose), for the safetensors reader's tests and the folder-conversion tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bitsplit::testing {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", or anything a test wants to see refused
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// The header object of `tensors` laid out one after another in the data area.
inline nlohmann::ordered_json safetensors_header(const std::vector<StTensor>& tensors) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  uint64_t at = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
  }
  return h;
}

// A file: the 8-byte length, the header text as given (padded with spaces to 8 bytes), the data.
inline std::vector<uint8_t> safetensors_bytes(const std::string& header_text, const std::vector<uint8_t>& data) {
  std::string header = header_text;
  while (header.size() % 8 != 0) header += ' ';
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& tensors) {
  std::vector<uint8_t> data;
  for (const auto& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  return safetensors_bytes(safetensors_header(tensors).dump(), data);
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                              std::streamsize(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// bf16 by truncation (tests choose values that bf16 holds exactly).
inline std::vector<uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out;
  for (float f : v) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    out.push_back(uint8_t(u >> 16));
    out.push_back(uint8_t(u >> 24));
  }
  return out;
}

}  // namespace bitsplit::testing
