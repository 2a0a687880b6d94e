// WeightSource implementations: GGUF files (memory-mapped); split sets are in split_gguf.cpp.
#include <filesystem>

#include "bitsplit/weights.h"

#include "bitsplit/fused_tensors.h"
#include "bitsplit/hf_folder.h"
#include "bitsplit/split_gguf.h"

namespace bitsplit {
namespace {

class GgufWeights final : public WeightSource {
 public:
  explicit GgufWeights(gguf::File file) : file_(std::move(file)) {}
  const std::string& path() const override { return file_.name(); }
  const gguf::Metadata& metadata() const override { return file_.metadata(); }
  const std::vector<gguf::TensorInfo>& tensors() const override { return file_.tensors(); }
  const gguf::TensorInfo* find_tensor(std::string_view name) const override { return file_.find_tensor(name); }
  Result<std::vector<float>> load_f32(const gguf::TensorInfo& t) const override { return file_.read_f32(t); }
  Result<std::span<const uint8_t>> raw_bytes(const gguf::TensorInfo& t) const override { return file_.tensor_bytes(t); }
  std::shared_ptr<const void> keep_alive() const override { return file_.storage(); }
  void release(const gguf::TensorInfo& t) const override { file_.release(t); }
  void will_need(const gguf::TensorInfo& t) const override { file_.will_need(t); }
  Result<std::string> content_sha256() const override { return file_.content_sha256(); }
  std::string describe() const override {
    return "GGUF v" + std::to_string(file_.version()) + ", " + std::to_string(file_.tensors().size()) +
           " tensors, " + std::to_string(file_.metadata().entries().size()) + " metadata keys, alignment " +
           std::to_string(file_.alignment());
  }

 private:
  gguf::File file_;
};

}  // namespace

Result<std::unique_ptr<WeightSource>> open_weights(const std::string& path) {
  if (is_hf_folder_path(path)) return open_hf_folder(path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::error(path + ": is a directory without config.json; pass a .gguf file or a Hugging Face "
                         "folder (config.json and *.safetensors)");
  }
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(path));
  // A part of a split set (split.count > 1) opens the whole set; a one-part "set" is a file.
  BITSPLIT_ASSIGN_OR_RETURN(int64_t parts, file.metadata().get_int_or(kSplitCountKey, 1));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t part, file.metadata().get_int_or(kSplitNoKey, 0));
  if (parts > 1 || part != 0) {
    BITSPLIT_ASSIGN_OR_RETURN(auto set, open_split_set(std::move(file)));
    return unfuse_projections(std::move(set));
  }
  return unfuse_projections(weights_from_gguf(std::move(file)));
}

std::unique_ptr<WeightSource> weights_from_gguf(gguf::File file) {
  return std::make_unique<GgufWeights>(std::move(file));
}

}  // namespace bitsplit
