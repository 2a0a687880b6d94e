// LoRA adapter files (lora_format.h).
#include "bitsplit/lora_format.h"

#include <cmath>
#include <limits>

namespace bitsplit {

int64_t LoraFile::parameters() const {
  int64_t n = 0;
  for (const auto& [w, t] : tensors) n += t.rank * (t.in + t.out);
  return n;
}

Result<LoraFile> open_lora(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File parsed, gguf::File::open(path));
  LoraFile l;
  l.path = path;
  l.file = std::make_unique<gguf::File>(std::move(parsed));
  const gguf::Metadata& m = l.file->metadata();
  auto fail = [&](const std::string& what) { return Status::error(path + ": " + what); };
  BITSPLIT_ASSIGN_OR_RETURN(std::string type, m.get_string_or("general.type", ""));
  if (type != "adapter") {
    return fail("not an adapter file (general.type is '" + type +
                "', expected 'adapter'); LoRA adapters come from llama.cpp's convert_lora_to_gguf.py");
  }
  BITSPLIT_ASSIGN_OR_RETURN(std::string adapter_type, m.get_string_or("adapter.type", ""));
  if (adapter_type != "lora") {
    return fail("adapter.type is '" + adapter_type + "'; only 'lora' adapters are supported");
  }
  auto arch = m.get_string("general.architecture");
  if (!arch) return arch.status().with_context(path);
  l.architecture = *arch;
  BITSPLIT_ASSIGN_OR_RETURN(l.name, m.get_string_or("general.name", ""));
  auto alpha = m.get_float_or("adapter.lora.alpha", 0.0);
  if (!alpha) return alpha.status().with_context(path);
  if (!std::isfinite(*alpha) || *alpha < 0.0 || *alpha > double(std::numeric_limits<float>::max())) {
    return fail("adapter.lora.alpha must be a finite f32 value >= 0");
  }
  l.alpha = float(*alpha);
  if (m.contains("adapter.alora.invocation_tokens")) {
    return fail("activated LoRA (adapter.alora.invocation_tokens) is not supported");
  }

  // Pair the tensors by weight name.
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const gguf::TensorInfo& t : l.file->tensors()) {
    const std::string_view a = kLoraASuffix, b = kLoraBSuffix;
    const bool is_a = t.name.ends_with(a), is_b = t.name.ends_with(b);
    if (!is_a && !is_b) {
      return fail("tensor '" + t.name + "' is not a LoRA factor (names end in .lora_a or .lora_b)");
    }
    const std::string weight = t.name.substr(0, t.name.size() - a.size());
    if (weight.ends_with("norm.weight")) {
      return fail("tensor '" + t.name + "': LoRA on a norm vector is not supported (only matrices are adapted)");
    }
    if (t.dims.size() != 2) return fail("tensor '" + t.name + "' has shape " + t.shape_string() + "; LoRA factors are 2-D");
    if (!gguf::File::can_read_f32(t.type)) {
      return fail("tensor '" + t.name + "' has type " + gguf::tensor_type_name(t.type) +
                  ", which this build cannot read");
    }
    (is_a ? pairs[weight].first : pairs[weight].second) = &t;
  }
  if (pairs.empty()) return fail("the adapter has no tensors");
  for (const auto& [weight, p] : pairs) {
    if (!p.first || !p.second) {
      return fail("'" + weight + "' has " + (p.first ? "lora_a" : "lora_b") + " but no " + (p.first ? "lora_b" : "lora_a"));
    }
    LoraTensor t;
    t.weight = weight;
    t.a = p.first;
    t.b = p.second;
    t.embedding = weight == "token_embd.weight";
    // A projection: a [in, rank], b [rank, out]. token_embd: a [rank, n_vocab], b [rank, n_embd].
    t.rank = t.a->dims[t.embedding ? 0 : 1];
    t.in = t.embedding ? t.b->dims[1] : t.a->dims[0];
    t.out = t.embedding ? t.a->dims[1] : t.b->dims[1];
    if (t.b->dims[0] != t.rank) {
      return fail("'" + weight + "': lora_a " + t.a->shape_string() + " and lora_b " + t.b->shape_string() +
                  (t.embedding ? " disagree on the rank (token_embd stores a as [rank, n_vocab], b as [rank, n_embd])"
                               : " disagree on the rank (a is [in, rank], b is [rank, out])"));
    }
    if (t.rank < 1 || t.in < 1 || t.out < 1) return fail("'" + weight + "' has an empty LoRA factor");
    l.tensors[weight] = t;
  }
  return l;
}

Result<LoraFactors> read_lora_factors(const LoraFile& lora, const LoraTensor& t) {
  LoraFactors f;
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> a, lora.file->read_f32(*t.a));
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> b, lora.file->read_f32(*t.b));
  const size_t r = size_t(t.rank);
  if (!t.embedding) {
    // a is A (rank x in) row-major, b is B (out x rank) row-major: U = B, V = A.
    f.up = std::move(b);
    f.down = std::move(a);
  } else {
    // a is [n_vocab rows x rank] = U; b is [n_embd rows x rank] = Vᵀ.
    f.up = std::move(a);
    f.down.resize(r * size_t(t.in));
    for (size_t e = 0; e < size_t(t.in); ++e)
      for (size_t k = 0; k < r; ++k) f.down[k * size_t(t.in) + e] = b[e * r + k];
  }
  for (float v : f.up)
    if (!std::isfinite(v)) return Status::error(lora.path + ": '" + t.weight + "' has a non-finite value in its LoRA factors");
  for (float v : f.down)
    if (!std::isfinite(v)) return Status::error(lora.path + ": '" + t.weight + "' has a non-finite value in its LoRA factors");
  return f;
}

}  // namespace bitsplit
