// The chat-template built-ins: jinja2's filters and tests, the Python methods of str, dict and
// list that templates call, and the global functions (range, namespace, raise_exception, ...).
#pragma once

#include <string>
#include <string_view>

#include "value.h"

namespace bitsplit::chat {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// Errors carry no position; the interpreter adds the filter's or test's.
Result<Value> apply_filter(Interpreter& interp, std::string_view name, const Value& value, const CallArgs& args);
Result<bool> apply_test(Interpreter& interp, std::string_view name, const Value& value, const CallArgs& args);

// obj.name where obj is a str, dict or list and name is one of its methods: a bound callable.
// Methods that would modify the object are refused the way the immutable sandbox refuses them:
// an undefined value whose call fails. Anything else: nullopt-like undefined with found=false.
Value method_of(const Value& object, const std::string& name, bool* found);

// The global functions every render sees.
void add_globals(Dict& globals);

// Python's str.format and printf-style % formatting, as far as templates use them.
Result<std::string> format_braces(const std::string& format, const CallArgs& args);
Result<std::string> format_percent(const std::string& format, const std::vector<Value>& args);

}  // namespace bitsplit::chat
