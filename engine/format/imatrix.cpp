// The importance matrix file format.
#include "bitsplit/imatrix.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

#include "bitsplit/gguf.h"

namespace bitsplit {
namespace {

constexpr const char* kCovSuffix = ".cov";
constexpr const char* kSameInputPrefix = "imatrix.same_input.";

bool is_covariance_tensor(const std::string& name) {
  return name.size() > std::strlen(kCovSuffix) &&
         name.compare(name.size() - std::strlen(kCovSuffix), std::string::npos, kCovSuffix) == 0;
}

// The file, shared: covariances read from it point into its mapping and keep it alive.
Result<std::shared_ptr<const gguf::File>> open_imatrix(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(path));
  auto kind = file.metadata().get_string_or("general.type", "");
  if (!kind || *kind != "bitsplit.imatrix") {
    return Status::error(path + ": not a bitsplit importance matrix (general.type is not 'bitsplit.imatrix'); "
                         "make one with `bitsplit imatrix`");
  }
  return std::make_shared<const gguf::File>(std::move(file));
}

Result<ImportanceMatrix> columns_of(const gguf::File& file, const std::string& path);
Result<InputCovariances> covariances_of(const std::shared_ptr<const gguf::File>& file, const std::string& path);

}  // namespace

const float* importance_columns(const ImportanceMatrix* m, const std::string& weight, int64_t cols) {
  if (!m) return nullptr;
  auto it = m->find(weight);
  return it != m->end() && int64_t(it->second.size()) == cols ? it->second.data() : nullptr;
}

std::shared_ptr<const Covariance> Covariance::holding(std::vector<float> values, int64_t n, int64_t block) {
  auto owned = std::make_shared<const std::vector<float>>(std::move(values));
  auto c = std::make_shared<Covariance>();
  c->n = n;
  c->block = block;
  c->data = owned->data();
  c->owner = owned;
  return c;
}

const float* input_covariance(const InputCovariances* m, const std::string& weight, int64_t cols) {
  if (!m) return nullptr;
  auto it = m->find(weight);
  return it != m->end() && it->second && it->second->n == cols ? it->second->data : nullptr;
}

Result<ImportanceMatrix> read_imatrix(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(auto file, open_imatrix(path));
  return columns_of(*file, path);
}

Result<InputCovariances> read_input_covariances(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(auto file, open_imatrix(path));
  return covariances_of(file, path);
}

Result<ImatrixFile> read_imatrix_file(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(auto file, open_imatrix(path));
  ImatrixFile f;
  BITSPLIT_ASSIGN_OR_RETURN(f.columns, columns_of(*file, path));
  BITSPLIT_ASSIGN_OR_RETURN(f.covariances, covariances_of(file, path));
  return f;
}

namespace {

Result<ImportanceMatrix> columns_of(const gguf::File& file, const std::string& path) {
  ImportanceMatrix m;
  for (const auto& t : file.tensors()) {
    if (is_covariance_tensor(t.name)) continue;
    if (t.dims.size() != 1 || t.type != gguf::TensorType::F32) {
      return Status::error(path + ": tensor '" + t.name + "' must be a 1-D F32 vector");
    }
    BITSPLIT_ASSIGN_OR_RETURN(m[t.name], file.read_f32(t));
  }
  return m;
}

Result<InputCovariances> covariances_of(const std::shared_ptr<const gguf::File>& file, const std::string& path) {
  InputCovariances m;
  for (const auto& t : file->tensors()) {
    if (!is_covariance_tensor(t.name)) continue;
    if (t.dims.size() != 2 || t.dims[0] != t.dims[1] || t.type != gguf::TensorType::F32) {
      return Status::error(path + ": covariance '" + t.name + "' must be a square 2-D F32 matrix, not " +
                           t.shape_string());
    }
    const int64_t n = t.dims[0];
    const std::span<const uint8_t> bytes = file->tensor_bytes(t);
    // The data section is aligned (32 bytes at least) in a page-aligned mapping.
    BITSPLIT_CHECK(reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0, "misaligned tensor data");
    auto c = std::make_shared<Covariance>();
    c->n = n;
    c->data = reinterpret_cast<const float*>(bytes.data());
    c->owner = file;
    for (int64_t i = 0; i < n; ++i) {
      const float d = c->data[i * n + i];
      if (!std::isfinite(d) || d < 0.0f) {
        return Status::error(path + ": covariance '" + t.name + "' has diagonal entry " + std::to_string(i) + " = " +
                             std::to_string(d) + " (must be finite and >= 0)");
      }
    }
    m[t.name.substr(0, t.name.size() - std::strlen(kCovSuffix))] = std::move(c);
  }
  for (const auto& [key, value] : file->metadata().entries()) {
    if (key.rfind(kSameInputPrefix, 0) != 0) continue;
    BITSPLIT_ASSIGN_OR_RETURN(std::string owner, file->metadata().get_string(key));
    auto it = m.find(owner);
    if (it == m.end()) {
      return Status::error(path + ": '" + key + "' names '" + owner + "', which has no covariance matrix");
    }
    m[key.substr(std::strlen(kSameInputPrefix))] = it->second;
  }
  return m;
}

}  // namespace

Status write_imatrix(const ImportanceMatrix& imatrix, const InputCovariances* covariances, int64_t n_tokens,
                     const std::string& source_text, const std::string& path) {
  gguf::Writer w;
  w.metadata().set("general.type", gguf::Value::string("bitsplit.imatrix"));
  w.metadata().set("imatrix.tokens", gguf::Value::u64(uint64_t(n_tokens)));
  w.metadata().set("imatrix.text", gguf::Value::string(source_text));
  // Tensor data in declaration order, produced one at a time while writing (a 1.5B model's
  // covariances are ~10 GB: never copied whole).
  std::vector<std::span<const float>> data;
  for (const auto& [name, v] : imatrix) {
    BITSPLIT_RETURN_IF_ERROR(w.add_tensor_info(name, gguf::TensorType::F32, {int64_t(v.size())}));
    data.emplace_back(v);
  }
  if (covariances) {
    std::map<const Covariance*, std::string> written;  // matrix -> the weight it is stored under
    for (const auto& [name, c] : *covariances) {
      auto [it, fresh] = written.emplace(c.get(), name);
      if (!fresh) {
        w.metadata().set(kSameInputPrefix + name, gguf::Value::string(it->second));
        continue;
      }
      BITSPLIT_RETURN_IF_ERROR(w.add_tensor_info(name + kCovSuffix, gguf::TensorType::F32, {c->n, c->n}));
      data.emplace_back(c->data, size_t(c->n * c->n));
    }
  }
  return w.write_file_streaming(path, [&](size_t i, const gguf::TensorInfo&) -> Result<std::vector<uint8_t>> {
    std::vector<uint8_t> bytes(data[i].size_bytes());
    std::memcpy(bytes.data(), data[i].data(), bytes.size());
    return bytes;
  });
}

}  // namespace bitsplit
