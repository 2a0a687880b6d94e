// The parsed form of a chat template: expression and statement nodes, each with the byte
// offset of its construct in the (normalised) source for error positions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.h"

namespace bitsplit::chat {

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // items
  kTuple,      // items
  kDict,       // items: key, value, key, value, ...
  kAttr,       // items[0].name
  kItem,       // items[0][items[1]]
  kSlice,      // items[0][items[1]:items[2]:items[3]] (null where omitted)
  kCall,       // items[0](items[1..]); the last keywords.size() arguments are keyword arguments
  kFilter,     // items[0] | name(items[1..]); items[0] is null in a {% filter %} block
  kTest,       // items[0] is [not] name(items[1..])
  kUnary,      // name: "not", "-", "+"; items[0]
  kBinary,     // name: the operator; items[0], items[1]
  kCompare,    // items[0] ops[0] items[1] ops[1] items[2] ...
  kCondition,  // items[0] if items[1] else items[2] (null: undefined)
};

struct Expr {
  ExprKind kind;
  uint32_t offset = 0;
  std::string name;
  Value literal;
  std::vector<std::unique_ptr<Expr>> items;
  std::vector<std::string> keywords;
  std::vector<std::string> ops;
  bool negated = false;
};
using ExprPtr = std::unique_ptr<Expr>;

enum class NodeKind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kFilterBlock, kScope };

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  NodeKind kind;
  uint32_t offset = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value), kFilterBlock (filters)
  ExprPtr condition;                 // kFor: the `if` filter
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock: names; with attribute_target: {ns, attr}
  bool attribute_target = false;
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: if / elif conditions and bodies
  Body body;                         // kFor, kSetBlock, kMacro, kFilterBlock, kScope
  Body else_body;                    // kIf, kFor
  std::string name;                  // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: names with defaults (or null)
};

struct Program {
  std::string source;  // normalised source, for error positions
  Body body;
};

}  // namespace bitsplit::chat
