// jinja2's tests (`x is defined`, `x is divisibleby 3`, ...) with Python's semantics.
#include <algorithm>
#include <cmath>

#include "builtins.h"
#include "interpreter.h"
#include "unicode.h"

namespace bitsplit::chat {

namespace {

bool is_int_value(const Value& v) { return v.kind == Kind::kInt; }

Result<bool> compare_test(const Value& a, const CallArgs& args, std::string_view op) {
  if (args.positional.size() != 1) return Status::error("test '" + std::string(op) + "' takes one argument");
  const Value& b = args.positional[0];
  if (op == "eq") return equals(a, b);
  if (op == "ne") return !equals(a, b);
  if (a.is_undefined() && !a.text.empty()) return Status::error(a.text);
  auto c = compare(a, b);
  if (!c.is_ok()) return c.status();
  if (op == "lt") return *c < 0;
  if (op == "le") return *c <= 0;
  if (op == "gt") return *c > 0;
  return *c >= 0;
}

constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
    "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined",
    "upper", "==", "!=", "<", "<=", ">", ">="};
}  // namespace

bool is_known_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Result<bool> apply_test(Interpreter& in, std::string_view name, const Value& v, const CallArgs& args) {
  (void)in;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.boolean;
  if (name == "false") return v.kind == Kind::kBool && !v.boolean;
  if (name == "integer") return is_int_value(v);
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_mapping();
  if (name == "callable") return v.kind == Kind::kCallable;
  if (name == "escaped") return false;
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
  if (name == "lower") {
    const std::string s = to_str(v);
    return lower(s) == s && upper(s) != s;
  }
  if (name == "upper") {
    const std::string s = to_str(v);
    return upper(s) == s && lower(s) != s;
  }
  if (name == "filter" || name == "test") {
    if (!v.is_string()) return false;
    return name == "filter" ? is_known_filter(v.text) : is_known_test(v.text);
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    int64_t divisor = 2;
    if (name == "divisibleby") {
      if (args.positional.size() != 1 || args.positional[0].kind != Kind::kInt)
        return Status::error("divisibleby needs an integer argument");
      divisor = args.positional[0].integer;
      if (divisor == 0) return Status::error("integer division or modulo by zero");
    }
    if (v.kind == Kind::kInt || v.kind == Kind::kBool) {
      const int64_t i = v.kind == Kind::kBool ? v.boolean : v.integer;
      const int64_t m = ((i % divisor) + divisor) % divisor;
      return name == "odd" ? m == 1 : m == 0;
    }
    if (v.kind == Kind::kFloat) {
      double m = std::fmod(v.number, static_cast<double>(divisor));
      if (m != 0 && ((m < 0) != (divisor < 0))) m += static_cast<double>(divisor);
      return name == "odd" ? m == 1.0 : m == 0.0;
    }
    return Status::error("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
  }
  if (name == "sameas") {
    if (args.positional.size() != 1) return Status::error("sameas takes one argument");
    const Value& o = args.positional[0];
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case Kind::kList: return v.list == o.list;
      case Kind::kDict: return v.dict == o.dict;
      case Kind::kCallable: return v.callable == o.callable;
      default: return equals(v, o);
    }
  }
  if (name == "in") {
    if (args.positional.size() != 1) return Status::error("test 'in' takes one argument");
    const Value& seq = args.positional[0];
    if (seq.is_string()) {
      if (!v.is_string()) return Status::error("'in <string>' requires string as left operand, not " + type_name(v));
      return seq.text.find(v.text) != std::string::npos;
    }
    if (seq.is_list()) {
      for (const auto& item : seq.list->items)
        if (equals(item, v)) return true;
      return false;
    }
    if (seq.is_mapping()) return seq.dict->find(v) != nullptr;
    if (seq.is_undefined()) return false;
    return Status::error("argument of type '" + type_name(seq) + "' is not iterable");
  }
  if (name == "eq" || name == "equalto" || name == "==") return compare_test(v, args, "eq");
  if (name == "ne" || name == "!=") return compare_test(v, args, "ne");
  if (name == "lt" || name == "lessthan" || name == "<") return compare_test(v, args, "lt");
  if (name == "le" || name == "<=") return compare_test(v, args, "le");
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_test(v, args, "gt");
  if (name == "ge" || name == ">=") return compare_test(v, args, "ge");
  return Status::error("unsupported test '" + std::string(name) + "'");
}

}  // namespace bitsplit::chat
