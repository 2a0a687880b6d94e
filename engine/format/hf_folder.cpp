// Hugging Face folders as a WeightSource (hf_folder.h): the tensors stay in the mapped shards;
// load_f32 decodes one tensor and applies its transform (hf_mapping.h).
#include "bitsplit/hf_folder.h"

#include <filesystem>
#include <unordered_map>

#include "bitsplit/fused_tensors.h"
#include "bitsplit/safetensors.h"
#include "bitsplit/sha256.h"
#include "bounded_file.h"
#include "hf_mapping.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMaxConfigBytes = uint64_t(16) << 20;

// Where a GGUF-named tensor comes from: a shard entry and its transform, or a computed tensor.
struct Origin {
  const safetensors::Shard* shard = nullptr;
  const safetensors::TensorEntry* entry = nullptr;
  hf::Transform transform = hf::Transform::kNone;
  const std::vector<float>* computed = nullptr;
};

class HfFolderWeights final : public WeightSource {
 public:
  HfFolderWeights(std::string folder, safetensors::Checkpoint checkpoint, hf::ModelMap map)
      : folder_(std::move(folder)), checkpoint_(std::move(checkpoint)), map_(std::move(map)) {}

  // Names every tensor; errors for unknown roles and a missing untied head.
  Status build() {
    bool has_head = false;
    for (const auto& at : checkpoint_.order) {
      const safetensors::TensorEntry& e = checkpoint_.entry(at);
      auto mapped = hf::map_tensor(map_, e.name);
      if (!mapped) return mapped.status().with_context(checkpoint_.shards[at.shard].path);
      if (!*mapped) continue;
      has_head = has_head || (*mapped)->name == "output.weight";
      gguf::TensorInfo t;
      t.name = (*mapped)->name;
      t.dims.assign(e.shape.rbegin(), e.shape.rend());
      if (t.name.ends_with("ffn_gate_inp_shexp.weight") && t.dims.size() == 2 && t.dims[1] == 1) t.dims.pop_back();
      t.type = safetensors::ggml_type(e.dtype);
      t.offset = e.begin;
      t.nbytes = e.end - e.begin;
      BITSPLIT_RETURN_IF_ERROR(add(std::move(t), Origin{&checkpoint_.shards[at.shard], &e, (*mapped)->transform, nullptr}));
    }
    if (!map_.tied_embeddings && !has_head) {
      return Status::error(folder_ + ": config.json says tie_word_embeddings is false, but no shard holds lm_head.weight");
    }
    for (const auto& [name, values] : map_.computed_tensors) {
      gguf::TensorInfo t;
      t.name = name;
      t.dims = {int64_t(values.size())};
      t.type = gguf::TensorType::F32;
      t.nbytes = values.size() * 4;
      BITSPLIT_RETURN_IF_ERROR(add(std::move(t), Origin{nullptr, nullptr, hf::Transform::kNone, &values}));
    }
    return Status::ok();
  }

  const std::string& path() const override { return folder_; }
  const gguf::Metadata& metadata() const override { return map_.metadata; }
  const std::vector<gguf::TensorInfo>& tensors() const override { return tensors_; }
  const gguf::TensorInfo* find_tensor(std::string_view name) const override {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }

  Result<std::vector<float>> load_f32(const gguf::TensorInfo& t) const override {
    BITSPLIT_ASSIGN_OR_RETURN(const Origin* o, origin(t));
    if (o->computed) return *o->computed;
    BITSPLIT_ASSIGN_OR_RETURN(auto bytes, slice(t, *o));
    std::vector<float> out(size_t(t.n_elements()));
    BITSPLIT_RETURN_IF_ERROR(gguf::decode_f32(t.type, bytes, out).with_context(o->shard->path + ": tensor '" + o->entry->name + "'"));
    if (o->transform == hf::Transform::kNone) return out;
    if (t.offset != o->entry->begin || t.nbytes != o->entry->end - o->entry->begin) {
      return Status::error("tensor '" + t.name + "': a part of a tensor that is converted on load cannot be read alone");
    }
    return apply(t, *o, std::move(out));
  }
  Result<std::span<const uint8_t>> raw_bytes(const gguf::TensorInfo& t) const override {
    BITSPLIT_ASSIGN_OR_RETURN(const Origin* o, origin(t));
    if (o->computed || o->transform != hf::Transform::kNone) {
      return Status::error("tensor '" + t.name + "': its values are computed or converted on load; read it with load_f32");
    }
    return slice(t, *o);
  }
  std::shared_ptr<const void> keep_alive() const override {
    auto storages = std::make_shared<std::vector<std::shared_ptr<const gguf::Storage>>>();
    for (const auto& s : checkpoint_.shards) storages->push_back(s.storage);
    return storages;
  }
  void release(const gguf::TensorInfo& t) const override {
    if (auto o = origin(t); o && (*o)->shard) (*o)->shard->storage->release((*o)->shard->data_offset + t.offset, t.nbytes);
  }
  void will_need(const gguf::TensorInfo& t) const override {
    if (auto o = origin(t); o && (*o)->shard) (*o)->shard->storage->will_need((*o)->shard->data_offset + t.offset, t.nbytes);
  }
  // SHA-256 over config.json's digest and each shard's, in order: identifies the folder's model.
  Result<std::string> content_sha256() const override {
    BITSPLIT_ASSIGN_OR_RETURN(std::string config, read_bounded_file((fs::path(folder_) / "config.json").string(), kMaxConfigBytes));
    BITSPLIT_ASSIGN_OR_RETURN(std::string joined, sha256_hex(config));
    for (const auto& s : checkpoint_.shards) {
      Sha256 h;
      h.update(s.storage->bytes());
      BITSPLIT_ASSIGN_OR_RETURN(std::string hex, h.hex());
      joined += hex;
    }
    return sha256_hex(joined);
  }
  std::string describe() const override {
    return "safetensors folder (" + map_.hf_architecture + "), " + std::to_string(checkpoint_.shards.size()) + " shard" +
           (checkpoint_.shards.size() == 1 ? "" : "s") + ", " + std::to_string(tensors_.size()) + " tensors, " +
           std::to_string(map_.metadata.entries().size()) + " metadata keys";
  }

 private:
  Status add(gguf::TensorInfo t, Origin o) {
    if (!index_.emplace(t.name, tensors_.size()).second) {
      return Status::error(folder_ + ": two tensors map to '" + t.name + "'");
    }
    tensors_.push_back(std::move(t));
    origins_.push_back(o);
    return Status::ok();
  }
  Result<const Origin*> origin(const gguf::TensorInfo& t) const {
    auto it = index_.find(t.name);
    if (it == index_.end()) return Status::error(folder_ + ": no tensor '" + t.name + "'");
    return &origins_[it->second];
  }
  // The bytes of [t.offset, t.offset + t.nbytes) of the data area, which must lie inside the entry.
  Result<std::span<const uint8_t>> slice(const gguf::TensorInfo& t, const Origin& o) const {
    if (t.offset < o.entry->begin || t.nbytes > o.entry->end - t.offset || t.offset > o.entry->end) {
      return Status::error(o.shard->path + ": tensor '" + t.name + "': range outside tensor '" + o.entry->name + "'");
    }
    return o.shard->storage->bytes().subspan(size_t(o.shard->data_offset + t.offset), size_t(t.nbytes));
  }
  Result<std::vector<float>> apply(const gguf::TensorInfo& t, const Origin& o, std::vector<float> v) const {
    if (o.transform == hf::Transform::kAddOne) {
      for (float& x : v) x += 1.0f;
      return v;
    }
    const int64_t heads = o.transform == hf::Transform::kPermuteQ ? map_.n_heads : map_.n_kv_heads;
    const int64_t rows = t.dims.size() >= 2 ? t.dims[1] : t.n_elements();
    const int64_t cols = t.dims.size() >= 2 ? t.dims[0] : 1;
    if (heads <= 0 || rows % (2 * heads) != 0) {
      return Status::error(o.shard->path + ": tensor '" + o.entry->name + "' has " + std::to_string(rows) +
                           " rows, not whole heads of even size for " + std::to_string(heads) + " heads");
    }
    return permute_rope_rows(v, rows, cols, heads);
  }

  std::string folder_;
  safetensors::Checkpoint checkpoint_;
  hf::ModelMap map_;
  std::vector<gguf::TensorInfo> tensors_;
  std::vector<Origin> origins_;
  std::unordered_map<std::string, size_t> index_;
};

std::string folder_of(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path;
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

bool is_hf_folder_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fs::exists(fs::path(path) / "config.json", ec);
  return path.ends_with(".safetensors") || path.ends_with(safetensors::kIndexFileName);
}

Result<std::unique_ptr<WeightSource>> open_hf_folder(const std::string& path) {
  const std::string folder = folder_of(path);
  const std::string config_path = (fs::path(folder) / "config.json").string();
  BITSPLIT_ASSIGN_OR_RETURN(std::string config, read_bounded_file(config_path, kMaxConfigBytes));
  BITSPLIT_ASSIGN_OR_RETURN(hf::ModelMap map, hf::map_config(config, config_path));
  BITSPLIT_RETURN_IF_ERROR(hf::add_tokenizer(folder, map.vocab_size, map.metadata));
  if (!map.metadata.contains("general.name")) {  // as llama.cpp's converter: the folder's name
    std::error_code ec;
    const std::string name = fs::weakly_canonical(fs::absolute(folder, ec), ec).filename().string();
    if (!name.empty()) map.metadata.set("general.name", gguf::Value::string(name));
  }
  BITSPLIT_ASSIGN_OR_RETURN(safetensors::Checkpoint checkpoint, safetensors::open_checkpoint(folder));
  auto source = std::make_unique<HfFolderWeights>(folder, std::move(checkpoint), std::move(map));
  BITSPLIT_RETURN_IF_ERROR(source->build());
  return unfuse_projections(std::move(source));
}

std::vector<float> permute_rope_rows(std::span<const float> w, int64_t rows, int64_t cols, int64_t n_heads) {
  const int64_t d = rows / n_heads, half = d / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t s = 0; s < 2; ++s) {
        const float* from = w.data() + (h * d + s * half + i) * cols;
        std::copy(from, from + cols, out.data() + (h * d + 2 * i + s) * cols);
      }
    }
  }
  return out;
}

}  // namespace bitsplit
