// Split GGUF sets (split_gguf.h).
#include "bitsplit/split_gguf.h"

#include "bitsplit/interrupt.h"
#include "bitsplit/sha256.h"


#include <cstdio>
#include <filesystem>
#include <random>
#include <regex>
#include <unordered_map>

namespace bitsplit {
namespace {

// One WeightSource over the parts: tensors in part order, each remembering its part.
class SplitWeights final : public WeightSource {
 public:
  SplitWeights(std::vector<gguf::File> parts, std::vector<gguf::TensorInfo> tensors, std::vector<size_t> part_of)
      : parts_(std::move(parts)), tensors_(std::move(tensors)), part_of_(std::move(part_of)) {
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }
  const std::string& path() const override { return parts_.front().name(); }
  const gguf::Metadata& metadata() const override { return parts_.front().metadata(); }
  const std::vector<gguf::TensorInfo>& tensors() const override { return tensors_; }
  const gguf::TensorInfo* find_tensor(std::string_view name) const override {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  Result<std::vector<float>> load_f32(const gguf::TensorInfo& t) const override {
    BITSPLIT_ASSIGN_OR_RETURN(const gguf::File* part, part_for(t));
    return part->read_f32(t);
  }
  Result<std::span<const uint8_t>> raw_bytes(const gguf::TensorInfo& t) const override {
    BITSPLIT_ASSIGN_OR_RETURN(const gguf::File* part, part_for(t));
    return part->tensor_bytes(t);
  }
  std::shared_ptr<const void> keep_alive() const override {
    auto storages = std::make_shared<std::vector<std::shared_ptr<const gguf::Storage>>>();
    for (const auto& p : parts_) storages->push_back(p.storage());
    return storages;
  }
  void release(const gguf::TensorInfo& t) const override {
    if (auto part = part_for(t)) (*part)->release(t);
  }
  void will_need(const gguf::TensorInfo& t) const override {
    if (auto part = part_for(t)) (*part)->will_need(t);
  }
  // SHA-256 over the parts' SHA-256 digests (hex) in order: identifies the set, though not
  // equal to the hash of the same model in one file.
  Result<std::string> content_sha256() const override {
    std::string joined;
    for (const auto& p : parts_) {
      BITSPLIT_ASSIGN_OR_RETURN(std::string h, p.content_sha256());
      joined += h;
    }
    auto hex = sha256_hex(joined);
    if (!hex) return hex.status().with_context(path());
    return hex;
  }
  std::string describe() const override {
    const gguf::File& f = parts_.front();
    return "GGUF v" + std::to_string(f.version()) + " split in " + std::to_string(parts_.size()) + " parts, " +
           std::to_string(tensors_.size()) + " tensors, " + std::to_string(f.metadata().entries().size()) +
           " metadata keys, alignment " + std::to_string(f.alignment());
  }

 private:
  Result<const gguf::File*> part_for(const gguf::TensorInfo& t) const {
    const auto* begin = tensors_.data();
    if (&t >= begin && &t < begin + tensors_.size()) return &parts_[part_of_[size_t(&t - begin)]];
    // A TensorInfo copied by the caller: found by name.
    auto it = index_.find(t.name);
    if (it == index_.end()) return Status::error(path() + ": no tensor '" + t.name + "' in the split set");
    return &parts_[part_of_[it->second]];
  }

  std::vector<gguf::File> parts_;
  std::vector<gguf::TensorInfo> tensors_;
  std::vector<size_t> part_of_;
  std::unordered_map<std::string, size_t> index_;
};

// split.no, split.count and split.tensors.count of a part; errors name the part.
struct PartKeys {
  int64_t no = 0, count = 0, tensors = -1;
  std::string set_id;  // empty: none (not written by bitsplit)
};
Result<PartKeys> read_part_keys(const gguf::File& f) {
  const gguf::Metadata& m = f.metadata();
  PartKeys k;
  auto no = m.get_int(kSplitNoKey);
  if (!no) return no.status().with_context(f.name() + ": split part");
  auto count = m.get_int(kSplitCountKey);
  if (!count) return count.status().with_context(f.name() + ": split part");
  auto tensors = m.get_int_or(kSplitTensorsCountKey, -1);
  if (!tensors) return tensors.status().with_context(f.name());
  auto set_id = m.get_string_or(kSplitSetIdKey, "");
  if (!set_id) return set_id.status().with_context(f.name());
  k.no = *no;
  k.count = *count;
  k.tensors = *tensors;
  k.set_id = *set_id;
  return k;
}

}  // namespace

bool is_split_set_key(std::string_view key) { return key.starts_with("split.") || key == kSplitSetIdKey; }

std::string split_part_path(const std::string& prefix, int index, int count) {
  char tail[64];
  std::snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", index + 1, count);
  return prefix + tail;
}

std::optional<SplitName> parse_split_name(const std::string& path) {
  static const std::regex kPattern(R"(^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$)");
  std::smatch m;
  if (!std::regex_match(path, m, kPattern)) return std::nullopt;
  SplitName n{m[1].str(), std::stoi(m[2].str()) - 1, std::stoi(m[3].str())};
  if (n.index < 0 || n.count < 1 || n.index >= n.count) return std::nullopt;
  return n;
}

Result<std::unique_ptr<WeightSource>> open_split_set(gguf::File first) {
  BITSPLIT_ASSIGN_OR_RETURN(PartKeys keys, read_part_keys(first));
  const std::string& path = first.name();
  const auto name = parse_split_name(path);
  if (keys.count < 1 || keys.count > 99999) {
    return Status::error(path + ": split.count is " + std::to_string(keys.count) + ", not a number of parts");
  }
  if (keys.no != 0) {
    const std::string hint = name ? "; give the first part, " + split_part_path(name->prefix, 0, int(keys.count)) : "";
    return Status::error(path + ": is part " + std::to_string(keys.no + 1) + " of " + std::to_string(keys.count) +
                         " of a split model" + hint);
  }
  if (!name || name->count != keys.count || name->index != 0) {
    return Status::error(path + ": is the first of " + std::to_string(keys.count) +
                         " parts of a split model, but its name does not follow " +
                         split_part_path("PREFIX", 0, int(keys.count)) +
                         " (llama.cpp's gguf-split naming), so the other parts cannot be found");
  }
  std::vector<gguf::File> parts;
  parts.push_back(std::move(first));
  for (int i = 1; i < keys.count; ++i) {
    const std::string part_path = split_part_path(name->prefix, i, int(keys.count));
    auto part = gguf::File::open(part_path);
    if (!part) {
      return Status::error(path + ": part " + std::to_string(i + 1) + " of " + std::to_string(keys.count) + " (" +
                           part_path + ") cannot be opened: " + part.status().message());
    }
    auto k = read_part_keys(*part);
    if (!k) return k.status();
    if (!keys.set_id.empty() && k->set_id != keys.set_id) {
      return Status::error(part_path + ": does not belong to " + path + "'s split set (set id " +
                           (k->set_id.empty() ? std::string("missing") : k->set_id) + ", expected " + keys.set_id +
                           "): a part of another model or another conversion");
    }
    if (k->no != i || k->count != keys.count || (keys.tensors >= 0 && k->tensors >= 0 && k->tensors != keys.tensors)) {
      return Status::error(part_path + ": does not belong to " + path + "'s split set: it says it is part " +
                           std::to_string(k->no + 1) + " of " + std::to_string(k->count) + " holding " +
                           std::to_string(k->tensors) + " tensors in all, expected part " + std::to_string(i + 1) +
                           " of " + std::to_string(keys.count) + " holding " + std::to_string(keys.tensors));
    }
    parts.push_back(std::move(*part));
  }
  std::vector<gguf::TensorInfo> tensors;
  std::vector<size_t> part_of;
  std::unordered_map<std::string, size_t> seen;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const auto& t : parts[p].tensors()) {
      if (auto [it, fresh] = seen.emplace(t.name, p); !fresh) {
        return Status::error(parts[p].name() + ": tensor '" + t.name + "' is also in " + parts[it->second].name() +
                             "; the parts are not of one split set");
      }
      tensors.push_back(t);
      part_of.push_back(p);
    }
  }
  if (keys.tensors >= 0 && int64_t(tensors.size()) != keys.tensors) {
    return Status::error(path + ": the split set holds " + std::to_string(tensors.size()) + " tensors, but " +
                         kSplitTensorsCountKey + " says " + std::to_string(keys.tensors));
  }
  return std::unique_ptr<WeightSource>(new SplitWeights(std::move(parts), std::move(tensors), std::move(part_of)));
}

Result<std::vector<std::string>> write_split_set(const gguf::Writer& writer, const std::string& prefix,
                                                 SplitLimits limits, const gguf::Writer::TensorProducer& produce) {
  const std::vector<gguf::TensorInfo> infos = writer.tensor_infos();
  // Tensors in order, a new part when the next one would overflow a part that has some.
  std::vector<std::vector<size_t>> parts(1);
  uint64_t in_part = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    const bool full = (limits.max_bytes > 0 && in_part + infos[i].nbytes > limits.max_bytes) ||
                      (limits.max_tensors > 0 && parts.back().size() >= limits.max_tensors);
    if (!parts.back().empty() && full) {
      parts.emplace_back();
      in_part = 0;
    }
    parts.back().push_back(i);
    in_part += infos[i].nbytes;
  }
  const int count = int(parts.size());
  if (count > 99999) return Status::error("a split set has at most 99999 parts; raise the part size");
  // A random id shared by the parts (see kSplitSetIdKey).
  std::random_device rd;
  char set_id[24];
  std::snprintf(set_id, sizeof(set_id), "%08x%08x", rd(), rd());
  std::vector<std::string> paths, partial;
  std::vector<std::unique_ptr<TempFileRegistration>> registered;
  auto discard = [&] {
    for (const auto& p : partial) std::remove(p.c_str());
  };
  for (int p = 0; p < count; ++p) {
    gguf::Writer part;
    part.set_alignment(writer.alignment());
    if (p == 0) {
      for (const auto& [key, value] : writer.metadata().entries())
        if (!is_split_set_key(key)) part.metadata().set(key, value);
    }
    part.metadata().set(kSplitNoKey, gguf::Value::u16(uint16_t(p)));
    part.metadata().set(kSplitCountKey, gguf::Value::u16(uint16_t(count)));
    part.metadata().set(kSplitTensorsCountKey, gguf::Value::i32(int32_t(infos.size())));
    part.metadata().set(kSplitSetIdKey, gguf::Value::string(set_id));
    for (size_t i : parts[p]) {
      if (Status st = part.add_tensor_info(infos[i].name, infos[i].type, infos[i].dims); !st) {
        discard();
        return st;
      }
    }
    paths.push_back(split_part_path(prefix, p, count));
    partial.push_back(paths.back() + ".partial");
    registered.push_back(std::make_unique<TempFileRegistration>(partial.back()));
    const std::vector<size_t>& members = parts[p];
    Status st = part.write_file_streaming(partial.back(), [&](size_t local, const gguf::TensorInfo&) {
      return produce(members[local], infos[members[local]]);
    });
    if (!st) {
      discard();
      return st;
    }
  }
  for (int p = 0; p < count; ++p) {
    std::error_code ec;
    std::filesystem::rename(partial[p], paths[p], ec);
    if (ec) {
      discard();
      return Status::error(paths[p] + ": cannot rename " + partial[p] + ": " + ec.message());
    }
  }
  return paths;
}

Result<std::vector<std::string>> write_model_file(const gguf::Writer& writer, const std::string& path,
                                                  SplitLimits limits, const gguf::Writer::TensorProducer& produce) {
  if (limits.max_bytes > 0 || limits.max_tensors > 0) {
    std::string prefix = path;
    if (prefix.ends_with(".gguf")) prefix.resize(prefix.size() - 5);
    return write_split_set(writer, prefix, limits, produce);
  }
  BITSPLIT_RETURN_IF_ERROR(writer.write_file_streaming(path, produce));
  return std::vector<std::string>{path};
}

}  // namespace bitsplit
