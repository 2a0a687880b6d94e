// jinja2's filters and tests as chat templates use them (and tojson as Hugging Face defines it:
// json.dumps with ensure_ascii=False).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "builtins.h"
#include "interpreter.h"
#include "unicode.h"

namespace bitsplit::chat {

namespace {

// The argument at `index` or named `name`, or null.
const Value* arg(const CallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.keyword_arg(name);
}

bool arg_bool(const CallArgs& args, size_t index, std::string_view name, bool dflt) {
  const Value* v = arg(args, index, name);
  return v ? truthy(*v) : dflt;
}

Status check_args(const CallArgs& args, std::string_view filter, size_t max_positional,
                  std::initializer_list<std::string_view> keywords) {
  if (args.positional.size() > max_positional)
    return Status::error(std::string(filter) + " takes at most " + std::to_string(max_positional) +
                         " positional argument(s)");
  for (const auto& [name, v] : args.keyword) {
    if (std::find(keywords.begin(), keywords.end(), name) == keywords.end())
      return Status::error(std::string(filter) + " got an unexpected keyword argument '" + name + "'");
  }
  return Status::ok();
}

// jinja2's attribute getter: "a.b.0" walks attributes and items, integers as indices.
Result<Value> get_path(Interpreter& in, const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key;
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value::from_int(std::strtoll(part.c_str(), nullptr, 10));
    } else {
      key = Value::from_string(part);
    }
    auto next = in.get_item(current, key);
    if (!next.is_ok()) return next;
    current = std::move(next).value();
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

Result<std::string> attribute_arg(const Value* v) {
  if (!v) return std::string();
  if (v->is_string()) return v->text;
  if (v->kind == Kind::kInt) return std::to_string(v->integer);
  return Status::error("attribute must be a string");
}

Value lowered(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::from_string(lower(v.text));
  return v;
}

// The item itself, or the value at its attribute path when one is given.
Result<Value> attribute_of(Interpreter& in, const Value& item, const std::string& attribute) {
  if (attribute.empty()) return item;
  return get_path(in, item, attribute);
}

Result<Value> sort_filter(Interpreter& in, const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "sort", 3, {"reverse", "case_sensitive", "attribute"}));
  const bool reverse = arg_bool(args, 0, "reverse", false);
  const bool case_sensitive = arg_bool(args, 1, "case_sensitive", false);
  auto attribute = attribute_arg(arg(args, 2, "attribute"));
  if (!attribute.is_ok()) return attribute.status();
  auto items = iterate(value);
  if (!items.is_ok()) return items.status();
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : *items) {
    auto key_or = attribute_of(in, item, *attribute);
    if (!key_or.is_ok()) return key_or.status();
    Value key = std::move(key_or).value();
    keyed.emplace_back(lowered(key, case_sensitive), item);
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto c = reverse ? compare(b.first, a.first) : compare(a.first, b.first);
    if (!c.is_ok()) {
      if (error.is_ok()) error = c.status();
      return false;
    }
    return *c < 0;
  });
  if (!error.is_ok()) return error;
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::new_list(std::move(out));
}

Result<Value> select_filter(Interpreter& in, const Value& value, const CallArgs& args, bool attr, bool select) {
  auto items = iterate(value);
  if (!items.is_ok()) return items.status();
  size_t next_arg = 0;
  std::string attribute;
  if (attr) {
    if (args.positional.empty()) return Status::error("selectattr/rejectattr need an attribute name");
    auto a = attribute_arg(&args.positional[0]);
    if (!a.is_ok()) return a.status();
    attribute = *a;
    next_arg = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next_arg < args.positional.size()) {
    if (!args.positional[next_arg].is_string()) return Status::error("the test name must be a string");
    test = args.positional[next_arg].text;
    if (!is_known_test(test)) return Status::error("unsupported test '" + test + "'");
    test_args.positional.assign(args.positional.begin() + next_arg + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (auto& item : *items) {
    Value subject = item;
    if (attr) {
      auto v = get_path(in, item, attribute);
      if (!v.is_ok()) return v.status();
      subject = std::move(v).value();
    }
    bool pass = false;
    if (test.empty()) {
      pass = truthy(subject);
    } else {
      auto r = apply_test(in, test, subject, test_args);
      if (!r.is_ok()) return r.status();
      pass = *r;
    }
    if (pass == select) out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

Result<Value> map_filter(Interpreter& in, const Value& value, const CallArgs& args) {
  auto items = iterate(value);
  if (!items.is_ok()) return items.status();
  std::vector<Value> out;
  if (args.positional.empty()) {
    auto attribute = attribute_arg(args.keyword_arg("attribute"));
    if (!attribute.is_ok()) return attribute.status();
    if (attribute->empty()) return Status::error("map needs a filter name or attribute=");
    const Value* dflt = args.keyword_arg("default");
    for (auto& item : *items) {
      auto v = get_path(in, item, *attribute);
      if (!v.is_ok()) return v.status();
      out.push_back(v->is_undefined() && dflt ? *dflt : std::move(v).value());
    }
    return Value::new_list(std::move(out));
  }
  if (!args.positional[0].is_string()) return Status::error("the filter name must be a string");
  const std::string filter = args.positional[0].text;
  if (!is_known_filter(filter)) return Status::error("unsupported filter '" + filter + "'");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (auto& item : *items) {
    auto v = apply_filter(in, filter, item, rest);
    if (!v.is_ok()) return v;
    out.push_back(std::move(v).value());
  }
  return Value::new_list(std::move(out));
}

Result<Value> tojson_filter(const Value& value, const CallArgs& args) {
  // Hugging Face: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions o;
  o.ensure_ascii = arg_bool(args, 0, "ensure_ascii", false);
  if (const Value* indent = arg(args, 1, "indent"); indent && !indent->is_none()) {
    if (indent->kind == Kind::kInt || indent->kind == Kind::kBool) {
      o.indent = std::max<int64_t>(0, std::min<int64_t>(indent->kind == Kind::kBool ? indent->boolean : indent->integer, 1000));
    } else if (indent->is_string()) {
      o.indent_is_text = true;
      o.indent_text = indent->text;
    } else {
      return Status::error("tojson: indent must be an integer or a string");
    }
    o.item_separator = ",";
  }
  if (const Value* sep = arg(args, 2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->list->items.size() != 2 || !sep->list->items[0].is_string() ||
        !sep->list->items[1].is_string())
      return Status::error("tojson: separators must be a pair of strings");
    o.item_separator = sep->list->items[0].text;
    o.key_separator = sep->list->items[1].text;
  }
  o.sort_keys = arg_bool(args, 3, "sort_keys", false);
  auto s = to_json(value, o);
  if (!s.is_ok()) return s.status();
  return Value::from_string(std::move(s).value());
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// jinja2's title filter: upper-case the first character after the start, whitespace or -({[<.
std::string title_filter(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char32_t c : utf8_decode(s)) {
    const bool delimiter = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (delimiter) {
      utf8_append(out, c);
      word_start = true;
      continue;
    }
    if (word_start) {
      if (c == 0xDF) {
        out += "SS";
      } else {
        utf8_append(out, to_upper(c));
      }
    } else {
      utf8_append(out, to_lower(c));
    }
    word_start = false;
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::string current;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      lines.push_back(std::move(current));
      current.clear();
    } else {
      current += s[i];
    }
  }
  if (!current.empty()) lines.push_back(std::move(current));
  return lines;
}

Result<Value> indent_filter(const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "indent", 3, {"width", "first", "blank"}));
  std::string indentation = "    ";
  if (const Value* w = arg(args, 0, "width")) {
    if (w->is_string()) {
      indentation = w->text;
    } else if (w->kind == Kind::kInt) {
      indentation = std::string(static_cast<size_t>(std::clamp<int64_t>(w->integer, 0, 1000)), ' ');
    } else {
      return Status::error("indent: width must be an integer or a string");
    }
  }
  const bool first = arg_bool(args, 1, "first", false);
  const bool blank = arg_bool(args, 2, "blank", false);
  const std::vector<std::string> lines = split_lines(to_str(value) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += indentation;
    }
    out += lines[i];
  }
  if (first) out = indentation + out;
  return Value::from_string(std::move(out));
}

Result<Value> round_filter(const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "round", 2, {"precision", "method"}));
  int64_t precision = 0;
  if (const Value* p = arg(args, 0, "precision")) {
    if (p->kind != Kind::kInt) return Status::error("round: precision must be an integer");
    precision = std::clamp<int64_t>(p->integer, -300, 300);
  }
  std::string method = "common";
  if (const Value* m = arg(args, 1, "method")) method = to_str(*m);
  if (method != "common" && method != "ceil" && method != "floor")
    return Status::error("method must be common, ceil or floor");
  if (!value.is_number()) return Status::error("round: '" + type_name(value) + "' is not a number");
  if (value.kind != Kind::kFloat && method == "common") return Value::from_int(value.kind == Kind::kBool ? value.boolean : value.integer);
  const double x = value.as_double();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  double r = 0;
  if (method == "common") {
    if (precision >= 0 && precision <= 30 && std::isfinite(x)) {
      // Python rounds the exact binary value to `precision` decimals (2.675 -> 2.67); printf does too.
      char buf[400];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
      r = std::strtod(buf, nullptr);
    } else {
      r = std::nearbyint(x * scale) / scale;
    }
  } else if (method == "ceil") {
    r = std::ceil(x * scale) / scale;
  } else {
    r = std::floor(x * scale) / scale;
  }
  return Value::from_float(r);
}

Result<Value> min_max(Interpreter& in, const Value& value, const CallArgs& args, bool max) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, max ? "max" : "min", 2, {"case_sensitive", "attribute"}));
  const bool case_sensitive = arg_bool(args, 0, "case_sensitive", false);
  auto attribute = attribute_arg(arg(args, 1, "attribute"));
  if (!attribute.is_ok()) return attribute.status();
  auto items = iterate(value);
  if (!items.is_ok()) return items.status();
  const Value* best = nullptr;
  Value best_key;
  for (const auto& item : *items) {
    auto key_or = attribute_of(in, item, *attribute);
    if (!key_or.is_ok()) return key_or.status();
    Value key = std::move(key_or).value();
    key = lowered(key, case_sensitive);
    if (best) {
      auto c = compare(key, best_key);
      if (!c.is_ok()) return c.status();
      if (max ? *c <= 0 : *c >= 0) continue;
    }
    best = &item;
    best_key = key;
  }
  if (!best) return Value::undefined("No aggregated item, sequence was empty.");
  return *best;
}

Result<Value> int_filter(const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "int", 2, {"default", "base"}));
  const Value* dflt = arg(args, 0, "default");
  int base = 10;
  if (const Value* b = arg(args, 1, "base"); b && b->kind == Kind::kInt) base = static_cast<int>(b->integer);
  if (value.kind == Kind::kInt) return value;
  if (value.kind == Kind::kBool) return Value::from_int(value.boolean);
  if (value.kind == Kind::kFloat && std::isfinite(value.number) && std::fabs(value.number) < 9.2e18)
    return Value::from_int(static_cast<int64_t>(value.number));
  if (value.is_string()) {
    std::string s = strip(value.text, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty() && base >= 2 && base <= 36) {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(s.c_str(), &end, base);
      if (*end == '\0' && errno == 0) return Value::from_int(v);
      const double d = std::strtod(s.c_str(), &end);
      if (*end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::from_int(static_cast<int64_t>(d));
    }
  }
  return dflt ? *dflt : Value::from_int(0);
}

Result<Value> float_filter(const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "float", 1, {"default"}));
  const Value* dflt = arg(args, 0, "default");
  if (value.is_number()) return Value::from_float(value.as_double());
  if (value.is_string()) {
    const std::string s = strip(value.text, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::from_float(d);
  }
  return dflt ? *dflt : Value::from_float(0.0);
}

Result<Value> unique_filter(Interpreter& in, const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "unique", 2, {"case_sensitive", "attribute"}));
  const bool case_sensitive = arg_bool(args, 0, "case_sensitive", false);
  auto attribute = attribute_arg(arg(args, 1, "attribute"));
  if (!attribute.is_ok()) return attribute.status();
  auto items = iterate(value);
  if (!items.is_ok()) return items.status();
  std::vector<Value> seen, out;
  for (const auto& item : *items) {
    auto key_or = attribute_of(in, item, *attribute);
    if (!key_or.is_ok()) return key_or.status();
    Value key = std::move(key_or).value();
    key = lowered(key, case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

Result<Value> dictsort_filter(const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "dictsort", 3, {"case_sensitive", "by", "reverse"}));
  if (!value.is_mapping()) return Status::error("dictsort: value must be a dict");
  const bool case_sensitive = arg_bool(args, 0, "case_sensitive", false);
  std::string by = "key";
  if (const Value* b = arg(args, 1, "by")) by = to_str(*b);
  if (by != "key" && by != "value") return Status::error("You can only sort by either \"key\" or \"value\"");
  const bool reverse = arg_bool(args, 2, "reverse", false);
  std::vector<Value> pairs;
  for (const auto& [k, v] : value.dict->entries) pairs.push_back(Value::new_list({k, v}, true));
  Status error;
  const size_t index = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const Value x = lowered(a.list->items[index], case_sensitive);
    const Value y = lowered(b.list->items[index], case_sensitive);
    auto c = reverse ? compare(y, x) : compare(x, y);
    if (!c.is_ok()) {
      if (error.is_ok()) error = c.status();
      return false;
    }
    return *c < 0;
  });
  if (!error.is_ok()) return error;
  return Value::new_list(std::move(pairs));
}

Result<Value> sum_filter(Interpreter& in, const Value& value, const CallArgs& args) {
  BITSPLIT_RETURN_IF_ERROR(check_args(args, "sum", 2, {"attribute", "start"}));
  auto attribute = attribute_arg(arg(args, 0, "attribute"));
  if (!attribute.is_ok()) return attribute.status();
  Value total = Value::from_int(0);
  if (const Value* s = arg(args, 1, "start")) total = *s;
  auto items = iterate(value);
  if (!items.is_ok()) return items.status();
  for (const auto& item : *items) {
    auto v_or = attribute_of(in, item, *attribute);
    if (!v_or.is_ok()) return v_or.status();
    Value v = std::move(v_or).value();
    if (!v.is_number() || !total.is_number())
      return Status::error("unsupported operand type(s) for +: '" + type_name(total) + "' and '" + type_name(v) + "'");
    if (total.kind != Kind::kFloat && v.kind != Kind::kFloat) {
      int64_t r = 0;
      if (__builtin_add_overflow(total.kind == Kind::kBool ? total.boolean : total.integer,
                                 v.kind == Kind::kBool ? v.boolean : v.integer, &r))
        return Status::error("integer overflow");
      total = Value::from_int(r);
    } else {
      total = Value::from_float(total.as_double() + v.as_double());
    }
  }
  return total;
}

size_t word_count(const std::string& s) {
  size_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(s)) {
    const bool w = is_alnum(c) || c == '_';  // regex \w
    if (w && !in_word) ++n;
    in_word = w;
  }
  return n;
}

struct FilterEntry {
  std::string_view name;
  Result<Value> (*fn)(Interpreter&, const Value&, const CallArgs&);
};

#define BITSPLIT_FILTER(body) [](Interpreter & in, const Value& value, const CallArgs& args) -> Result<Value> { \
  (void)in;                                                                                              \
  (void)args;                                                                                            \
  body                                                                                                   \
}

const FilterEntry kFilters[] = {
    {"abs", BITSPLIT_FILTER({
       if (value.kind == Kind::kInt || value.kind == Kind::kBool) {
         const int64_t i = value.kind == Kind::kBool ? value.boolean : value.integer;
         if (i == INT64_MIN) return Status::error("integer overflow");
         return Value::from_int(i < 0 ? -i : i);
       }
       if (value.kind == Kind::kFloat) return Value::from_float(std::fabs(value.number));
       return Status::error("bad operand type for abs(): '" + type_name(value) + "'");
     })},
    {"attr", BITSPLIT_FILTER({
       if (args.positional.size() != 1 || !args.positional[0].is_string()) return Status::error("attr needs a name");
       return in.get_attribute(value, args.positional[0].text);
     })},
    {"capitalize", BITSPLIT_FILTER({ return Value::from_string(capitalize(to_str(value))); })},
    {"count", BITSPLIT_FILTER({
       auto n = length(value);
       if (!n.is_ok()) return n.status();
       return Value::from_int(*n);
     })},
    {"d", BITSPLIT_FILTER({
       const Value* dflt = arg(args, 0, "default_value");
       const bool boolean = arg_bool(args, 1, "boolean", false);
       if (value.is_undefined() || (boolean && !truthy(value))) return dflt ? *dflt : Value::from_string("");
       return value;
     })},
    {"dictsort", BITSPLIT_FILTER({ return dictsort_filter(value, args); })},
    {"e", BITSPLIT_FILTER({ return Value::from_string(html_escape(to_str(value))); })},
    {"first", BITSPLIT_FILTER({
       auto items = iterate(value);
       if (!items.is_ok()) return items.status();
       if (items->empty()) return Value::undefined("No first item, sequence was empty.");
       return items->front();
     })},
    {"float", BITSPLIT_FILTER({ return float_filter(value, args); })},
    {"format", BITSPLIT_FILTER({
       if (!args.keyword.empty()) return Status::error("format: keyword arguments are not supported");
       auto s = format_percent(to_str(value), args.positional);
       if (!s.is_ok()) return s.status();
       return Value::from_string(std::move(s).value());
     })},
    {"indent", BITSPLIT_FILTER({ return indent_filter(value, args); })},
    {"int", BITSPLIT_FILTER({ return int_filter(value, args); })},
    {"items", BITSPLIT_FILTER({
       if (value.is_undefined()) return Value::new_list();
       if (!value.is_mapping()) return Status::error("Can only get item pairs from a mapping.");
       std::vector<Value> pairs;
       for (const auto& [k, v] : value.dict->entries) pairs.push_back(Value::new_list({k, v}, true));
       return Value::new_list(std::move(pairs));
     })},
    {"join", BITSPLIT_FILTER({
       BITSPLIT_RETURN_IF_ERROR(check_args(args, "join", 2, {"d", "attribute"}));
       const Value* sep = arg(args, 0, "d");
       const std::string separator = sep ? to_str(*sep) : std::string();
       auto attribute = attribute_arg(arg(args, 1, "attribute"));
       if (!attribute.is_ok()) return attribute.status();
       auto items = iterate(value);
       if (!items.is_ok()) return items.status();
       std::string out;
       for (size_t i = 0; i < items->size(); ++i) {
         if (i) out += separator;
         if (attribute->empty()) {
           out += to_str((*items)[i]);
         } else {
           auto v = get_path(in, (*items)[i], *attribute);
           if (!v.is_ok()) return v.status();
           out += to_str(*v);
         }
         if (out.size() > in.limits().max_output_bytes) return Status::error("join: result exceeds the output limit");
       }
       return Value::from_string(std::move(out));
     })},
    {"last", BITSPLIT_FILTER({
       auto items = iterate(value);
       if (!items.is_ok()) return items.status();
       if (items->empty()) return Value::undefined("No last item, sequence was empty.");
       return items->back();
     })},
    {"list", BITSPLIT_FILTER({
       auto items = iterate(value);
       if (!items.is_ok()) return items.status();
       return Value::new_list(std::move(items).value());
     })},
    {"lower", BITSPLIT_FILTER({ return Value::from_string(lower(to_str(value))); })},
    {"map", BITSPLIT_FILTER({ return map_filter(in, value, args); })},
    {"max", BITSPLIT_FILTER({ return min_max(in, value, args, true); })},
    {"min", BITSPLIT_FILTER({ return min_max(in, value, args, false); })},
    {"pprint", BITSPLIT_FILTER({ return Value::from_string(repr(value)); })},
    {"reject", BITSPLIT_FILTER({ return select_filter(in, value, args, false, false); })},
    {"rejectattr", BITSPLIT_FILTER({ return select_filter(in, value, args, true, false); })},
    {"replace", BITSPLIT_FILTER({
       bool found = false;
       Value m = method_of(Value::from_string(to_str(value)), "replace", &found);
       return in.call(m, args);
     })},
    {"reverse", BITSPLIT_FILTER({
       if (value.is_string()) {
         std::u32string cps = utf8_decode(value.text);
         std::reverse(cps.begin(), cps.end());
         return Value::from_string(utf8_encode(cps));
       }
       auto items = iterate(value);
       if (!items.is_ok()) return items.status();
       std::reverse(items->begin(), items->end());
       return Value::new_list(std::move(items).value());
     })},
    {"round", BITSPLIT_FILTER({ return round_filter(value, args); })},
    {"safe", BITSPLIT_FILTER({ return value; })},
    {"select", BITSPLIT_FILTER({ return select_filter(in, value, args, false, true); })},
    {"selectattr", BITSPLIT_FILTER({ return select_filter(in, value, args, true, true); })},
    {"sort", BITSPLIT_FILTER({ return sort_filter(in, value, args); })},
    {"string", BITSPLIT_FILTER({ return Value::from_string(to_str(value)); })},
    {"sum", BITSPLIT_FILTER({ return sum_filter(in, value, args); })},
    {"title", BITSPLIT_FILTER({ return Value::from_string(title_filter(to_str(value))); })},
    {"tojson", BITSPLIT_FILTER({ return tojson_filter(value, args); })},
    {"trim", BITSPLIT_FILTER({
       BITSPLIT_RETURN_IF_ERROR(check_args(args, "trim", 1, {"chars"}));
       const Value* chars = arg(args, 0, "chars");
       if (chars && !chars->is_none()) {
         const std::u32string set = utf8_decode(to_str(*chars));
         return Value::from_string(strip(to_str(value), true, true, &set));
       }
       return Value::from_string(strip(to_str(value), true, true));
     })},
    {"unique", BITSPLIT_FILTER({ return unique_filter(in, value, args); })},
    {"upper", BITSPLIT_FILTER({ return Value::from_string(upper(to_str(value))); })},
    {"wordcount", BITSPLIT_FILTER({ return Value::from_int(static_cast<int64_t>(word_count(to_str(value)))); })},
};

#undef BITSPLIT_FILTER

// Aliases share their target's function.
std::string_view canonical_filter(std::string_view name) {
  if (name == "default") return "d";
  if (name == "escape" || name == "forceescape") return "e";
  if (name == "length") return "count";
  return name;
}

const FilterEntry* find_filter(std::string_view name) {
  name = canonical_filter(name);
  for (const auto& f : kFilters)
    if (f.name == name && f.fn) return &f;
  return nullptr;
}

}  // namespace

bool is_known_filter(std::string_view name) { return find_filter(name) != nullptr; }

Result<Value> apply_filter(Interpreter& in, std::string_view name, const Value& value, const CallArgs& args) {
  const FilterEntry* f = find_filter(name);
  if (!f) return Status::error("unsupported filter '" + std::string(name) + "'");
  return f->fn(in, value, args);
}

}  // namespace bitsplit::chat
