// Python methods of str, dict and list as templates call them, the global functions, and
// str.format / %-formatting.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "builtins.h"
#include "interpreter.h"
#include "unicode.h"

namespace bitsplit::chat {

namespace {

using Method = std::function<Result<Value>(const Value& self, Interpreter& in, const CallArgs& args)>;

const Value* arg(const CallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.keyword_arg(name);
}

Result<std::string> string_arg(const CallArgs& args, size_t index, std::string_view name, std::string_view method) {
  const Value* v = arg(args, index, name);
  if (!v || !v->is_string())
    return Status::error(std::string(method) + "() argument must be str, not " + (v ? type_name(*v) : "missing"));
  return v->text;
}

int64_t int_arg(const CallArgs& args, size_t index, std::string_view name, int64_t dflt) {
  const Value* v = arg(args, index, name);
  if (!v || v->is_none()) return dflt;
  if (v->kind == Kind::kBool) return v->boolean;
  return v->kind == Kind::kInt ? v->integer : dflt;
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  for (auto& p : parts) items.push_back(Value::from_string(std::move(p)));
  return Value::new_list(std::move(items));
}

// str.split / str.rsplit.
Result<Value> split(const std::string& s, const CallArgs& args, bool from_right) {
  const Value* sep = arg(args, 0, "sep");
  int64_t maxsplit = int_arg(args, 1, "maxsplit", -1);
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    std::u32string cps = utf8_decode(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit == 0) {  // the rest, as it is (trailing whitespace kept)
        parts.push_back(utf8_encode(std::u32string_view(cps).substr(i)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_space(cps[j])) ++j;
      parts.push_back(utf8_encode(std::u32string_view(cps).substr(i, j - i)));
      if (maxsplit > 0) --maxsplit;
      i = j;
    }
    if (from_right) {
      for (auto& p : parts) {
        std::u32string c = utf8_decode(p);
        std::reverse(c.begin(), c.end());
        p = utf8_encode(c);
      }
      std::reverse(parts.begin(), parts.end());
    }
    return string_list(std::move(parts));
  }
  if (!sep->is_string()) return Status::error("must be str or None, not " + type_name(*sep));
  const std::string& d = sep->text;
  if (d.empty()) return Status::error("empty separator");
  if (!from_right) {
    size_t start = 0;
    while (maxsplit != 0) {
      const size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      parts.push_back(s.substr(start, p - start));
      start = p + d.size();
      if (maxsplit > 0) --maxsplit;
    }
    parts.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    while (maxsplit != 0 && end >= d.size()) {
      const size_t p = s.rfind(d, end - d.size());
      if (p == std::string::npos) break;
      parts.push_back(s.substr(p + d.size(), end - p - d.size()));
      end = p;
      if (maxsplit > 0) --maxsplit;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  return string_list(std::move(parts));
}

Result<Value> replace(const std::string& s, const CallArgs& args, size_t limit) {
  auto old_text = string_arg(args, 0, "old", "replace");
  if (!old_text.is_ok()) return old_text.status();
  auto new_text = string_arg(args, 1, "new", "replace");
  if (!new_text.is_ok()) return new_text.status();
  int64_t count = int_arg(args, 2, "count", -1);
  std::string out;
  if (old_text->empty()) {
    // Python inserts the replacement before every character and at the end.
    const std::u32string cps = utf8_decode(s);
    for (char32_t c : cps) {
      if (count != 0) {
        out += *new_text;
        if (count > 0) --count;
      }
      utf8_append(out, c);
      if (out.size() > limit) return Status::error("replace: result exceeds the output limit");
    }
    if (count != 0) out += *new_text;
    return Value::from_string(std::move(out));
  }
  size_t start = 0;
  while (count != 0) {
    const size_t p = s.find(*old_text, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += *new_text;
    start = p + old_text->size();
    if (count > 0) --count;
    if (out.size() > limit) return Status::error("replace: result exceeds the output limit");
  }
  out.append(s, start, std::string::npos);
  return Value::from_string(std::move(out));
}

Result<bool> affix_test(const std::string& s, const CallArgs& args, bool prefix, std::string_view method) {
  const Value* v = arg(args, 0, prefix ? "prefix" : "suffix");
  auto test = [&](const std::string& a) {
    return prefix ? s.compare(0, a.size(), a) == 0 && s.size() >= a.size()
                  : s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (v && v->is_string()) return test(v->text);
  if (v && v->is_list() && v->list->tuple) {
    for (const auto& item : v->list->items) {
      if (!item.is_string()) return Status::error(std::string(method) + "(): tuple items must be str");
      if (test(item.text)) return true;
    }
    return false;
  }
  return Status::error(std::string(method) + " first arg must be str or a tuple of str, not " +
                       (v ? type_name(*v) : "missing"));
}

int64_t code_point_index(const std::string& s, size_t byte_index) {
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte_index)));
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

Value strip_method(const std::string& s, const CallArgs& args, bool left, bool right) {
  const Value* chars = arg(args, 0, "chars");
  if (chars && chars->is_string()) {
    const std::u32string set = utf8_decode(chars->text);
    return Value::from_string(strip(s, left, right, &set));
  }
  return Value::from_string(strip(s, left, right));
}

// What a str method is called with: its own name (methods that share a body tell themselves
// apart by it, and errors name it), the string and the call's arguments.
struct StringCall {
  const std::string& name;
  const std::string& s;
  Interpreter& in;
  const CallArgs& args;
};

Result<Value> splitlines(const StringCall& c) {
  const std::string& s = c.s;
  std::vector<std::string> lines;
  std::string current;
  const bool keepends = c.args.positional.size() > 0 ? truthy(c.args.positional[0]) : false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      std::string end(1, s[i]);
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') end += s[++i];
      lines.push_back(keepends ? current + end : current);
      current.clear();
    } else {
      current += s[i];
    }
  }
  if (!current.empty()) lines.push_back(current);
  return string_list(std::move(lines));
}

Result<Value> starts_or_ends_with(const StringCall& c) {
  auto r = affix_test(c.s, c.args, c.name == "startswith", c.name);
  if (!r.is_ok()) return r.status();
  return Value::from_bool(*r);
}

// find, rfind, index, rindex: code-point positions.
Result<Value> find_substring(const StringCall& c) {
  auto sub = string_arg(c.args, 0, "sub", c.name);
  if (!sub.is_ok()) return sub.status();
  const bool reverse = c.name[0] == 'r';
  const size_t p = reverse ? c.s.rfind(*sub) : c.s.find(*sub);
  if (p == std::string::npos) {
    if (c.name == "index" || c.name == "rindex") return Status::error("substring not found");
    return Value::from_int(-1);
  }
  return Value::from_int(code_point_index(c.s, p));
}

Result<Value> count_substring(const StringCall& c) {
  auto sub = string_arg(c.args, 0, "sub", c.name);
  if (!sub.is_ok()) return sub.status();
  if (sub->empty()) return Value::from_int(static_cast<int64_t>(utf8_length(c.s)) + 1);
  int64_t n = 0;
  for (size_t p = c.s.find(*sub); p != std::string::npos; p = c.s.find(*sub, p + sub->size())) ++n;
  return Value::from_int(n);
}

Result<Value> join_method(const StringCall& c) {
  if (c.args.positional.size() != 1) return Status::error("join() takes exactly one argument");
  auto items = iterate(c.args.positional[0]);
  if (!items.is_ok()) return items.status();
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    if (!(*items)[i].is_string())
      return Status::error("sequence item " + std::to_string(i) + ": expected str instance, " +
                           type_name((*items)[i]) + " found");
    if (i) out += c.s;
    out += (*items)[i].text;
    if (out.size() > c.in.limits().max_output_bytes) return Status::error("join: result exceeds the output limit");
  }
  return Value::from_string(std::move(out));
}

Result<Value> format_method(const StringCall& c) {
  auto r = format_braces(c.s, c.args);
  if (!r.is_ok()) return r.status();
  return Value::from_string(std::move(r).value());
}

// removeprefix, removesuffix.
Result<Value> remove_affix(const StringCall& c) {
  const std::string& s = c.s;
  auto a = string_arg(c.args, 0, c.name == "removeprefix" ? "prefix" : "suffix", c.name);
  if (!a.is_ok()) return a.status();
  if (c.name == "removeprefix" && s.compare(0, a->size(), *a) == 0 && s.size() >= a->size())
    return Value::from_string(s.substr(a->size()));
  if (c.name == "removesuffix" && !a->empty() && s.size() >= a->size() &&
      s.compare(s.size() - a->size(), a->size(), *a) == 0)
    return Value::from_string(s.substr(0, s.size() - a->size()));
  return Value::from_string(s);
}

// partition, rpartition: a 3-tuple.
Result<Value> partition_method(const StringCall& c) {
  const std::string& s = c.s;
  auto sep = string_arg(c.args, 0, "sep", c.name);
  if (!sep.is_ok()) return sep.status();
  if (sep->empty()) return Status::error("empty separator");
  const size_t p = c.name == "partition" ? s.find(*sep) : s.rfind(*sep);
  if (p == std::string::npos) {
    return c.name == "partition"
               ? Value::new_list({Value::from_string(s), Value::from_string(""), Value::from_string("")}, true)
               : Value::new_list({Value::from_string(""), Value::from_string(""), Value::from_string(s)}, true);
  }
  return Value::new_list({Value::from_string(s.substr(0, p)), Value::from_string(*sep),
                          Value::from_string(s.substr(p + sep->size()))},
                         true);
}

bool is_decimal_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_letter(char32_t c) { return is_alnum(c) && !is_decimal_digit(c); }

using Call = const StringCall&;
template <std::string (*transform)(std::string_view)>
Result<Value> transformed(Call c) {
  return Value::from_string(transform(c.s));
}
template <bool (*pred)(char32_t)>
Result<Value> all_chars_are(Call c) {
  return Value::from_bool(all_chars(c.s, pred));
}

// The str methods templates may call, by name.
struct StringMethod {
  std::string_view name;
  Result<Value> (*call)(Call c);
};
constexpr StringMethod kStringMethods[] = {
    {"strip", [](Call c) -> Result<Value> { return strip_method(c.s, c.args, true, true); }},
    {"lstrip", [](Call c) -> Result<Value> { return strip_method(c.s, c.args, true, false); }},
    {"rstrip", [](Call c) -> Result<Value> { return strip_method(c.s, c.args, false, true); }},
    {"split", [](Call c) { return split(c.s, c.args, false); }},
    {"rsplit", [](Call c) { return split(c.s, c.args, true); }},
    {"splitlines", splitlines},
    {"startswith", starts_or_ends_with},
    {"endswith", starts_or_ends_with},
    {"upper", transformed<upper>},
    {"lower", transformed<lower>},
    {"title", transformed<title_method>},
    {"capitalize", transformed<capitalize>},
    {"replace", [](Call c) { return replace(c.s, c.args, c.in.limits().max_output_bytes); }},
    {"find", find_substring},
    {"rfind", find_substring},
    {"index", find_substring},
    {"rindex", find_substring},
    {"count", count_substring},
    {"join", join_method},
    {"format", format_method},
    {"removeprefix", remove_affix},
    {"removesuffix", remove_affix},
    {"partition", partition_method},
    {"rpartition", partition_method},
    {"isdigit", all_chars_are<is_decimal_digit>},
    {"isnumeric", all_chars_are<is_decimal_digit>},
    {"isdecimal", all_chars_are<is_decimal_digit>},
    {"isalpha", all_chars_are<is_letter>},
    {"isalnum", all_chars_are<is_alnum>},
    {"isspace", all_chars_are<is_space>},
    {"islower", [](Call c) -> Result<Value> { return Value::from_bool(lower(c.s) == c.s && upper(c.s) != c.s); }},
    {"isupper", [](Call c) -> Result<Value> { return Value::from_bool(upper(c.s) == c.s && lower(c.s) != c.s); }},
};

const StringMethod* string_method_named(const std::string& name) {
  for (const auto& m : kStringMethods)
    if (m.name == name) return &m;
  return nullptr;
}

Result<Value> string_method(const std::string& name, const std::string& s, Interpreter& in, const CallArgs& args) {
  if (const StringMethod* m = string_method_named(name)) return m->call({name, s, in, args});
  return Status::error("unsupported str method '" + name + "'");
}

constexpr std::string_view kUnsafeDictMethods[] = {"pop", "popitem", "setdefault", "update", "clear"};
constexpr std::string_view kUnsafeListMethods[] = {"append", "extend", "insert", "pop", "remove", "reverse",
                                                   "sort", "clear"};

template <size_t N>
bool contains_name(const std::string_view (&names)[N], const std::string& name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value unsafe(const Value& object, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(object) +
                          "' object is unsafe (the template may not modify it)");
}

Result<Value> dict_method(const std::string& name, const Value& self, const CallArgs& args) {
  const Dict& d = *self.dict;
  if (name == "items") {
    std::vector<Value> pairs;
    for (const auto& [k, v] : d.entries) pairs.push_back(Value::new_list({k, v}, true));
    return Value::new_list(std::move(pairs));
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.entries) out.push_back(name == "keys" ? k : v);
    return Value::new_list(std::move(out));
  }
  if (name == "get") {
    if (args.positional.empty() || args.positional.size() > 2) return Status::error("get expected 1 or 2 arguments");
    if (const Value* v = d.find(args.positional[0])) return *v;
    return args.positional.size() == 2 ? args.positional[1] : Value::none();
  }
  if (name == "copy") {
    Value copy = Value::new_dict();
    copy.dict->entries = d.entries;
    return copy;
  }
  return Status::error("unsupported dict method '" + name + "'");
}

Result<Value> list_method(const std::string& name, const Value& self, const CallArgs& args) {
  if (args.positional.size() != 1) return Status::error(name + "() takes exactly one argument");
  const auto& items = self.list->items;
  if (name == "count")
    return Value::from_int(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, args.positional[0]); }));
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], args.positional[0])) return Value::from_int(static_cast<int64_t>(i));
  return Status::error(repr(args.positional[0]) + " is not in list");
}

Value bind(const Value& self, const std::string& name) {
  return Value::function(name, [self, name](Interpreter& in, const CallArgs& args) -> Result<Value> {
    if (self.is_string()) return string_method(name, self.text, in, args);
    if (self.is_dict()) return dict_method(name, self, args);
    return list_method(name, self, args);
  });
}

std::string strftime_now(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  return std::string(buf, n);
}

}  // namespace

Value method_of(const Value& object, const std::string& name, bool* found) {
  *found = true;
  if (object.is_string() && string_method_named(name)) return bind(object, name);
  if (object.is_mapping()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy")
      return bind(object, name);
    if (contains_name(kUnsafeDictMethods, name)) return unsafe(object, name);
  }
  if (object.is_list()) {
    if (name == "index" || name == "count") return bind(object, name);
    if (!object.list->tuple && contains_name(kUnsafeListMethods, name)) return unsafe(object, name);
  }
  *found = false;
  return Value::undefined();
}

void add_globals(Dict& globals) {
  globals.set(Value::from_string("range"), Value::function("range", [](Interpreter&, const CallArgs& args) -> Result<Value> {
    constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox limit
    if (args.positional.empty() || args.positional.size() > 3 || !args.keyword.empty())
      return Status::error("range expected 1 to 3 integer arguments");
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < args.positional.size(); ++i) {
      const Value& a = args.positional[i];
      if (a.kind != Kind::kInt && a.kind != Kind::kBool)
        return Status::error("'" + type_name(a) + "' object cannot be interpreted as an integer");
      v[args.positional.size() == 1 ? 1 : i] = a.kind == Kind::kBool ? a.boolean : a.integer;
    }
    const int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0) return Status::error("range() arg 3 must not be zero");
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 count = span <= 0 ? 0 : (span + (step > 0 ? step : -static_cast<__int128>(step)) - 1) /
                                               (step > 0 ? step : -static_cast<__int128>(step));
    if (count > kMaxRange) return Status::error("range too big: more than 100000 items");
    std::vector<Value> items;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.push_back(Value::from_int(start + i * step));
    return Value::new_list(std::move(items));
  }));
  globals.set(Value::from_string("namespace"), Value::function("namespace", [](Interpreter& in, const CallArgs& args) -> Result<Value> {
    Value ns = Value::new_dict(DictKind::kNamespace);
    in.track_namespace(ns.dict);
    if (args.positional.size() > 1) return Status::error("namespace takes at most one positional argument");
    if (!args.positional.empty()) {
      if (!args.positional[0].is_mapping()) return Status::error("namespace: the positional argument must be a dict");
      ns.dict->entries = args.positional[0].dict->entries;
    }
    for (const auto& [k, v] : args.keyword) ns.dict->set(Value::from_string(k), v);
    return ns;
  }));
  globals.set(Value::from_string("dict"), Value::function("dict", [](Interpreter&, const CallArgs& args) -> Result<Value> {
    Value d = Value::new_dict();
    if (args.positional.size() > 1) return Status::error("dict takes at most one positional argument");
    if (!args.positional.empty()) {
      if (!args.positional[0].is_mapping()) return Status::error("dict: the positional argument must be a dict");
      d.dict->entries = args.positional[0].dict->entries;
    }
    for (const auto& [k, v] : args.keyword) d.dict->set(Value::from_string(k), v);
    return d;
  }));
  globals.set(Value::from_string("raise_exception"), Value::function("raise_exception", [](Interpreter& in, const CallArgs& args) -> Result<Value> {
    return in.raise(args.positional.empty() ? std::string() : to_str(args.positional[0]));
  }));
  globals.set(Value::from_string("strftime_now"), Value::function("strftime_now", [](Interpreter&, const CallArgs& args) -> Result<Value> {
    if (args.positional.size() != 1 || !args.positional[0].is_string())
      return Status::error("strftime_now takes one format string");
    return Value::from_string(strftime_now(args.positional[0].text));
  }));
}

Result<std::string> format_braces(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return Status::error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) return Status::error("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    const size_t colon = field.find(':');
    if (colon != std::string::npos) {
      if (colon + 1 < field.size()) return Status::error("str.format: format specs are not supported");
      field.resize(colon);
    }
    const size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) return Status::error("Replacement index out of range for positional args tuple");
      v = &args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t index = std::strtoull(field.c_str(), nullptr, 10);
      if (index >= args.positional.size()) return Status::error("Replacement index out of range for positional args tuple");
      v = &args.positional[index];
    } else {
      v = args.keyword_arg(field);
      if (!v) return Status::error("str.format: no argument named '" + field + "'");
    }
    out += conversion == 'r' ? repr(*v) : to_str(*v);
  }
  return out;
}

Result<std::string> format_percent(const std::string& format, const std::vector<Value>& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) return Status::error("incomplete format");
    std::string flags;
    while (i < format.size() && std::string_view("-+ 0#").find(format[i]) != std::string_view::npos) flags += format[i++];
    std::string width;
    while (i < format.size() && format[i] >= '0' && format[i] <= '9') width += format[i++];
    std::string precision;
    if (i < format.size() && format[i] == '.') {
      precision = ".";
      ++i;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') precision += format[i++];
    }
    if (i >= format.size()) return Status::error("incomplete format");
    const char conv = format[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) return Status::error("not enough arguments for format string");
    const Value& v = args[next++];
    if (width.size() > 4 || precision.size() > 5) return Status::error("format width or precision too large");
    const std::string spec = "%" + flags + width + precision;
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? to_str(v) : repr(v);
        const size_t w = width.empty() ? 0 : std::stoul(width);
        const size_t len = utf8_length(s);
        if (len < w) {
          const std::string pad(w - len, ' ');
          s = flags.find('-') != std::string::npos ? s + pad : pad + s;
        }
        out += s;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number()) return Status::error("%" + std::string(1, conv) + " format: a number is required, not " + type_name(v));
        const long long n = v.kind == Kind::kFloat ? static_cast<long long>(v.number)
                            : v.kind == Kind::kBool ? v.boolean : v.integer;
        std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number()) return Status::error("must be real number, not " + type_name(v));
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_double());
        out += buf;
        break;
      }
      default: return Status::error(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < args.size()) return Status::error("not all arguments converted during string formatting");
  return out;
}

}  // namespace bitsplit::chat
