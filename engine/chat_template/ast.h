// Syntax tree of a parsed template: expressions (Expr) and statements (Stmt).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat_template/value.h"

namespace pagoda::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,      // literal
    Name,         // name
    GetAttr,      // args[0].name
    GetItem,      // args[0][args[1]]
    Slice,        // args[0][args[1]:args[2]:args[3]] (null parts are absent)
    Call,         // args[0](args[1..], kwargs)
    Filter,       // args[0] | name(args[1..], kwargs)
    Test,         // args[0] is [not] name(args[1..]); negated in `negate`
    Unary,        // name in {"-", "+", "not"} applied to args[0]
    Binary,       // args[0] name args[1]: + - * / // % ** ~ and or in "not in"
    Compare,      // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
    Conditional,  // args[1] if args[0] else args[2] (args[2] may be null)
    List,         // [args...]
    Tuple,        // (args...)
    Dict,         // {args[0]: args[1], args[2]: args[3], ...}
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;

  Expr(Kind k, int l) : kind(k), line(l) {}
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;
  // Long operator or filter chains (`a|f|f|f...`, `1+1+1...`) build trees as deep as the
  // chain is long; children are released iteratively so that freeing one cannot exhaust the
  // stack. (Evaluation of such trees is bounded by kMaxRecursion instead.)
  ~Expr() {
    std::vector<ExprPtr> pending;
    auto take = [&pending](Expr& e) {
      for (auto& a : e.args)
        if (a) pending.push_back(std::move(a));
      for (auto& kv : e.kwargs)
        if (kv.second) pending.push_back(std::move(kv.second));
    };
    take(*this);
    while (!pending.empty()) {
      ExprPtr e = std::move(pending.back());
      pending.pop_back();
      take(*e);
    }  // each `e` is freed here with no children left
  }
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Where `set` and `for` store: a plain name or namespace attribute (`ns.x`).
struct Target {
  std::string name;
  std::string attr;  // empty for a plain name
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches (cond, body) ...; else_body
    For,          // for targets in expr [if cond] body [else else_body]
    Set,          // set targets = expr
    SetBlock,     // set targets[0] | filter %} body {% endset
    Macro,        // macro name(params) body
    CallBlock,    // call(params) expr body: `caller` inside expr's macro renders body
    FilterBlock,  // filter expr (operand is a placeholder Name "") body
    With,         // with params (name = value, ...) body: a new scope
    Generation,   // transformers' {% generation %} body {% endgeneration %}: renders body
    Break,
    Continue,
  };
  Kind kind;
  int line = 0;
  std::string text;                          // Text, Macro name
  ExprPtr expr;                              // Output, For iterable, Set value, Call, filters
  ExprPtr cond;                              // For inline `if`
  std::vector<Target> targets;               // For, Set, SetBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body;
  Body else_body;
  std::vector<MacroParam> params;            // Macro, CallBlock, With (name = value)
  bool takes_varargs = false;                // Macro: body uses `varargs` (extra positionals)
  bool takes_kwargs = false;                 // Macro: body uses `kwargs` (extra keywords)
  bool recursive = false;                    // For: `recursive`; loop(items) renders the loop
                                             // again over items, one level deeper

  Stmt(Kind k, int l) : kind(k), line(l) {}
};

}  // namespace pagoda::jinja
