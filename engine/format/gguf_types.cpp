// GGUF value and tensor-type tables, and the typed metadata getters.
#include <cstring>
#include <sstream>

#include "bitsplit/gguf.h"

namespace bitsplit::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "unknown";
}

std::optional<TensorTypeTraits> tensor_type_traits(uint32_t id) {
  switch (id) {
    case 0: return TensorTypeTraits{"F32", 1, 4};
    case 1: return TensorTypeTraits{"F16", 1, 2};
    case 2: return TensorTypeTraits{"Q4_0", 32, 18};
    case 3: return TensorTypeTraits{"Q4_1", 32, 20};
    case 6: return TensorTypeTraits{"Q5_0", 32, 22};
    case 7: return TensorTypeTraits{"Q5_1", 32, 24};
    case 8: return TensorTypeTraits{"Q8_0", 32, 34};
    case 9: return TensorTypeTraits{"Q8_1", 32, 36};
    case 10: return TensorTypeTraits{"Q2_K", 256, 84};
    case 11: return TensorTypeTraits{"Q3_K", 256, 110};
    case 12: return TensorTypeTraits{"Q4_K", 256, 144};
    case 13: return TensorTypeTraits{"Q5_K", 256, 176};
    case 14: return TensorTypeTraits{"Q6_K", 256, 210};
    case 15: return TensorTypeTraits{"Q8_K", 256, 292};
    case 16: return TensorTypeTraits{"IQ2_XXS", 256, 66};
    case 17: return TensorTypeTraits{"IQ2_XS", 256, 74};
    case 18: return TensorTypeTraits{"IQ3_XXS", 256, 98};
    case 19: return TensorTypeTraits{"IQ1_S", 256, 50};
    case 20: return TensorTypeTraits{"IQ4_NL", 32, 18};
    case 21: return TensorTypeTraits{"IQ3_S", 256, 110};
    case 22: return TensorTypeTraits{"IQ2_S", 256, 82};
    case 23: return TensorTypeTraits{"IQ4_XS", 256, 136};
    case 24: return TensorTypeTraits{"I8", 1, 1};
    case 25: return TensorTypeTraits{"I16", 1, 2};
    case 26: return TensorTypeTraits{"I32", 1, 4};
    case 27: return TensorTypeTraits{"I64", 1, 8};
    case 28: return TensorTypeTraits{"F64", 1, 8};
    case 29: return TensorTypeTraits{"IQ1_M", 256, 56};
    case 30: return TensorTypeTraits{"BF16", 1, 2};
    case 34: return TensorTypeTraits{"TQ1_0", 256, 54};
    case 35: return TensorTypeTraits{"TQ2_0", 256, 66};
    default: return std::nullopt;
  }
}

std::string tensor_type_name(TensorType t) {
  auto traits = tensor_type_traits(uint32_t(t));
  return traits ? traits->name : "type#" + std::to_string(uint32_t(t));
}

Result<uint64_t> tensor_nbytes(uint32_t type_id, std::span<const int64_t> dims) {
  auto traits = tensor_type_traits(type_id);
  if (!traits) return Status::error("unknown tensor type id " + std::to_string(type_id));
  if (dims.empty()) return Status::error("tensor has no dimensions");
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) return Status::error("dimension " + std::to_string(d) + " is not positive");
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) return Status::error("element count overflows 64 bits");
  }
  if (dims[0] % traits->block_size != 0) {
    return Status::error("row length " + std::to_string(dims[0]) + " is not a multiple of the " +
                         traits->name + " block size " + std::to_string(traits->block_size));
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(n / uint64_t(traits->block_size), uint64_t(traits->type_size), &bytes)) {
    return Status::error("byte size overflows 64 bits");
  }
  return bytes;
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // validated against overflow when read
  return n;
}

std::string TensorInfo::shape_string() const {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < dims.size(); ++i) s << (i ? ", " : "") << dims[i];
  s << "]";
  return s.str();
}

Value Value::string_array(const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(Value::string(s));
  return array(ValueType::kString, std::move(items));
}
Value Value::f32_array(const std::vector<float>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (float f : v) items.push_back(Value::f32(f));
  return array(ValueType::kFloat32, std::move(items));
}
Value Value::i32_array(const std::vector<int32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (int32_t i : v) items.push_back(Value::i32(i));
  return array(ValueType::kInt32, std::move(items));
}

bool Array::operator==(const Array& o) const { return elem_type == o.elem_type && items == o.items; }

bool Value::operator==(const Value& o) const {
  if (type != o.type || data.index() != o.data.index()) return false;
  if (const auto* d = std::get_if<double>(&data)) {
    // Bitwise, so that NaN payloads round-trip and compare equal to themselves.
    return std::memcmp(d, &std::get<double>(o.data), sizeof(double)) == 0;
  }
  return data == o.data;
}

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Metadata::set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

namespace {

std::string quoted(std::string_view key) { return "metadata key '" + std::string(key) + "'"; }

Status missing(std::string_view key) { return Status::error(quoted(key) + " is missing"); }

Status wrong_type(std::string_view key, const Value& v, const char* expected) {
  return Status::error(quoted(key) + " has type " + value_type_name(v.type) + ", expected " + expected);
}

std::optional<int64_t> as_int(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    if (*u > uint64_t(INT64_MAX)) return std::nullopt;
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  return std::nullopt;
}

std::optional<double> as_float(const Value& v) {
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  if (auto i = as_int(v)) return double(*i);
  return std::nullopt;
}

const Array* as_array(const Value& v) { return std::get_if<Array>(&v.data); }

}  // namespace

Result<int64_t> Metadata::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto i = as_int(*v);
  if (!i) return wrong_type(key, *v, "an integer");
  return *i;
}

Result<int64_t> Metadata::get_int_or(std::string_view key, int64_t fallback) const {
  return contains(key) ? get_int(key) : Result<int64_t>(fallback);
}

Result<double> Metadata::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto f = as_float(*v);
  if (!f) return wrong_type(key, *v, "a number");
  return *f;
}

Result<double> Metadata::get_float_or(std::string_view key, double fallback) const {
  return contains(key) ? get_float(key) : Result<double>(fallback);
}

Result<bool> Metadata::get_bool_or(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  return wrong_type(key, *v, "a bool");
}

Result<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (const auto* s = std::get_if<std::string>(&v->data)) return *s;
  return wrong_type(key, *v, "a string");
}

Result<std::string> Metadata::get_string_or(std::string_view key, std::string fallback) const {
  return contains(key) ? get_string(key) : Result<std::string>(std::move(fallback));
}

Result<std::vector<std::string>> Metadata::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  const Array* a = as_array(*v);
  if (!a || a->elem_type != ValueType::kString) return wrong_type(key, *v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) out.push_back(std::get<std::string>(item.data));
  return out;
}

Result<std::vector<float>> Metadata::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  const Array* a = as_array(*v);
  if (!a) return wrong_type(key, *v, "an array of numbers");
  std::vector<float> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) {
    auto f = as_float(item);
    if (!f) return wrong_type(key, *v, "an array of numbers");
    out.push_back(float(*f));
  }
  return out;
}

Result<std::vector<int64_t>> Metadata::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  const Array* a = as_array(*v);
  if (!a) return wrong_type(key, *v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) {
    auto i = as_int(item);
    if (!i) return wrong_type(key, *v, "an array of integers");
    out.push_back(*i);
  }
  return out;
}

}  // namespace bitsplit::gguf
