// Rendering a parsed chat template: statements, expressions and jinja2's scoping rules.
#include "interpreter.h"

#include <cmath>
#include <limits>
#include <utility>

#include "builtins.h"
#include "lexer.h"
#include "unicode.h"

namespace bitsplit::chat {

const Value* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(std::shared_ptr<const Program> program, const ChatTemplateLimits& limits)
    : program_(std::move(program)), limits_(limits) {}

Status Interpreter::fail(uint32_t offset, const std::string& message) {
  located_ = true;
  return Status::error(message + " at " + position_text(program_->source, offset));
}

Status Interpreter::locate(const Status& status, uint32_t offset) {
  if (located_ || status.is_ok()) return status;
  return fail(offset, status.message());
}

Status Interpreter::raise(const std::string& message) {
  located_ = true;
  return Status::error("raise_exception: " + message);
}

Status Interpreter::append(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    located_ = true;
    return Status::error("rendered output exceeds the limit of " + std::to_string(limits_.max_output_bytes) +
                         " bytes");
  }
  out_->append(text);
  return Status::ok();
}

Result<std::string> Interpreter::render(const Value& context) {
  auto globals = std::make_shared<Frame>();
  {
    Dict g;
    add_globals(g);
    for (auto& [k, v] : g.entries) globals->vars[k.text] = v;
  }
  auto root = std::make_shared<Frame>();
  root->parent = globals;
  if (context.is_dict())
    for (const auto& [k, v] : context.dict->entries)
      if (k.is_string()) root->vars[k.text] = v;
  scope_ = root;
  std::string out;
  out_ = &out;
  auto flow = exec_body(program_->body);
  scope_.reset();
  out_ = nullptr;
  for (const auto& weak : namespaces_)
    if (auto ns = weak.lock()) ns->entries.clear();
  namespaces_.clear();
  if (!flow.is_ok()) return flow.status();
  return out;
}

Result<std::string> Interpreter::capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  auto flow = exec_body(body);
  out_ = saved;
  if (!flow.is_ok()) return flow.status();
  return buffer;
}

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body) {
  for (const auto& node : body) {
    auto flow = exec(*node);
    if (!flow.is_ok() || *flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec(const Node& node) {
  switch (node.kind) {
    case NodeKind::kText:
      BITSPLIT_RETURN_IF_ERROR(append(node.text));
      return Flow::kNormal;
    case NodeKind::kOutput: {
      auto v = eval(*node.expr);
      if (!v.is_ok()) return v.status();
      BITSPLIT_RETURN_IF_ERROR(append(to_str(*v)));
      return Flow::kNormal;
    }
    case NodeKind::kIf: {
      for (const auto& [cond, body] : node.branches) {
        auto c = eval(*cond);
        if (!c.is_ok()) return c.status();
        if (truthy(*c)) return exec_body(body);
      }
      return exec_body(node.else_body);
    }
    case NodeKind::kFor: return exec_for(node);
    case NodeKind::kSet:
    case NodeKind::kSetBlock:
      BITSPLIT_RETURN_IF_ERROR(exec_set(node));
      return Flow::kNormal;
    case NodeKind::kMacro: {
      const Node* macro = &node;
      std::weak_ptr<Frame> scope = scope_;  // weak: the frame holds the macro
      scope_->vars[node.name] = Value::function(node.name, [macro, scope](Interpreter& in, const CallArgs& args) {
        return in.call_macro(*macro, scope.lock(), args);
      });
      return Flow::kNormal;
    }
    case NodeKind::kBreak: return Flow::kBreak;
    case NodeKind::kContinue: return Flow::kContinue;
    case NodeKind::kFilterBlock: {
      auto text = capture(node.body);
      if (!text.is_ok()) return text.status();
      const Value v = Value::from_string(std::move(text).value());
      auto r = eval_filter(*node.expr, &v);
      if (!r.is_ok()) return r.status();
      BITSPLIT_RETURN_IF_ERROR(append(to_str(*r)));
      return Flow::kNormal;
    }
    case NodeKind::kScope: return exec_body(node.body);
  }
  return Flow::kNormal;
}

Status Interpreter::assign(const Node& node, const std::vector<std::string>& targets, Value value) {
  if (targets.size() == 1) {
    scope_->vars[targets[0]] = std::move(value);
    return Status::ok();
  }
  auto items = iterate(value);
  if (!items.is_ok()) return locate(items.status(), node.offset);
  if (items->size() != targets.size()) {
    return fail(node.offset, items->size() < targets.size()
                                 ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                       ", got " + std::to_string(items->size()) + ")"
                                 : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope_->vars[targets[i]] = (*items)[i];
  return Status::ok();
}

Status Interpreter::exec_set(const Node& node) {
  Value value;
  if (node.kind == NodeKind::kSet) {
    auto v = eval(*node.expr);
    if (!v.is_ok()) return v.status();
    value = std::move(v).value();
  } else {
    auto text = capture(node.body);
    if (!text.is_ok()) return text.status();
    value = Value::from_string(std::move(text).value());
    if (node.expr) {
      auto filtered = eval_filter(*node.expr, &value);
      if (!filtered.is_ok()) return filtered.status();
      value = std::move(filtered).value();
    }
  }
  if (node.attribute_target) {
    const Value* ns = scope_->lookup(node.targets[0]);
    if (!ns || !ns->is_dict() || ns->dict->kind != DictKind::kNamespace)
      return fail(node.offset, "can only assign to attributes of namespace objects ('" + node.targets[0] +
                                   "' is " + (ns ? type_name(*ns) : std::string("undefined")) + ")");
    ns->dict->set(Value::from_string(node.targets[1]), std::move(value));
    return Status::ok();
  }
  return assign(node, node.targets, std::move(value));
}

Result<Interpreter::Flow> Interpreter::exec_for(const Node& node) {
  auto iterable = eval(*node.expr);
  if (!iterable.is_ok()) return iterable.status();
  auto all = iterate(*iterable);
  if (!all.is_ok()) return locate(all.status(), node.expr->offset);
  const std::shared_ptr<Frame> outer = scope_;
  std::vector<Value> items;
  if (node.condition) {
    for (auto& item : *all) {
      if (++iterations_ > limits_.max_loop_iterations)
        return fail(node.offset, "more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations");
      scope_ = std::make_shared<Frame>();
      scope_->parent = outer;
      Status st = assign(node, node.targets, item);
      Result<Value> keep = st.is_ok() ? eval(*node.condition) : Result<Value>(st);
      scope_ = outer;
      if (!keep.is_ok()) return keep.status();
      if (truthy(*keep)) items.push_back(std::move(item));
    }
  } else {
    items = std::move(all).value();
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    if (++iterations_ > limits_.max_loop_iterations)
      return fail(node.offset, "more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations");
    auto frame = std::make_shared<Frame>();
    frame->parent = outer;
    Value loop = Value::new_dict(DictKind::kLoop);
    Dict& d = *loop.dict;
    d.set(Value::from_string("index"), Value::from_int(i + 1));
    d.set(Value::from_string("index0"), Value::from_int(i));
    d.set(Value::from_string("revindex"), Value::from_int(n - i));
    d.set(Value::from_string("revindex0"), Value::from_int(n - i - 1));
    d.set(Value::from_string("first"), Value::from_bool(i == 0));
    d.set(Value::from_string("last"), Value::from_bool(i == n - 1));
    d.set(Value::from_string("length"), Value::from_int(n));
    d.set(Value::from_string("depth"), Value::from_int(1));
    d.set(Value::from_string("depth0"), Value::from_int(0));
    d.set(Value::from_string("previtem"), i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    d.set(Value::from_string("nextitem"), i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    d.set(Value::from_string("cycle"), Value::function("cycle", [i](Interpreter& in, const CallArgs& args) -> Result<Value> {
            (void)in;
            if (args.positional.empty()) return Status::error("no items for cycling given");
            return args.positional[static_cast<size_t>(i) % args.positional.size()];
          }));
    frame->vars["loop"] = loop;
    scope_ = frame;
    Status st = assign(node, node.targets, items[i]);
    Result<Flow> flow = st.is_ok() ? exec_body(node.body) : Result<Flow>(st);
    scope_ = outer;
    if (!flow.is_ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  if (n == 0) return exec_body(node.else_body);
  return Flow::kNormal;
}

Result<Value> Interpreter::call_macro(const Node& macro, const std::shared_ptr<Frame>& scope, const CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return Status::error("macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                         " (calling '" + macro.name + "')");
  }
  if (++iterations_ > limits_.max_loop_iterations) {
    return Status::error("more than " + std::to_string(limits_.max_loop_iterations) +
                         " loop iterations and macro calls (calling '" + macro.name + "')");
  }
  auto frame = std::make_shared<Frame>();
  frame->parent = scope;
  if (!frame->parent) frame->parent = scope_;
  const auto& params = macro.params;
  if (args.positional.size() > params.size())
    return Status::error("macro '" + macro.name + "' takes not more than " + std::to_string(params.size()) +
                         " argument(s)");
  std::vector<bool> given(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    frame->vars[params[i].first] = args.positional[i];
    given[i] = true;
  }
  for (const auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && params[i].first != name) ++i;
    if (i == params.size()) return Status::error("macro '" + macro.name + "' takes no keyword argument '" + name + "'");
    if (given[i]) return Status::error("macro '" + macro.name + "' got multiple values for argument '" + name + "'");
    frame->vars[name] = value;
    given[i] = true;
  }
  const std::shared_ptr<Frame> saved = scope_;
  scope_ = frame;
  ++call_depth_;
  Result<std::string> text = Status::error("unreachable");
  Status st;
  for (size_t i = 0; i < params.size() && st.is_ok(); ++i) {
    if (given[i]) continue;
    if (params[i].second) {
      auto d = eval(*params[i].second);
      if (!d.is_ok()) {
        st = d.status();
        break;
      }
      frame->vars[params[i].first] = std::move(d).value();
    } else {
      frame->vars[params[i].first] = Value::undefined("parameter '" + params[i].first + "' was not provided");
    }
  }
  if (st.is_ok()) text = capture(macro.body);
  --call_depth_;
  scope_ = saved;
  if (!st.is_ok()) return st;
  if (!text.is_ok()) return text.status();
  return Value::from_string(std::move(text).value());
}

Result<Value> Interpreter::get_attribute(const Value& object, const std::string& name) {
  switch (object.kind) {
    case Kind::kUndefined:
      return Status::error(object.text.empty() ? "undefined value has no attribute '" + name + "'" : object.text);
    case Kind::kDict: {
      if (object.dict->kind == DictKind::kPlain) {
        bool found = false;
        Value m = method_of(object, name, &found);
        if (found) return m;
      }
      if (const Value* v = object.dict->find(name)) return *v;
      return Value::undefined("'" + std::string(object.dict->kind == DictKind::kPlain ? "dict" : type_name(object)) +
                              " object' has no attribute '" + name + "'");
    }
    case Kind::kString:
    case Kind::kList: {
      bool found = false;
      Value m = method_of(object, name, &found);
      if (found) return m;
      break;
    }
    default: break;
  }
  return Value::undefined("'" + type_name(object) + " object' has no attribute '" + name + "'");
}

Result<Value> Interpreter::get_item(const Value& object, const Value& key) {
  if (object.is_undefined())
    return Status::error(object.text.empty() ? "undefined value is not subscriptable" : object.text);
  const bool int_key = key.kind == Kind::kInt || key.kind == Kind::kBool;
  const int64_t index = key.kind == Kind::kBool ? key.boolean : key.integer;
  if (object.is_list() && int_key) {
    const int64_t n = static_cast<int64_t>(object.list->items.size());
    const int64_t i = index < 0 ? index + n : index;
    if (i < 0 || i >= n) return Value::undefined("list object has no element " + std::to_string(index));
    return object.list->items[static_cast<size_t>(i)];
  }
  if (object.is_string() && int_key) {
    const std::u32string cps = utf8_decode(object.text);
    const int64_t n = static_cast<int64_t>(cps.size());
    const int64_t i = index < 0 ? index + n : index;
    if (i < 0 || i >= n) return Value::undefined("str object has no element " + std::to_string(index));
    std::string s;
    utf8_append(s, cps[static_cast<size_t>(i)]);
    return Value::from_string(std::move(s));
  }
  if (object.is_dict() && object.dict->kind == DictKind::kPlain) {
    if (const Value* v = object.dict->find(key)) return *v;
  }
  if (key.is_string()) return get_attribute(object, key.text);
  return Value::undefined("'" + type_name(object) + " object' has no element " + repr(key));
}

Status Interpreter::check_made_string(const Result<Value>& made, const std::string& what) const {
  if (made.is_ok() && made->is_string() && made->text.size() > limits_.max_output_bytes) {
    return Status::error(what + " made a string of " + std::to_string(made->text.size()) + " bytes, over the output limit of " +
                         std::to_string(limits_.max_output_bytes));
  }
  return Status::ok();
}

Result<Value> Interpreter::call(const Value& callee, const CallArgs& args) {
  if (callee.kind == Kind::kCallable) {
    auto r = callee.callable->call(*this, args);
    if (Status st = check_made_string(r, "'" + callee.callable->name + "'"); !st) return st;
    return r;
  }
  if (callee.is_undefined())
    return Status::error(callee.text.empty() ? "undefined value is not callable" : callee.text);
  return Status::error("'" + type_name(callee) + "' object is not callable");
}

Result<CallArgs> Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  const size_t n_keyword = e.keywords.size();
  const size_t n_positional = e.items.size() - first - n_keyword;
  for (size_t i = 0; i < n_positional; ++i) {
    auto v = eval(*e.items[first + i]);
    if (!v.is_ok()) return v.status();
    args.positional.push_back(std::move(v).value());
  }
  for (size_t i = 0; i < n_keyword; ++i) {
    auto v = eval(*e.items[first + n_positional + i]);
    if (!v.is_ok()) return v.status();
    args.keyword.emplace_back(e.keywords[i], std::move(v).value());
  }
  return args;
}

Result<Value> Interpreter::eval_filter(const Expr& e, const Value* operand) {
  Value input;
  if (!e.items[0]) {
    input = *operand;
  } else {
    auto v = e.items[0]->kind == ExprKind::kFilter && operand ? eval_filter(*e.items[0], operand) : eval(*e.items[0]);
    if (!v.is_ok()) return v;
    input = std::move(v).value();
  }
  if (!is_known_filter(e.name)) return fail(e.offset, "unsupported filter '" + e.name + "'");
  auto args = eval_args(e, 1);
  if (!args.is_ok()) return args.status();
  auto r = apply_filter(*this, e.name, input, *args);
  if (!r.is_ok()) return locate(r.status(), e.offset);
  if (Status st = check_made_string(r, "filter '" + e.name + "'"); !st) return locate(st, e.offset);
  return r;
}

Result<Value> Interpreter::eval(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: {
      if (const Value* v = scope_->lookup(e.name)) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const auto& item : e.items) {
        auto v = eval(*item);
        if (!v.is_ok()) return v;
        items.push_back(std::move(v).value());
      }
      return Value::new_list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Value d = Value::new_dict();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        auto k = eval(*e.items[i]);
        if (!k.is_ok()) return k;
        auto v = eval(*e.items[i + 1]);
        if (!v.is_ok()) return v;
        if (k->is_list() || k->is_dict() || k->is_undefined())
          return fail(e.items[i]->offset, "unhashable type: '" + type_name(*k) + "'");
        d.dict->set(std::move(k).value(), std::move(v).value());
      }
      return d;
    }
    case ExprKind::kAttr: {
      auto object = eval(*e.items[0]);
      if (!object.is_ok()) return object;
      auto r = get_attribute(*object, e.name);
      if (!r.is_ok()) return locate(r.status(), e.offset);
      return r;
    }
    case ExprKind::kItem: {
      auto object = eval(*e.items[0]);
      if (!object.is_ok()) return object;
      auto key = eval(*e.items[1]);
      if (!key.is_ok()) return key;
      auto r = get_item(*object, *key);
      if (!r.is_ok()) return locate(r.status(), e.offset);
      return r;
    }
    case ExprKind::kSlice: return eval_slice(e);
    case ExprKind::kCall: {
      auto callee = eval(*e.items[0]);
      if (!callee.is_ok()) return callee;
      auto args = eval_args(e, 1);
      if (!args.is_ok()) return args.status();
      auto r = call(*callee, *args);
      if (!r.is_ok()) return locate(r.status(), e.offset);
      return r;
    }
    case ExprKind::kFilter: return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      auto operand = eval(*e.items[0]);
      if (!operand.is_ok()) return operand;
      if (!is_known_test(e.name)) return fail(e.offset, "unsupported test '" + e.name + "'");
      auto args = eval_args(e, 1);
      if (!args.is_ok()) return args.status();
      auto r = apply_test(*this, e.name, *operand, *args);
      if (!r.is_ok()) return locate(r.status(), e.offset);
      return Value::from_bool(*r != e.negated);
    }
    case ExprKind::kUnary: {
      auto operand = eval(*e.items[0]);
      if (!operand.is_ok()) return operand;
      const Value& v = *operand;
      if (e.name == "not") return Value::from_bool(!truthy(v));
      if (v.kind == Kind::kInt || v.kind == Kind::kBool) {
        const int64_t i = v.kind == Kind::kBool ? v.boolean : v.integer;
        if (e.name == "+") return Value::from_int(i);
        if (i == std::numeric_limits<int64_t>::min()) return fail(e.offset, "integer overflow");
        return Value::from_int(-i);
      }
      if (v.kind == Kind::kFloat) return Value::from_float(e.name == "-" ? -v.number : v.number);
      if (v.is_undefined() && !v.text.empty()) return fail(e.offset, v.text);
      return fail(e.offset, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
    }
    case ExprKind::kBinary: return eval_binary(e);
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kCondition: {
      auto cond = eval(*e.items[1]);
      if (!cond.is_ok()) return cond;
      if (truthy(*cond)) return eval(*e.items[0]);
      if (e.items[2]) return eval(*e.items[2]);
      return Value::undefined("the inline if-expression evaluated to false and has no else section");
    }
  }
  return fail(e.offset, "internal error: unknown expression");
}

namespace {

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t int_of(const Value& v) { return v.kind == Kind::kBool ? v.boolean : v.integer; }

Status type_error(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() && !a.text.empty()) return Status::error(a.text);
  if (b.is_undefined() && !b.text.empty()) return Status::error(b.text);
  return Status::error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Result<Value> repeat(const Value& seq, int64_t times, size_t limit, size_t max_items) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    if (seq.text.size() * static_cast<unsigned __int128>(times) > limit)
      return Status::error("string repetition exceeds the output limit of " + std::to_string(limit) + " bytes");
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.text;
    return Value::from_string(std::move(out));
  }
  if (seq.list->items.size() * static_cast<unsigned __int128>(times) > max_items)
    return Status::error("list repetition exceeds the limit of " + std::to_string(max_items) + " items");
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list->items.begin(), seq.list->items.end());
  return Value::new_list(std::move(out), seq.list->tuple);
}

// Python's int operators (bools count as ints): exact, overflow an error rather than a wrap.
Result<Value> add_ints(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_add_overflow(x, y, &r)) return Status::error("integer overflow");
  return Value::from_int(r);
}
Result<Value> subtract_ints(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_sub_overflow(x, y, &r)) return Status::error("integer overflow");
  return Value::from_int(r);
}
Result<Value> multiply_ints(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_mul_overflow(x, y, &r)) return Status::error("integer overflow");
  return Value::from_int(r);
}
Result<Value> divide_ints(int64_t x, int64_t y) {
  if (y == 0) return Status::error("division by zero");
  return Value::from_float(static_cast<double>(x) / static_cast<double>(y));
}

// Floor division and modulo: the quotient rounds toward minus infinity, the remainder takes the
// divisor's sign.
Result<std::pair<Value, Value>> int_divmod(int64_t x, int64_t y) {
  if (y == 0) return Status::error("integer division or modulo by zero");
  if (x == std::numeric_limits<int64_t>::min() && y == -1) return Status::error("integer overflow");
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    m += y;
    q -= 1;
  }
  return std::pair{Value::from_int(q), Value::from_int(m)};
}

Result<Value> power_ints(int64_t x, int64_t y) {
  if (y < 0) {
    if (x == 0) return Status::error("0.0 cannot be raised to a negative power");
    return Value::from_float(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
  int64_t result = 1, base = x, e = y;
  while (e > 0) {
    if (e & 1)
      if (__builtin_mul_overflow(result, base, &result)) return Status::error("integer overflow");
    e >>= 1;
    if (e > 0 && __builtin_mul_overflow(base, base, &base)) return Status::error("integer overflow");
  }
  return Value::from_int(result);
}

// Python's float operators (an int with a float is a float).
Result<Value> add_floats(double x, double y) { return Value::from_float(x + y); }
Result<Value> subtract_floats(double x, double y) { return Value::from_float(x - y); }
Result<Value> multiply_floats(double x, double y) { return Value::from_float(x * y); }
Result<Value> divide_floats(double x, double y) {
  if (y == 0) return Status::error("float division by zero");
  return Value::from_float(x / y);
}

// CPython's float_divmod: the remainder takes the divisor's sign (a zero one too), and the
// quotient is the floor of the exact (x - mod) / y, corrected where that division rounded.
Result<std::pair<Value, Value>> float_divmod(double x, double y) {
  if (y == 0) return Status::error("float divmod()");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv = 0;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return std::pair{Value::from_float(floordiv), Value::from_float(mod)};
}

// `//` or `%`: one half of a divmod.
template <class T, Result<std::pair<Value, Value>> (*divmod)(T, T), bool quotient>
Result<Value> divmod_half(T x, T y) {
  auto qm = divmod(x, y);
  if (!qm.is_ok()) return qm.status();
  return quotient ? qm->first : qm->second;
}

Result<Value> power_floats(double x, double y) {
  if (x == 0 && y < 0) return Status::error("0.0 cannot be raised to a negative power");
  return Value::from_float(std::pow(x, y));
}

// The numeric operators: two ints (or bools) stay exact; any other pair of numbers is computed in
// floats.
struct NumericOperator {
  std::string_view name;
  Result<Value> (*on_ints)(int64_t, int64_t);
  Result<Value> (*on_floats)(double, double);
};
constexpr NumericOperator kNumericOperators[] = {
    {"+", add_ints, add_floats},
    {"-", subtract_ints, subtract_floats},
    {"*", multiply_ints, multiply_floats},
    {"/", divide_ints, divide_floats},
    {"//", divmod_half<int64_t, int_divmod, true>, divmod_half<double, float_divmod, true>},
    {"%", divmod_half<int64_t, int_divmod, false>, divmod_half<double, float_divmod, false>},
    {"**", power_ints, power_floats},
};

const NumericOperator* numeric_operator(const std::string& op) {
  for (const auto& o : kNumericOperators)
    if (o.name == op) return &o;
  return nullptr;
}

Result<Value> concatenate_strings(const Value& a, const Value& b, size_t limit) {
  if (a.text.size() + b.text.size() > limit) return Status::error("string exceeds the output limit");
  return Value::from_string(a.text + b.text);
}

Result<Value> concatenate_lists(const Value& a, const Value& b, size_t max_items) {
  if (a.list->items.size() + b.list->items.size() > max_items)
    return Status::error("list exceeds the limit of " + std::to_string(max_items) + " items");
  std::vector<Value> items = a.list->items;
  items.insert(items.end(), b.list->items.begin(), b.list->items.end());
  return Value::new_list(std::move(items), a.list->tuple);
}

// `string % args`: a tuple gives the arguments, anything else is the one argument.
Result<Value> percent_format(const std::string& format, const Value& b) {
  std::vector<Value> args;
  if (b.is_list() && b.list->tuple) {
    args = b.list->items;
  } else {
    args.push_back(b);
  }
  auto s = format_percent(format, args);
  if (!s.is_ok()) return s.status();
  return Value::from_string(std::move(s).value());
}

Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b, size_t limit, size_t max_items) {
  if (const NumericOperator* numeric = numeric_operator(op)) {
    if (int_like(a) && int_like(b)) return numeric->on_ints(int_of(a), int_of(b));
    if (a.is_number() && b.is_number()) return numeric->on_floats(a.as_double(), b.as_double());
  }
  if (op == "+" && a.is_string() && b.is_string()) return concatenate_strings(a, b, limit);
  if (op == "+" && a.is_list() && b.is_list() && a.list->tuple == b.list->tuple) return concatenate_lists(a, b, max_items);
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && int_like(b)) return repeat(a, int_of(b), limit, max_items);
    if ((b.is_string() || b.is_list()) && int_like(a)) return repeat(b, int_of(a), limit, max_items);
  }
  if (op == "%" && a.is_string()) return percent_format(a.text, b);
  return type_error(op, a, b);
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string())
        return Status::error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.text.find(item.text) != std::string::npos;
    case Kind::kList:
      for (const auto& v : container.list->items)
        if (equals(v, item)) return true;
      return false;
    case Kind::kDict:
      if (container.dict->kind != DictKind::kPlain) break;
      return container.dict->find(item) != nullptr;
    default: break;
  }
  return Status::error("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace

Result<Value> Interpreter::eval_binary(const Expr& e) {
  auto left = eval(*e.items[0]);
  if (!left.is_ok()) return left;
  if (e.name == "and") return truthy(*left) ? eval(*e.items[1]) : left;
  if (e.name == "or") return truthy(*left) ? left : eval(*e.items[1]);
  auto right = eval(*e.items[1]);
  if (!right.is_ok()) return right;
  if (e.name == "~") {
    std::string s = to_str(*left) + to_str(*right);
    if (s.size() > limits_.max_output_bytes) return fail(e.offset, "string exceeds the output limit");
    return Value::from_string(std::move(s));
  }
  auto r = arithmetic(e.name, *left, *right, limits_.max_output_bytes, limits_.max_list_items);
  if (!r.is_ok()) return locate(r.status(), e.offset);
  return r;
}

Result<Value> Interpreter::eval_compare(const Expr& e) {
  auto left = eval(*e.items[0]);
  if (!left.is_ok()) return left;
  Value a = std::move(left).value();
  for (size_t i = 0; i < e.ops.size(); ++i) {
    auto right = eval(*e.items[i + 1]);
    if (!right.is_ok()) return right;
    const std::string& op = e.ops[i];
    bool result = false;
    if (op == "==") {
      result = equals(a, *right);
    } else if (op == "!=") {
      result = !equals(a, *right);
    } else if (op == "in" || op == "not in") {
      auto c = contains(*right, a);
      if (!c.is_ok()) return locate(c.status(), e.items[i + 1]->offset);
      result = *c == (op == "in");
    } else {
      if (a.is_undefined() && !a.text.empty()) return fail(e.offset, a.text);
      if (right->is_undefined() && !right->text.empty()) return fail(e.offset, right->text);
      auto c = compare(a, *right);
      if (!c.is_ok()) return locate(c.status(), e.offset);
      result = op == "<" ? *c < 0 : op == "<=" ? *c <= 0 : op == ">" ? *c > 0 : *c >= 0;
    }
    if (!result) return Value::from_bool(false);
    a = std::move(right).value();
  }
  return Value::from_bool(true);
}

Result<Value> Interpreter::eval_slice(const Expr& e) {
  auto object = eval(*e.items[0]);
  if (!object.is_ok()) return object;
  std::optional<int64_t> bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (!e.items[k + 1]) continue;
    auto v = eval(*e.items[k + 1]);
    if (!v.is_ok()) return v;
    if (v->is_none()) continue;
    if (!int_like(*v)) return fail(e.items[k + 1]->offset, "slice indices must be integers or None");
    bounds[k] = int_of(*v);
  }
  const int64_t step = bounds[2].value_or(1);
  if (step == 0) return fail(e.offset, "slice step cannot be zero");
  std::u32string cps;
  int64_t n = 0;
  if (object->is_string()) {
    cps = utf8_decode(object->text);
    n = static_cast<int64_t>(cps.size());
  } else if (object->is_list()) {
    n = static_cast<int64_t>(object->list->items.size());
  } else if (object->is_undefined() && !object->text.empty()) {
    return fail(e.offset, object->text);
  } else {
    return fail(e.offset, "'" + type_name(*object) + "' object is not subscriptable");
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> b, int64_t dflt) {
    if (!b) return dflt;
    int64_t v = *b;
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  const int64_t start = clamp(bounds[0], step < 0 ? n - 1 : 0);
  const int64_t stop = clamp(bounds[1], step < 0 ? -1 : n);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  if (object->is_string()) {
    std::string out;
    for (int64_t i : picked) utf8_append(out, cps[static_cast<size_t>(i)]);
    return Value::from_string(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i : picked) out.push_back(object->list->items[static_cast<size_t>(i)]);
  return Value::new_list(std::move(out), object->list->tuple);
}

}  // namespace bitsplit::chat
