// safetensors shards and checkpoints (safetensors.h): every number read from a header is checked
// against the file before anything is sized by it.
#include "bitsplit/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "bounded_file.h"

namespace bitsplit::safetensors {
namespace {

using nlohmann::json;

// safetensors' dtype names that exist but are not read, for a precise error.
constexpr const char* kOtherDtypes[] = {"F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL",
                                        "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};
// GGUF tensors have at most four dimensions.
constexpr size_t kMaxRank = 4;

Result<Dtype> parse_dtype(const std::string& s, const std::string& tensor, const std::string& path) {
  if (s == "F32") return Dtype::kF32;
  if (s == "F16") return Dtype::kF16;
  if (s == "BF16") return Dtype::kBF16;
  const bool known = std::any_of(std::begin(kOtherDtypes), std::end(kOtherDtypes), [&](const char* d) { return s == d; });
  return Status::error(path + ": tensor '" + tensor + "' has dtype " + (known ? s : "'" + s + "' (unknown)") +
                       ", which is not read (supported: BF16, F16, F32)");
}

// A JSON array of non-negative integers, or nullopt.
std::optional<std::vector<uint64_t>> unsigned_list(const json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<uint64_t> out;
  for (const json& v : j) {
    if (!v.is_number_unsigned()) return std::nullopt;  // is_number_unsigned: a non-negative integer
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

Result<TensorEntry> parse_entry(const std::string& name, const json& j, uint64_t data_size, const std::string& path) {
  auto fail = [&](const std::string& what) { return Status::error(path + ": tensor '" + name + "': " + what); };
  if (!j.is_object()) return fail("its header entry is not an object");
  const auto dtype = j.find("dtype");
  const auto shape = j.find("shape");
  const auto offsets = j.find("data_offsets");
  if (dtype == j.end() || !dtype->is_string()) return fail("no \"dtype\" string");
  if (shape == j.end()) return fail("no \"shape\"");
  if (offsets == j.end()) return fail("no \"data_offsets\"");
  TensorEntry t;
  t.name = name;
  BITSPLIT_ASSIGN_OR_RETURN(t.dtype, parse_dtype(dtype->get<std::string>(), name, path));
  const auto dims = unsigned_list(*shape);
  if (!dims) return fail("\"shape\" is not a list of non-negative integers");
  if (dims->size() > kMaxRank) return fail("has " + std::to_string(dims->size()) + " dimensions, more than 4");
  const auto range = unsigned_list(*offsets);
  if (!range || range->size() != 2) return fail("\"data_offsets\" is not a pair of non-negative integers");
  t.begin = (*range)[0];
  t.end = (*range)[1];
  if (t.begin > t.end) {
    return fail("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] end before they begin");
  }
  if (t.end > data_size) {
    return fail("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                "] run past the end of the data area (" + std::to_string(data_size) + " bytes)");
  }
  // The element count, bounded by the data area so no product overflows.
  uint64_t bytes = dtype_bytes(t.dtype);
  for (uint64_t d : *dims) {
    if (d != 0 && bytes > data_size / d) {
      return fail("shape " + shape->dump() + " needs more bytes than the data area has (" + std::to_string(data_size) + ")");
    }
    bytes *= d;
    t.shape.push_back(int64_t(d));
  }
  if (bytes != t.end - t.begin) {
    return fail("shape " + shape->dump() + " of " + dtype_name(t.dtype) + " is " + std::to_string(bytes) +
                " bytes, but data_offsets span " + std::to_string(t.end - t.begin));
  }
  return t;
}

Status check_no_overlap(const std::vector<TensorEntry>& sorted, const std::string& path) {
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].begin < sorted[i - 1].end && sorted[i].begin < sorted[i].end) {
      return Status::error(path + ": tensors '" + sorted[i - 1].name + "' [" + std::to_string(sorted[i - 1].begin) + ", " +
                           std::to_string(sorted[i - 1].end) + ") and '" + sorted[i].name + "' [" +
                           std::to_string(sorted[i].begin) + ", " + std::to_string(sorted[i].end) + ") overlap");
    }
  }
  return Status::ok();
}

Status read_metadata(const json& j, Shard& shard) {
  if (!j.is_object()) return Status::error(shard.path + ": \"__metadata__\" is not an object");
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) return Status::error(shard.path + ": \"__metadata__\" value of '" + key + "' is not a string");
    shard.metadata.emplace(key, value.get<std::string>());
  }
  return Status::ok();
}

Result<json> parse_json(const std::string& text, const std::string& path) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::error(path + ": not valid JSON");
  return j;
}

// A shard name from the index: a plain file name in the folder (no directories, so an index cannot
// point outside it).
Status check_shard_name(const std::string& name, const std::string& index_path) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return Status::error(index_path + ": shard name '" + name + "' is not a file name in the folder");
  }
  return Status::ok();
}

// The index's weight_map: tensor name -> shard file name, and the shard names in first-use order.
struct IndexMap {
  std::vector<std::pair<std::string, std::string>> tensors;
  std::vector<std::string> shards;
};

Result<IndexMap> read_index(const std::string& index_path) {
  BITSPLIT_ASSIGN_OR_RETURN(std::string text, read_bounded_file(index_path, kMaxIndexBytes));
  BITSPLIT_ASSIGN_OR_RETURN(json j, parse_json(text, index_path));
  const auto map = j.is_object() ? j.find("weight_map") : j.end();
  if (map == j.end() || !map->is_object()) return Status::error(index_path + ": no \"weight_map\" object");
  IndexMap out;
  std::set<std::string> seen;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) return Status::error(index_path + ": weight_map['" + tensor + "'] is not a file name");
    const std::string file = shard.get<std::string>();
    BITSPLIT_RETURN_IF_ERROR(check_shard_name(file, index_path));
    if (seen.insert(file).second) out.shards.push_back(file);
    out.tensors.emplace_back(tensor, file);
  }
  if (out.tensors.empty()) return Status::error(index_path + ": weight_map names no tensors");
  return out;
}

Result<Checkpoint> open_indexed(const std::string& folder, const std::string& index_path) {
  BITSPLIT_ASSIGN_OR_RETURN(IndexMap index, read_index(index_path));
  Checkpoint c;
  c.folder = folder;
  std::unordered_map<std::string, size_t> shard_of;
  for (const std::string& file : index.shards) {
    const std::string path = (std::filesystem::path(folder) / file).string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return Status::error(index_path + ": names shard " + file + ", which is missing from " + folder);
    }
    BITSPLIT_ASSIGN_OR_RETURN(Shard shard, open_shard(path));
    shard_of.emplace(file, c.shards.size());
    c.shards.push_back(std::move(shard));
  }
  std::unordered_map<std::string, size_t> placed;  // tensor -> shard the index names
  for (const auto& [tensor, file] : index.tensors) {
    const size_t s = shard_of.at(file);
    if (!c.shards[s].find(tensor)) {
      return Status::error(index_path + ": places tensor '" + tensor + "' in " + file + ", which has no such tensor");
    }
    placed.emplace(tensor, s);
  }
  for (size_t s = 0; s < c.shards.size(); ++s) {
    for (size_t i = 0; i < c.shards[s].tensors.size(); ++i) {
      const std::string& name = c.shards[s].tensors[i].name;
      const auto it = placed.find(name);
      if (it == placed.end() || it->second != s) {
        return Status::error(c.shards[s].path + ": holds tensor '" + name + "', which " + index_path +
                             (it == placed.end() ? " does not name" : " places in " + c.shards[it->second].path));
      }
      c.order.push_back({s, i});
      c.by_name.emplace(name, Checkpoint::Location{s, i});
    }
  }
  return c;
}

}  // namespace

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kF32: return "F32";
    case Dtype::kF16: return "F16";
    case Dtype::kBF16: return "BF16";
  }
  return "?";
}

gguf::TensorType ggml_type(Dtype d) {
  switch (d) {
    case Dtype::kF32: return gguf::TensorType::F32;
    case Dtype::kF16: return gguf::TensorType::F16;
    case Dtype::kBF16: return gguf::TensorType::BF16;
  }
  return gguf::TensorType::F32;
}

uint64_t dtype_bytes(Dtype d) { return d == Dtype::kF32 ? 4 : 2; }

int64_t TensorEntry::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::span<const uint8_t> Shard::bytes(const TensorEntry& t) const {
  return storage->bytes().subspan(size_t(data_offset + t.begin), size_t(t.end - t.begin));
}

const TensorEntry* Shard::find(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<Shard> parse_shard(std::shared_ptr<gguf::Storage> storage, std::string path) {
  Shard shard;
  shard.path = std::move(path);
  const std::span<const uint8_t> file = storage->bytes();
  if (file.size() < 8) {
    return Status::error(shard.path + ": is " + std::to_string(file.size()) +
                         " bytes, too short for a safetensors file (an 8-byte header length comes first)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | file[size_t(i)];
  if (header_len > kMaxHeaderBytes) {
    return Status::error(shard.path + ": header length " + std::to_string(header_len) + " is more than the " +
                         std::to_string(kMaxHeaderBytes) + " bytes a safetensors header may have (not a safetensors file?)");
  }
  if (header_len > file.size() - 8) {
    return Status::error(shard.path + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                         std::to_string(file.size()) + " bytes)");
  }
  if (header_len == 0 || file[8] != '{') return Status::error(shard.path + ": the header is not a JSON object");
  const std::string text(reinterpret_cast<const char*>(file.data() + 8), size_t(header_len));
  BITSPLIT_ASSIGN_OR_RETURN(json header, parse_json(text, shard.path + ": header"));
  if (!header.is_object()) return Status::error(shard.path + ": the header is not a JSON object");
  shard.data_offset = 8 + header_len;
  const uint64_t data_size = file.size() - shard.data_offset;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      BITSPLIT_RETURN_IF_ERROR(read_metadata(value, shard));
      continue;
    }
    BITSPLIT_ASSIGN_OR_RETURN(TensorEntry t, parse_entry(name, value, data_size, shard.path));
    shard.tensors.push_back(std::move(t));
  }
  std::sort(shard.tensors.begin(), shard.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  BITSPLIT_RETURN_IF_ERROR(check_no_overlap(shard.tensors, shard.path));
  shard.storage = std::move(storage);
  return shard;
}

Result<Shard> open_shard(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(auto storage, gguf::map_file(path));
  return parse_shard(std::move(storage), path);
}

Result<Checkpoint> open_checkpoint(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string index_path = (fs::path(folder) / kIndexFileName).string();
  if (fs::exists(index_path, ec)) return open_indexed(folder, index_path);
  const std::string single = (fs::path(folder) / kSingleFileName).string();
  if (!fs::exists(single, ec)) {
    return Status::error(folder + ": has neither " + std::string(kIndexFileName) + " nor " + kSingleFileName);
  }
  Checkpoint c;
  c.folder = folder;
  BITSPLIT_ASSIGN_OR_RETURN(Shard shard, open_shard(single));
  c.shards.push_back(std::move(shard));
  for (size_t i = 0; i < c.shards[0].tensors.size(); ++i) {
    if (!c.by_name.emplace(c.shards[0].tensors[i].name, Checkpoint::Location{0, i}).second) {
      return Status::error(single + ": tensor '" + c.shards[0].tensors[i].name + "' appears twice");
    }
    c.order.push_back({0, i});
  }
  return c;
}

}  // namespace bitsplit::safetensors
