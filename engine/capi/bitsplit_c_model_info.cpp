// The C API's facts about a loaded model that come from its file and registry: metadata (one key,
// or every entry as JSON), the chat template, the registered variants' names, the locked bytes.
#include <charconv>
#include <cstdlib>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "bitsplit/gguf.h"
#include "capi_internal.h"

using namespace bitsplit;
using namespace bitsplit::capi;

namespace {

// A float32 value as the number its shortest decimal spelling names (1e-05, not the widened
// 9.999999747378752e-06), so a reader gets back what the file's writer wrote.
double shortest_float(double widened) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, float(widened));
  if (r.ec != std::errc()) return widened;
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

nlohmann::json to_json(const gguf::Value& v) {
  return std::visit(
      [&](const auto& x) -> nlohmann::json {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, gguf::Array>) {
          nlohmann::json out = nlohmann::json::array();
          for (const auto& item : x.items) out.push_back(to_json(item));
          return out;
        } else if constexpr (std::is_same_v<X, double>) {
          return v.type == gguf::ValueType::kFloat32 ? shortest_float(x) : x;
        } else {
          return x;
        }
      },
      v.data);
}

// Sentinel prefixes keep the model's kept strings of different kinds apart.
const std::string kJsonSlot = "json:";
const std::string kStringSlot = "string:";
const std::string kVariantSlot = "variant:";

}  // namespace

extern "C" {

uint64_t bitsplit_model_locked_bytes(const bitsplit_model* m) { return m ? m->locked_bytes : 0; }

int32_t bitsplit_model_variant_count(const bitsplit_model* model) {
  try {
    return model ? int32_t(model->variants->names().size()) : 0;
  } catch (...) {
    return 0;
  }
}

const char* bitsplit_model_variant_name(const bitsplit_model* cm, int32_t index) {
  if (!cm || index < 0) return nullptr;
  try {
    auto* m = const_cast<bitsplit_model*>(cm);
    const std::vector<std::string> names = m->variants->names();
    if (size_t(index) >= names.size()) return nullptr;
    return keep_string(*m, kVariantSlot + names[size_t(index)], names[size_t(index)]);
  } catch (...) {
    return nullptr;
  }
}

const char* bitsplit_model_meta_string(const bitsplit_model* cm, const char* key) {
  if (!cm || !key) return nullptr;
  try {
    auto* m = const_cast<bitsplit_model*>(cm);
    auto value = m->loaded.source->metadata().get_string(key);
    if (!value) return nullptr;
    return keep_string(*m, kStringSlot + key, std::move(*value));
  } catch (...) {
    return nullptr;
  }
}

const char* bitsplit_model_chat_template(const bitsplit_model* m) {
  return bitsplit_model_meta_string(m, "tokenizer.chat_template");
}

int32_t bitsplit_model_meta_count(const bitsplit_model* m) {
  return m ? int32_t(m->loaded.source->metadata().entries().size()) : 0;
}

const char* bitsplit_model_meta_key(const bitsplit_model* m, int32_t index) {
  if (!m || index < 0) return nullptr;
  const auto& entries = m->loaded.source->metadata().entries();  // read-only once loaded: stable
  return size_t(index) < entries.size() ? entries[size_t(index)].first.c_str() : nullptr;
}

const char* bitsplit_model_meta_json(const bitsplit_model* cm, const char* key) {
  if (!cm || !key) return nullptr;
  try {
    auto* m = const_cast<bitsplit_model*>(cm);
    const gguf::Value* value = m->loaded.source->metadata().find(key);
    if (!value) return nullptr;
    // Bytes that are not UTF-8 (a tokenizer's raw byte tokens) become U+FFFD rather than failing.
    const std::string text = to_json(*value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return keep_string(*m, kJsonSlot + key, text);
  } catch (...) {
    return nullptr;
  }
}

}  // extern "C"
