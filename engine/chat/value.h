// The dynamic value of the chat-template interpreter, with Python's semantics where templates
// can see them: truthiness, str() and repr() text, equality and ordering, JSON in and out.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bitsplit/status.h"

namespace bitsplit::chat {

class Interpreter;
struct Value;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

struct List {
  std::vector<Value> items;
  bool tuple = false;  // a tuple renders as (a, b)
};

// Plain dicts keep insertion order (Python 3.7+). A namespace() and the loop object are dicts
// whose keys are reached as attributes only (no dict methods) and that render differently.
enum class DictKind { kPlain, kNamespace, kLoop };
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  DictKind kind = DictKind::kPlain;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// Positional and keyword arguments of one call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* keyword_arg(std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Result<Value>(Interpreter&, const CallArgs&)> call;
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string text;  // a string's value; for undefined, the name that was missing (for errors)
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<const Callable> callable;

  static Value undefined(std::string hint = {});
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double f);
  static Value from_string(std::string s);
  static Value new_list(std::vector<Value> items = {}, bool tuple = false);
  static Value new_dict(DictKind kind = DictKind::kPlain);
  static Value function(std::string name, std::function<Result<Value>(Interpreter&, const CallArgs&)> fn);
  // A JSON value as a template value; refused when nested deeper than kMaxJsonDepth (a deep
  // value would take the conversion, and the value's destruction, deep into the stack).
  static constexpr int kMaxJsonDepth = 128;
  static Result<Value> from_json(const nlohmann::json& j);          // object keys come sorted
  static Result<Value> from_json(const nlohmann::ordered_json& j);  // object keys keep their order

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_mapping() const { return kind == Kind::kDict && dict->kind == DictKind::kPlain; }
  double as_double() const;
};

// Python's type name, for error messages ("'int' object is not iterable").
std::string type_name(const Value& v);
bool truthy(const Value& v);
// str(v) as {{ v }} prints it (undefined prints nothing) and repr(v) as lists print their items.
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string python_float_repr(double d);
bool equals(const Value& a, const Value& b);
// <0, 0, >0; an error for types Python cannot order ("'<' not supported between ...").
Result<int> compare(const Value& a, const Value& b);
// The items iteration yields: list items, dict keys, string characters; undefined yields none.
Result<std::vector<Value>> iterate(const Value& v);
// len(v); an error for values without a length.
Result<int64_t> length(const Value& v);

// json.dumps(v, ensure_ascii=..., indent=..., separators=..., sort_keys=...) as Python writes it.
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;  // -1: no newlines
  std::string indent_text;  // used when indent is given as a string
  bool indent_is_text = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
Result<std::string> to_json(const Value& v, const JsonOptions& options);

}  // namespace bitsplit::chat
