// The importance matrix file format.
#include "bitsplit/imatrix.h"

#include "bitsplit/gguf.h"

#include <cstring>

namespace bitsplit {

const float* importance_columns(const ImportanceMatrix* m, const std::string& weight, int64_t cols) {
  if (!m) return nullptr;
  auto it = m->find(weight);
  return it != m->end() && int64_t(it->second.size()) == cols ? it->second.data() : nullptr;
}

Result<ImportanceMatrix> read_imatrix(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(path));
  auto kind = file.metadata().get_string_or("general.type", "");
  if (!kind || *kind != "bitsplit.imatrix") {
    return Status::error(path + ": not a bitsplit importance matrix (general.type is not 'bitsplit.imatrix'); "
                         "make one with `bitsplit imatrix`");
  }
  ImportanceMatrix m;
  for (const auto& t : file.tensors()) {
    if (t.dims.size() != 1 || t.type != gguf::TensorType::F32) {
      return Status::error(path + ": tensor '" + t.name + "' must be a 1-D F32 vector");
    }
    BITSPLIT_ASSIGN_OR_RETURN(m[t.name], file.read_f32(t));
  }
  return m;
}

Status write_imatrix(const ImportanceMatrix& imatrix, int64_t n_tokens, const std::string& source_text,
                     const std::string& path) {
  gguf::Writer w;
  w.metadata().set("general.type", gguf::Value::string("bitsplit.imatrix"));
  w.metadata().set("imatrix.tokens", gguf::Value::u64(uint64_t(n_tokens)));
  w.metadata().set("imatrix.text", gguf::Value::string(source_text));
  for (const auto& [name, v] : imatrix) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    BITSPLIT_RETURN_IF_ERROR(w.add_tensor(name, gguf::TensorType::F32, {int64_t(v.size())}, std::move(bytes)));
  }
  return w.write_file(path);
}

}  // namespace bitsplit
