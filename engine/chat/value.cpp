// Value: construction, Python truthiness/str/repr, equality, ordering, iteration and json.dumps.
#include "value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "unicode.h"

namespace bitsplit::chat {

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.kind == Kind::kString && k.text == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::keyword_arg(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.text = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::from_bool(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}
Value Value::from_int(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.integer = i;
  return v;
}
Value Value::from_float(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.number = f;
  return v;
}
Value Value::from_string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(s);
  return v;
}
Value Value::new_list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<List>();
  v.list->items = std::move(items);
  v.list->tuple = tuple;
  return v;
}
Value Value::new_dict(DictKind kind) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>();
  v.dict->kind = kind;
  return v;
}
Value Value::function(std::string name, std::function<Result<Value>(Interpreter&, const CallArgs&)> fn) {
  Value v;
  v.kind = Kind::kCallable;
  v.callable = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

namespace {
// How deep a JSON value nests (iteratively: the value may be deeper than the stack allows).
template <typename Json>
bool nests_deeper_than(const Json& root, int limit) {
  std::vector<std::pair<const Json*, int>> todo{{&root, 0}};
  while (!todo.empty()) {
    auto [j, depth] = todo.back();
    todo.pop_back();
    if (!j->is_structured()) continue;
    if (depth >= limit) return true;
    for (const auto& child : *j) todo.emplace_back(&child, depth + 1);
  }
  return false;
}

template <typename Json>
Value value_from_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::detail::value_t::object: {
      Value d = Value::new_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict->entries.emplace_back(Value::from_string(it.key()), value_from_json(*it));
      return d;
    }
    case nlohmann::detail::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e));
      return Value::new_list(std::move(items));
    }
    case nlohmann::detail::value_t::string: return Value::from_string(j.template get<std::string>());
    case nlohmann::detail::value_t::boolean: return Value::from_bool(j.template get<bool>());
    case nlohmann::detail::value_t::number_integer: return Value::from_int(j.template get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::from_int(static_cast<int64_t>(u))
                                                   : Value::from_float(static_cast<double>(u));
    }
    case nlohmann::detail::value_t::number_float: return Value::from_float(j.template get<double>());
    default: return Value::none();
  }
}

template <typename Json>
Result<Value> checked_from_json(const Json& j) {
  if (nests_deeper_than(j, Value::kMaxJsonDepth)) {
    return Status::error("a value is nested more than " + std::to_string(Value::kMaxJsonDepth) + " levels deep");
  }
  return value_from_json(j);
}

}  // namespace

Result<Value> Value::from_json(const nlohmann::json& j) { return checked_from_json(j); }
Result<Value> Value::from_json(const nlohmann::ordered_json& j) { return checked_from_json(j); }

double Value::as_double() const {
  switch (kind) {
    case Kind::kBool: return boolean ? 1.0 : 0.0;
    case Kind::kInt: return static_cast<double>(integer);
    case Kind::kFloat: return number;
    default: return 0.0;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return v.list->tuple ? "tuple" : "list";
    case Kind::kDict:
      return v.dict->kind == DictKind::kNamespace ? "Namespace"
             : v.dict->kind == DictKind::kLoop    ? "LoopContext"
                                                  : "dict";
    case Kind::kCallable: return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.boolean;
    case Kind::kInt: return v.integer != 0;
    case Kind::kFloat: return v.number != 0.0;
    case Kind::kString: return !v.text.empty();
    case Kind::kList: return !v.list->items.empty();
    case Kind::kDict: return v.dict->kind != DictKind::kPlain || !v.dict->entries.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  const int decpt = exponent + 1;  // digits d1 d2 ... with the point after decpt of them
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out = digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
  }
  return sign + out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) ||
               c == 0x3000 || c == 0xFEFF || c == 0x1680 || (c >= 0xD800 && c <= 0xF8FF) ||
               (c >= 0xFFF9 && c <= 0xFFFB)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

namespace {

// Containers being printed now, innermost last: one met again is a cycle (a namespace or list
// that holds itself), printed as Python's repr does ("[...]", "{...}").
thread_local std::vector<const void*> g_printing;

struct Printing {
  explicit Printing(const void* p) { g_printing.push_back(p); }
  ~Printing() { g_printing.pop_back(); }
  static bool active(const void* p) { return std::find(g_printing.begin(), g_printing.end(), p) != g_printing.end(); }
};

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.boolean ? "True" : "False";
    case Kind::kInt: return std::to_string(v.integer);
    case Kind::kFloat: return python_float_repr(v.number);
    case Kind::kString: return repr_string(v.text);
    case Kind::kList: {
      if (Printing::active(v.list.get())) return v.list->tuple ? "(...)" : "[...]";
      Printing guard(v.list.get());
      std::string out = v.list->tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->items.size(); ++i) {
        if (i) out += ", ";
        out += repr(v.list->items[i]);
      }
      if (v.list->tuple && v.list->items.size() == 1) out += ",";
      out += v.list->tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      if (Printing::active(v.dict.get())) return v.dict->kind == DictKind::kNamespace ? "<Namespace {...}>" : "{...}";
      Printing guard(v.dict.get());
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict->entries) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(val);
      }
      out += "}";
      if (v.dict->kind == DictKind::kNamespace) return "<Namespace " + out + ">";
      if (v.dict->kind == DictKind::kLoop) return "<LoopContext>";
      return out;
    }
    case Kind::kCallable: return "<function " + v.callable->name + ">";
  }
  return "";
}

std::string to_str(const Value& v) {
  if (v.kind == Kind::kString) return v.text;
  return repr(v);
}

namespace {
bool equals_at(const Value& a, const Value& b, int depth);
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

namespace {

// Python compares containers item by item, the same object being equal to itself; two distinct
// containers that hold themselves would recurse forever (Python: RecursionError), so past a
// depth no template reaches they compare unequal.
bool equals_at(const Value& a, const Value& b, int depth) {
  if (depth > 256) return false;
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) {
      const int64_t x = a.kind == Kind::kBool ? a.boolean : a.integer;
      const int64_t y = b.kind == Kind::kBool ? b.boolean : b.integer;
      return x == y;
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.text == b.text;
    case Kind::kList: {
      if (a.list == b.list) return true;
      if (a.list->tuple != b.list->tuple || a.list->items.size() != b.list->items.size()) return false;
      for (size_t i = 0; i < a.list->items.size(); ++i)
        if (!equals_at(a.list->items[i], b.list->items[i], depth + 1)) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.dict->kind != DictKind::kPlain || b.dict->kind != DictKind::kPlain || a.dict == b.dict) return a.dict == b.dict;
      if (a.dict->entries.size() != b.dict->entries.size()) return false;
      for (const auto& [k, v] : a.dict->entries) {
        const Value* other = b.dict->find(k);
        if (!other || !equals_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable: return a.callable == b.callable;
    default: return false;
  }
}

}  // namespace

Result<int> compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) {
      const int64_t x = a.kind == Kind::kBool ? a.boolean : a.integer;
      const int64_t y = b.kind == Kind::kBool ? b.boolean : b.integer;
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == Kind::kString && b.kind == Kind::kString) {
    const int c = a.text.compare(b.text);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind == Kind::kList && b.kind == Kind::kList && a.list->tuple == b.list->tuple) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return Status::error("'<' not supported between instances of '" + type_name(a) + "' and '" +
                       type_name(b) + "'");
}

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return std::vector<Value>{};
    case Kind::kList: return v.list->items;
    case Kind::kDict: {
      std::vector<Value> keys;
      if (v.dict->kind != DictKind::kPlain)
        return Status::error("'" + type_name(v) + "' object is not iterable");
      for (const auto& [k, val] : v.dict->entries) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.text)) {
        std::string s;
        utf8_append(s, c);
        chars.push_back(Value::from_string(std::move(s)));
      }
      return chars;
    }
    default: return Status::error("'" + type_name(v) + "' object is not iterable");
  }
}

Result<int64_t> length(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return int64_t{0};
    case Kind::kString: return static_cast<int64_t>(utf8_length(v.text));
    case Kind::kList: return static_cast<int64_t>(v.list->items.size());
    case Kind::kDict:
      if (v.dict->kind == DictKind::kPlain) return static_cast<int64_t>(v.dict->entries.size());
      break;
    default: break;
  }
  return Status::error("object of type '" + type_name(v) + "' has no len()");
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        const char32_t u = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + static_cast<unsigned>(u >> 10),
                      0xDC00 + static_cast<unsigned>(u & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(d);
}

Status json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > 512) return Status::error("tojson: value nested too deeply");
  auto newline = [&](int level) {
    if (o.indent < 0 && !o.indent_is_text) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += o.indent_is_text ? o.indent_text : std::string(o.indent, ' ');
  };
  const bool pretty = o.indent >= 0 || o.indent_is_text;
  switch (v.kind) {
    case Kind::kNone: out += "null"; return Status::ok();
    case Kind::kBool: out += v.boolean ? "true" : "false"; return Status::ok();
    case Kind::kInt: out += std::to_string(v.integer); return Status::ok();
    case Kind::kFloat: out += json_float(v.number); return Status::ok();
    case Kind::kString: json_string(out, v.text, o.ensure_ascii); return Status::ok();
    case Kind::kList: {
      if (v.list->items.empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < v.list->items.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) newline(depth + 1);
        BITSPLIT_RETURN_IF_ERROR(json_value(out, v.list->items[i], o, depth + 1));
      }
      if (pretty) newline(depth);
      out += ']';
      return Status::ok();
    }
    case Kind::kDict: {
      if (v.dict->kind != DictKind::kPlain) break;
      if (v.dict->entries.empty()) {
        out += "{}";
        return Status::ok();
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, val] : v.dict->entries) {
        std::string key;
        switch (k.kind) {
          case Kind::kString: key = k.text; break;
          case Kind::kInt: key = std::to_string(k.integer); break;
          case Kind::kFloat: key = json_float(k.number); break;
          case Kind::kBool: key = k.boolean ? "true" : "false"; break;
          case Kind::kNone: key = "null"; break;
          default:
            return Status::error("keys must be str, int, float, bool or None, not " + type_name(k));
        }
        items.emplace_back(std::move(key), &val);
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) newline(depth + 1);
        json_string(out, items[i].first, o.ensure_ascii);
        out += o.key_separator;
        BITSPLIT_RETURN_IF_ERROR(json_value(out, *items[i].second, o, depth + 1));
      }
      if (pretty) newline(depth);
      out += '}';
      return Status::ok();
    }
    default: break;
  }
  return Status::error("Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

Result<std::string> to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  BITSPLIT_RETURN_IF_ERROR(json_value(out, v, options, 0));
  return out;
}

}  // namespace bitsplit::chat
