// Recursive-descent parser for the Jinja subset of chat templates.
#include "parser.h"

#include <cerrno>
#include <cstdlib>

#include "builtins.h"
#include "lexer.h"

namespace bitsplit::chat {

namespace {

constexpr int kMaxNesting = 200;  // statement and expression nesting, so evaluation stays bounded

class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens) : source_(source), tokens_(std::move(tokens)) {}

  Result<Body> parse_template() {
    std::string end_tag;
    auto body = parse_body({}, &end_tag);
    if (!body.is_ok()) return body.status();
    return std::move(body).value();
  }

 private:
  // ---- token helpers ----
  const Token& peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kOp && peek(ahead).text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kName && peek(ahead).text == name;
  }
  Status fail(const std::string& what, uint32_t offset) const {
    return Status::error(what + " at " + position_text(source_, offset));
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kVarEnd: return "'}}'";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kText: return "text";
      case TokenType::kString: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  Status unexpected(const Token& t, const std::string& wanted) const {
    return fail("expected " + wanted + ", got " + describe(t), t.offset);
  }
  Status expect_op(std::string_view op) {
    if (!at_op(op)) return unexpected(peek(), "'" + std::string(op) + "'");
    next();
    return Status::ok();
  }
  Status expect_block_end() {
    if (peek().type != TokenType::kBlockEnd) return unexpected(peek(), "'%}'");
    next();
    return Status::ok();
  }
  Result<std::string> expect_name() {
    if (peek().type != TokenType::kName) return unexpected(peek(), "a name");
    return next().text;
  }

  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) { ++depth; }
    ~DepthGuard() { --depth; }
    int& depth;
  };

  // ---- statements ----
  // Parses nodes until a block tag whose name is in `ends` (consumed up to its name; the caller
  // reads the rest of that tag). At the top level `ends` is empty and the body ends at EOF.
  Result<Body> parse_body(const std::vector<std::string_view>& ends, std::string* end_tag) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return fail("template nested too deeply", peek().offset);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == TokenType::kEof) {
        if (!ends.empty()) {
          std::string names;
          for (auto e : ends) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
          return fail("unexpected end of template, expected " + names + " to close the block", open_offset_);
        }
        return body;
      }
      if (t.type == TokenType::kText) {
        auto node = make_node(NodeKind::kText, t.offset);
        node->text = t.text;
        body.push_back(std::move(node));
        next();
        continue;
      }
      if (t.type == TokenType::kVarBegin) {
        next();
        auto node = make_node(NodeKind::kOutput, t.offset);
        auto e = parse_tuple(true);
        if (!e.is_ok()) return e.status();
        node->expr = std::move(e).value();
        if (peek().type != TokenType::kVarEnd) return unexpected(peek(), "'}}'");
        next();
        body.push_back(std::move(node));
        continue;
      }
      if (t.type != TokenType::kBlockBegin) return unexpected(t, "text or a tag");
      const uint32_t tag_offset = t.offset;
      next();
      if (peek().type != TokenType::kName) return unexpected(peek(), "a statement name");
      const std::string name = peek().text;
      for (auto e : ends) {
        if (name == e) {
          next();
          *end_tag = name;
          return body;
        }
      }
      auto node = parse_statement(name, tag_offset);
      if (!node.is_ok()) return node.status();
      body.push_back(std::move(node).value());
    }
  }

  Result<NodePtr> parse_statement(const std::string& name, uint32_t tag_offset) {
    const uint32_t name_offset = peek().offset;
    next();
    const uint32_t saved_open = open_offset_;
    open_offset_ = tag_offset;
    Result<NodePtr> r = Status::error("unreachable");
    if (name == "if") {
      r = parse_if(tag_offset);
    } else if (name == "for") {
      r = parse_for(tag_offset);
    } else if (name == "set") {
      r = parse_set(tag_offset);
    } else if (name == "macro") {
      r = parse_macro(tag_offset);
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return fail("'" + name + "' outside a loop", name_offset);
      auto node = make_node(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, tag_offset);
      BITSPLIT_RETURN_IF_ERROR(expect_block_end());
      r = std::move(node);
    } else if (name == "filter") {
      r = parse_filter_block(tag_offset);
    } else if (name == "generation") {
      // Hugging Face's {% generation %} marks assistant text for masks; it renders its body.
      auto node = make_node(NodeKind::kScope, tag_offset);
      BITSPLIT_RETURN_IF_ERROR(expect_block_end());
      auto body = parse_body({"endgeneration"}, &end_tag_);
      if (!body.is_ok()) return body.status();
      node->body = std::move(body).value();
      BITSPLIT_RETURN_IF_ERROR(expect_block_end());
      r = std::move(node);
    } else if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      return fail("unexpected '" + name + "'", name_offset);
    } else {
      return fail("unsupported statement '" + name + "'", name_offset);
    }
    open_offset_ = saved_open;
    return r;
  }

  Result<NodePtr> parse_if(uint32_t tag_offset) {
    auto node = make_node(NodeKind::kIf, tag_offset);
    ++if_depth_;
    while (true) {
      auto cond = parse_tuple(true);
      if (!cond.is_ok()) return cond.status();
      BITSPLIT_RETURN_IF_ERROR(expect_block_end());
      std::string end;
      auto body = parse_body({"elif", "else", "endif"}, &end);
      if (!body.is_ok()) return body.status();
      node->branches.emplace_back(std::move(cond).value(), std::move(body).value());
      if (end == "elif") continue;
      if (end == "else") {
        BITSPLIT_RETURN_IF_ERROR(expect_block_end());
        auto else_body = parse_body({"endif"}, &end);
        if (!else_body.is_ok()) return else_body.status();
        node->else_body = std::move(else_body).value();
      }
      break;
    }
    --if_depth_;
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

  Status parse_targets(std::vector<std::string>& targets) {
    const bool paren = at_op("(");
    if (paren) next();
    while (true) {
      auto n = expect_name();
      if (!n.is_ok()) return n.status();
      targets.push_back(*n);
      if (!at_op(",")) break;
      next();
      if (paren && at_op(")")) break;
    }
    if (paren) return expect_op(")");
    return Status::ok();
  }

  Result<NodePtr> parse_for(uint32_t tag_offset) {
    auto node = make_node(NodeKind::kFor, tag_offset);
    BITSPLIT_RETURN_IF_ERROR(parse_targets(node->targets));
    if (!at_name("in")) return unexpected(peek(), "'in'");
    next();
    auto iter = parse_tuple(false);
    if (!iter.is_ok()) return iter.status();
    node->expr = std::move(iter).value();
    if (at_name("if")) {
      next();
      auto cond = parse_expression(true);
      if (!cond.is_ok()) return cond.status();
      node->condition = std::move(cond).value();
    }
    if (at_name("recursive")) return fail("unsupported 'recursive' loop", peek().offset);
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    ++loop_depth_;
    auto body = parse_body({"else", "endfor"}, &end);
    --loop_depth_;
    if (!body.is_ok()) return body.status();
    node->body = std::move(body).value();
    if (end == "else") {
      BITSPLIT_RETURN_IF_ERROR(expect_block_end());
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;  // the else branch runs outside the loop
      auto else_body = parse_body({"endfor"}, &end);
      loop_depth_ = saved_loops;
      if (!else_body.is_ok()) return else_body.status();
      node->else_body = std::move(else_body).value();
    }
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

  Result<NodePtr> parse_set(uint32_t tag_offset) {
    auto node = make_node(NodeKind::kSet, tag_offset);
    if (peek().type == TokenType::kName && at_op(".", 1)) {
      node->targets.push_back(next().text);
      next();
      auto attr = expect_name();
      if (!attr.is_ok()) return attr.status();
      node->targets.push_back(*attr);
      node->attribute_target = true;
    } else {
      BITSPLIT_RETURN_IF_ERROR(parse_targets(node->targets));
    }
    if (at_op("=")) {
      next();
      auto value = parse_tuple(true);
      if (!value.is_ok()) return value.status();
      node->expr = std::move(value).value();
      BITSPLIT_RETURN_IF_ERROR(expect_block_end());
      return node;
    }
    // {% set x %}...{% endset %}, optionally with filters: {% set x | trim %}.
    node->kind = NodeKind::kSetBlock;
    if (node->targets.size() != 1 && !node->attribute_target)
      return fail("a block 'set' assigns one name", tag_offset);
    if (at_op("|")) {
      auto filters = parse_filter_chain(nullptr);
      if (!filters.is_ok()) return filters.status();
      node->expr = std::move(filters).value();
    }
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    auto body = parse_body({"endset"}, &end);
    if (!body.is_ok()) return body.status();
    node->body = std::move(body).value();
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

  Result<NodePtr> parse_macro(uint32_t tag_offset) {
    auto node = make_node(NodeKind::kMacro, tag_offset);
    auto name = expect_name();
    if (!name.is_ok()) return name.status();
    node->name = *name;
    BITSPLIT_RETURN_IF_ERROR(expect_op("("));
    while (!at_op(")")) {
      auto param = expect_name();
      if (!param.is_ok()) return param.status();
      ExprPtr def;
      if (at_op("=")) {
        next();
        auto d = parse_expression(true);
        if (!d.is_ok()) return d.status();
        def = std::move(d).value();
      } else if (!node->params.empty() && node->params.back().second) {
        return fail("macro parameter '" + *param + "' without a default follows one with a default", peek().offset);
      }
      node->params.emplace_back(*param, std::move(def));
      if (!at_op(",")) break;
      next();
    }
    BITSPLIT_RETURN_IF_ERROR(expect_op(")"));
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    auto body = parse_body({"endmacro"}, &end);
    loop_depth_ = saved_loops;
    if (!body.is_ok()) return body.status();
    node->body = std::move(body).value();
    if (peek().type == TokenType::kName && peek().text == node->name) next();
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

  Result<NodePtr> parse_filter_block(uint32_t tag_offset) {
    auto node = make_node(NodeKind::kFilterBlock, tag_offset);
    // The chain starts with a name: {% filter upper | trim %}.
    auto chain = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    if (!chain.is_ok()) return chain.status();
    node->expr = std::move(chain).value();
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    auto body = parse_body({"endfilter"}, &end);
    if (!body.is_ok()) return body.status();
    node->body = std::move(body).value();
    BITSPLIT_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

  static NodePtr make_node(NodeKind kind, uint32_t offset) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->offset = offset;
    return node;
  }

  // ---- expressions ----
  static ExprPtr make(ExprKind kind, uint32_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // An expression, or a tuple of them without parentheses ("a, b").
  Result<ExprPtr> parse_tuple(bool with_condition) {
    const uint32_t offset = peek().offset;
    auto first = parse_expression(with_condition);
    if (!first.is_ok()) return first;
    if (!at_op(",")) return first;
    auto tuple = make(ExprKind::kTuple, offset);
    tuple->items.push_back(std::move(first).value());
    while (at_op(",")) {
      next();
      if (peek().type == TokenType::kBlockEnd || peek().type == TokenType::kVarEnd || at_op(")") ||
          at_name("in"))
        break;
      auto item = parse_expression(with_condition);
      if (!item.is_ok()) return item;
      tuple->items.push_back(std::move(item).value());
    }
    return tuple;
  }

  Result<ExprPtr> parse_expression(bool with_condition) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return fail("expression nested too deeply", peek().offset);
    const uint32_t offset = peek().offset;
    auto value = parse_or();
    if (!value.is_ok() || !with_condition) return value;
    ExprPtr expr = std::move(value).value();
    while (at_name("if")) {
      next();
      auto cond = parse_or();
      if (!cond.is_ok()) return cond;
      auto node = make(ExprKind::kCondition, offset);
      node->items.push_back(std::move(expr));
      node->items.push_back(std::move(cond).value());
      if (at_name("else")) {
        next();
        auto other = parse_expression(true);
        if (!other.is_ok()) return other;
        node->items.push_back(std::move(other).value());
      } else {
        node->items.push_back(nullptr);
      }
      expr = std::move(node);
    }
    return expr;
  }

  template <typename Sub>
  Result<ExprPtr> parse_binary_left(Sub sub, std::initializer_list<std::string_view> ops, bool names) {
    auto left = (this->*sub)();
    if (!left.is_ok()) return left;
    ExprPtr expr = std::move(left).value();
    while (true) {
      std::string op;
      for (auto o : ops)
        if (names ? at_name(o) : at_op(o)) op = std::string(o);
      if (op.empty()) return expr;
      const uint32_t offset = next().offset;
      auto right = (this->*sub)();
      if (!right.is_ok()) return right;
      auto node = make(ExprKind::kBinary, offset);
      node->name = op;
      node->items.push_back(std::move(expr));
      node->items.push_back(std::move(right).value());
      expr = std::move(node);
    }
  }

  Result<ExprPtr> parse_or() { return parse_binary_left(&Parser::parse_and, {"or"}, true); }
  Result<ExprPtr> parse_and() { return parse_binary_left(&Parser::parse_not, {"and"}, true); }

  Result<ExprPtr> parse_not() {
    if (at_name("not")) {
      DepthGuard guard(depth_);
      if (depth_ > kMaxNesting) return fail("expression nested too deeply", peek().offset);
      auto node = make(ExprKind::kUnary, next().offset);
      node->name = "not";
      auto operand = parse_not();
      if (!operand.is_ok()) return operand;
      node->items.push_back(std::move(operand).value());
      return ExprPtr(std::move(node));
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    const uint32_t offset = peek().offset;
    auto first = parse_math1();
    if (!first.is_ok()) return first;
    ExprPtr compare;
    while (true) {
      std::string op;
      if (peek().type == TokenType::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
           peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!compare) {
        compare = make(ExprKind::kCompare, offset);
        compare->items.push_back(std::move(first).value());
      }
      auto operand = parse_math1();
      if (!operand.is_ok()) return operand;
      compare->ops.push_back(op);
      compare->items.push_back(std::move(operand).value());
    }
    if (compare) return compare;
    return first;
  }

  Result<ExprPtr> parse_math1() { return parse_binary_left(&Parser::parse_concat, {"+", "-"}, false); }
  Result<ExprPtr> parse_concat() { return parse_binary_left(&Parser::parse_math2, {"~"}, false); }
  Result<ExprPtr> parse_math2() { return parse_binary_left(&Parser::parse_pow, {"*", "/", "//", "%"}, false); }
  Result<ExprPtr> parse_pow() { return parse_binary_left(&Parser::parse_unary_filtered, {"**"}, false); }
  Result<ExprPtr> parse_unary_filtered() { return parse_unary(true); }

  Result<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return fail("expression nested too deeply", peek().offset);
    ExprPtr expr;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      auto node = make(ExprKind::kUnary, t.offset);
      node->name = t.text;
      auto operand = parse_unary(false);
      if (!operand.is_ok()) return operand;
      node->items.push_back(std::move(operand).value());
      expr = std::move(node);
    } else {
      auto primary = parse_primary();
      if (!primary.is_ok()) return primary;
      expr = std::move(primary).value();
    }
    auto post = parse_postfix(std::move(expr));
    if (!post.is_ok() || !with_filter) return post;
    return parse_filter_expr(std::move(post).value());
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case TokenType::kName: return parse_name(next());
      case TokenType::kString: return parse_strings();
      case TokenType::kInt: return parse_int(next());
      case TokenType::kFloat: {
        next();
        auto e = make(ExprKind::kLiteral, t.offset);
        e->literal = Value::from_float(std::strtod(t.text.c_str(), nullptr));
        return ExprPtr(std::move(e));
      }
      case TokenType::kOp:
        if (t.text == "(") return parse_parenthesized(next());
        if (t.text == "[") return parse_list(next());
        if (t.text == "{") return parse_dict(next());
        break;
      default: break;
    }
    return fail("unexpected " + describe(t), t.offset);
  }

  // A variable, or one of the constants true / false / none (either capitalisation).
  ExprPtr parse_name(const Token& t) {
    auto e = make(ExprKind::kLiteral, t.offset);
    if (t.text == "true" || t.text == "True") {
      e->literal = Value::from_bool(true);
    } else if (t.text == "false" || t.text == "False") {
      e->literal = Value::from_bool(false);
    } else if (t.text == "none" || t.text == "None") {
      e->literal = Value::none();
    } else {
      e->kind = ExprKind::kName;
      e->name = t.text;
    }
    return e;
  }

  ExprPtr parse_strings() {
    auto e = make(ExprKind::kLiteral, peek().offset);
    std::string s;
    while (peek().type == TokenType::kString) s += next().text;  // adjacent literals concatenate
    e->literal = Value::from_string(std::move(s));
    return e;
  }

  // An integer literal too large for 64 bits becomes a float.
  ExprPtr parse_int(const Token& t) {
    errno = 0;
    const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
    auto e = make(ExprKind::kLiteral, t.offset);
    if (errno == ERANGE) {
      e->literal = Value::from_float(std::strtod(t.text.c_str(), nullptr));
    } else {
      e->literal = Value::from_int(v);
    }
    return e;
  }

  // After '(': "()" is the empty tuple, "(x)" is x, "(x, ...)" a tuple (a trailing comma allowed).
  Result<ExprPtr> parse_parenthesized(const Token& open) {
    if (at_op(")")) {
      next();
      return make(ExprKind::kTuple, open.offset);
    }
    auto first = parse_expression(true);
    if (!first.is_ok()) return first;
    if (at_op(")")) {
      next();
      return first;
    }
    auto tuple = make(ExprKind::kTuple, open.offset);
    tuple->items.push_back(std::move(first).value());
    while (at_op(",")) {
      next();
      if (at_op(")")) break;
      auto item = parse_expression(true);
      if (!item.is_ok()) return item;
      tuple->items.push_back(std::move(item).value());
    }
    BITSPLIT_RETURN_IF_ERROR(expect_op(")"));
    return ExprPtr(std::move(tuple));
  }

  // After '[': items up to ']'.
  Result<ExprPtr> parse_list(const Token& open) {
    auto list = make(ExprKind::kList, open.offset);
    BITSPLIT_RETURN_IF_ERROR(parse_items("]", [&] { return parse_item_into(*list); }));
    return ExprPtr(std::move(list));
  }

  // After '{': key: value pairs up to '}', kept as alternating items.
  Result<ExprPtr> parse_dict(const Token& open) {
    auto dict = make(ExprKind::kDict, open.offset);
    BITSPLIT_RETURN_IF_ERROR(parse_items("}", [&] {
      BITSPLIT_RETURN_IF_ERROR(parse_item_into(*dict));
      BITSPLIT_RETURN_IF_ERROR(expect_op(":"));
      return parse_item_into(*dict);
    }));
    return ExprPtr(std::move(dict));
  }

  // Comma-separated entries up to `closer` (a trailing comma allowed), each read by parse_entry.
  template <class ParseEntry>
  Status parse_items(std::string_view closer, const ParseEntry& parse_entry) {
    while (!at_op(closer)) {
      BITSPLIT_RETURN_IF_ERROR(parse_entry());
      if (!at_op(",")) break;
      next();
    }
    return expect_op(closer);
  }

  Status parse_item_into(Expr& container) {
    auto item = parse_expression(true);
    if (!item.is_ok()) return item.status();
    container.items.push_back(std::move(item).value());
    return Status::ok();
  }

  Result<ExprPtr> parse_postfix(ExprPtr expr) {
    while (true) {
      if (at_op(".")) {
        const uint32_t offset = next().offset;
        if (peek().type == TokenType::kName) {
          auto node = make(ExprKind::kAttr, offset);
          node->name = next().text;
          node->items.push_back(std::move(expr));
          expr = std::move(node);
        } else if (peek().type == TokenType::kInt) {
          auto node = make(ExprKind::kItem, offset);
          node->items.push_back(std::move(expr));
          auto index = make(ExprKind::kLiteral, peek().offset);
          index->literal = Value::from_int(std::strtoll(next().text.c_str(), nullptr, 10));
          node->items.push_back(std::move(index));
          expr = std::move(node);
        } else {
          return unexpected(peek(), "an attribute name");
        }
      } else if (at_op("[")) {
        const uint32_t offset = next().offset;
        auto sub = parse_subscript(std::move(expr), offset);
        if (!sub.is_ok()) return sub;
        expr = std::move(sub).value();
      } else if (at_op("(")) {
        auto call = make(ExprKind::kCall, next().offset);
        call->items.push_back(std::move(expr));
        BITSPLIT_RETURN_IF_ERROR(parse_call_args(*call));
        expr = std::move(call);
      } else {
        return expr;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr target, uint32_t offset) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (true) {
      if (at_op(":")) {
        next();
        is_slice = true;
        if (++part > 2) return fail("too many ':' in a slice", offset);
        continue;
      }
      if (at_op("]")) break;
      if (parts[part]) return unexpected(peek(), "']'");
      auto e = parse_expression(true);
      if (!e.is_ok()) return e;
      parts[part] = std::move(e).value();
    }
    next();
    if (!is_slice) {
      if (!parts[0]) return fail("empty subscript", offset);
      auto node = make(ExprKind::kItem, offset);
      node->items.push_back(std::move(target));
      node->items.push_back(std::move(parts[0]));
      return ExprPtr(std::move(node));
    }
    auto node = make(ExprKind::kSlice, offset);
    node->items.push_back(std::move(target));
    for (auto& p : parts) node->items.push_back(std::move(p));
    return ExprPtr(std::move(node));
  }

  // "(a, b, key=c)" after the '(' was read; appends to call.items and call.keywords.
  Status parse_call_args(Expr& call) {
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) return fail("unsupported '*' argument unpacking", peek().offset);
      if (peek().type == TokenType::kName && at_op("=", 1)) {
        call.keywords.push_back(next().text);
        next();
        auto value = parse_expression(true);
        if (!value.is_ok()) return value.status();
        call.items.push_back(std::move(value).value());
      } else {
        if (!call.keywords.empty())
          return fail("positional argument follows keyword argument", peek().offset);
        auto value = parse_expression(true);
        if (!value.is_ok()) return value.status();
        call.items.push_back(std::move(value).value());
      }
      if (!at_op(",")) break;
      next();
    }
    return expect_op(")");
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr expr) {
    while (true) {
      if (at_op("|")) {
        auto f = parse_filter_chain(std::move(expr));
        if (!f.is_ok()) return f;
        expr = std::move(f).value();
      } else if (at_name("is")) {
        auto t = parse_test(std::move(expr));
        if (!t.is_ok()) return t;
        expr = std::move(t).value();
      } else if (at_op("(")) {
        auto call = make(ExprKind::kCall, next().offset);
        call->items.push_back(std::move(expr));
        BITSPLIT_RETURN_IF_ERROR(parse_call_args(*call));
        expr = std::move(call);
      } else {
        return expr;
      }
    }
  }

  // "| f(args) | g" applied to `operand` (null in a filter block or a block set).
  Result<ExprPtr> parse_filter_chain(ExprPtr operand, bool leading_pipe = true) {
    bool first = true;
    while (first ? (!leading_pipe || at_op("|")) : at_op("|")) {
      if (!first || leading_pipe) next();
      first = false;
      if (peek().type != TokenType::kName) return unexpected(peek(), "a filter name");
      const Token& name = next();
      if (!is_known_filter(name.text) && if_depth_ == 0)
        return fail("unsupported filter '" + name.text + "'", name.offset);
      auto node = make(ExprKind::kFilter, name.offset);
      node->name = name.text;
      node->items.push_back(std::move(operand));
      if (at_op("(")) {
        next();
        BITSPLIT_RETURN_IF_ERROR(parse_call_args(*node));
      }
      operand = std::move(node);
    }
    return operand;
  }

  Result<ExprPtr> parse_test(ExprPtr operand) {
    next();  // "is"
    bool negated = false;
    if (at_name("not")) {
      next();
      negated = true;
    }
    if (peek().type != TokenType::kName) return unexpected(peek(), "a test name");
    const Token& name = next();
    if (!is_known_test(name.text) && if_depth_ == 0)
      return fail("unsupported test '" + name.text + "'", name.offset);
    auto node = make(ExprKind::kTest, name.offset);
    node->name = name.text;
    node->negated = negated;
    node->items.push_back(std::move(operand));
    const Token& t = peek();
    if (at_op("(")) {
      next();
      BITSPLIT_RETURN_IF_ERROR(parse_call_args(*node));
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInt ||
                t.type == TokenType::kFloat || at_op("[") || at_op("{")) &&
               !(at_name("else") || at_name("or") || at_name("and"))) {
      if (at_name("is")) return fail("cannot chain tests with 'is'", t.offset);
      // A single argument without parentheses: "x is divisibleby 3", "x is sameas none".
      auto arg = parse_primary();
      if (!arg.is_ok()) return arg;
      auto post = parse_postfix(std::move(arg).value());
      if (!post.is_ok()) return post;
      node->items.push_back(std::move(post).value());
    }
    return ExprPtr(std::move(node));
  }

  const std::string& source_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int if_depth_ = 0;
  uint32_t open_offset_ = 0;
  std::string end_tag_;
};

}  // namespace

Result<std::shared_ptr<const Program>> parse_program(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->source = normalize_source(source);
  auto tokens = tokenize(program->source);
  if (!tokens.is_ok()) return tokens.status();
  Parser parser(program->source, std::move(tokens).value());
  auto body = parser.parse_template();
  if (!body.is_ok()) return body.status();
  program->body = std::move(body).value();
  return std::shared_ptr<const Program>(std::move(program));
}

}  // namespace bitsplit::chat
