// The parser's class, shared by parser.cpp (statements) and parser_expr.cpp (expressions).
// Private to the chat_template component.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/chat_template/parser.h"

namespace pagoda::jinja {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::Eof) fail("unexpected " + describe(cur()));
    return body;
  }

 private:
  // ---- token helpers ------------------------------------------------------------------
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  void advance() {
    if (p_ + 1 < t_.size()) ++p_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail("expected end of statement block, got " + describe(cur()));
    advance();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ChatTemplateError("template syntax error at line " + std::to_string(cur().line) + ": " + what);
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth_ > kMaxParseDepth) p.fail("template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // ---- statements ---------------------------------------------------------------------
  // Parses until a {% tag %} whose name is in `end_tags` (left unconsumed, after the {%).
  Body parse_body(const std::vector<const char*>& end_tags);
  StmtPtr parse_statement();
  StmtPtr parse_if();
  // `a`, `a, b`, `(a, b)`; with allow_namespace also `ns.attr` (for {% set %}).
  std::vector<Target> parse_targets(bool allow_namespace);
  StmtPtr parse_for();
  StmtPtr parse_set();
  void parse_params(std::vector<MacroParam>& params);
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  StmtPtr parse_generation();

  // ---- expressions --------------------------------------------------------------------
  // A comma-separated list becomes a tuple (as in `{{ a, b }}` or `set x = 1, 2`).
  // condexpr=false stops before `if` (the inline filter of a for loop).
  ExprPtr parse_tuple(bool condexpr = true);
  ExprPtr parse_expression();
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  Value parse_number(const Token& tk);
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj, int line);  // after '[': index or slice
  // Call arguments into e->args (after any already there) and e->kwargs.
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name();  // filter and test names may contain dots
  // `| f(args)`, `is [not] test args` and calls after a value; first_bare: the first filter
  // name comes without '|' ({% filter name %}).
  ExprPtr parse_filter_chain(ExprPtr e, bool first_bare = false);

  const std::vector<Token>& t_;
  size_t p_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool saw_varargs_ = false;  // a `varargs` / `kwargs` name was read (for macro signatures)
  bool saw_kwargs_ = false;
};

}  // namespace pagoda::jinja
