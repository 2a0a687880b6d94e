// The chat-template interpreter: renders a parsed Program with a context of variables, with
// jinja2's scoping (a fresh scope per loop iteration and macro call, `namespace` for state that
// crosses them) and bounded depth, loop iterations and output.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ast.h"
#include "bitsplit/chat_template.h"
#include "value.h"

namespace bitsplit::chat {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
  const Value* lookup(const std::string& name) const;
};

class Interpreter {
 public:
  Interpreter(std::shared_ptr<const Program> program, const ChatTemplateLimits& limits);

  Result<std::string> render(const Value& context);

  // For the built-ins: attribute and item access with jinja2's rules, calls, and errors that
  // stop the render without a position (raise_exception).
  Result<Value> get_attribute(const Value& object, const std::string& name);
  Result<Value> get_item(const Value& object, const Value& key);
  Result<Value> call(const Value& callee, const CallArgs& args);
  Status raise(const std::string& message);
  // Namespaces may come to hold themselves; render() empties them at the end to break the cycle.
  void track_namespace(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }
  const ChatTemplateLimits& limits() const { return limits_; }
  Result<Value> call_macro(const Node& macro, const std::shared_ptr<Frame>& scope, const CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status fail(uint32_t offset, const std::string& message);
  // A string a filter, method or function made, held to the output limit where it is made:
  // strings can grow geometrically (a repr of a namespace holding its own last repr, in a loop),
  // and only the printed text was bounded before.
  Status check_made_string(const Result<Value>& made, const std::string& what) const;
  Status locate(const Status& status, uint32_t offset);
  Status append(std::string_view text);

  Result<Flow> exec_body(const Body& body);
  Result<Flow> exec(const Node& node);
  Result<Flow> exec_for(const Node& node);
  Status exec_set(const Node& node);
  Status assign(const Node& node, const std::vector<std::string>& targets, Value value);
  Result<std::string> capture(const Body& body);

  Result<Value> eval(const Expr& e);
  Result<Value> eval_binary(const Expr& e);
  Result<Value> eval_compare(const Expr& e);
  Result<Value> eval_slice(const Expr& e);
  Result<Value> eval_filter(const Expr& e, const Value* operand);
  Result<CallArgs> eval_args(const Expr& e, size_t first);

  std::shared_ptr<const Program> program_;
  ChatTemplateLimits limits_;
  std::shared_ptr<Frame> scope_;
  std::string* out_ = nullptr;
  size_t total_output_ = 0;
  uint64_t iterations_ = 0;
  int call_depth_ = 0;
  std::vector<std::weak_ptr<Dict>> namespaces_;
  bool located_ = false;  // the pending error already says where it happened
};

}  // namespace bitsplit::chat
