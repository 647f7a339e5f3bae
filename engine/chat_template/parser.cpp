// Statement parsing ({% if %}, {% for %}, {% set %}, macros, call, filter, with and generation
// blocks) and the entry point. Expressions are in parser_expr.cpp.
#include "engine/chat_template/parser.h"

#include "engine/chat_template/parser_impl.h"

namespace pagoda::jinja {

// Parses until a {% tag %} whose name is in `end_tags` (left unconsumed, after the {%).
Body Parser::parse_body(const std::vector<const char*>& end_tags) {
  DepthGuard guard(*this);
  Body body;
  while (true) {
    const Token& tk = cur();
    if (tk.type == Tok::Eof) {
      if (!end_tags.empty()) {
        std::string expected;
        for (const char* e : end_tags) expected += std::string(expected.empty() ? "" : " or ") + "'" + e + "'";
        fail("unexpected end of template; expected " + expected);
      }
      return body;
    }
    if (tk.type == Tok::Data) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Text, tk.line);
      s->text = tk.text;
      body.push_back(std::move(s));
      advance();
    } else if (tk.type == Tok::VarBegin) {
      advance();
      auto s = std::make_unique<Stmt>(Stmt::Kind::Output, tk.line);
      s->expr = parse_tuple();
      if (cur().type != Tok::VarEnd) fail("unexpected " + describe(cur()) + " in {{ }}");
      advance();
      body.push_back(std::move(s));
    } else if (tk.type == Tok::BlockBegin) {
      advance();
      if (cur().type != Tok::Name) fail("expected a statement name, got " + describe(cur()));
      for (const char* e : end_tags)
        if (cur().text == e) return body;
      body.push_back(parse_statement());
    } else {
      fail("unexpected " + describe(tk));
    }
  }
}

StmtPtr Parser::parse_statement() {
  const std::string& name = cur().text;
  int line = cur().line;
  if (name == "if") return parse_if();
  if (name == "for") return parse_for();
  if (name == "set") return parse_set();
  if (name == "macro") return parse_macro();
  if (name == "call") return parse_call_block();
  if (name == "filter") return parse_filter_block();
  if (name == "with") return parse_with();
  if (name == "generation") return parse_generation();
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail("'" + name + "' outside of a loop");
    auto s = std::make_unique<Stmt>(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    advance();
    expect_block_end();
    return s;
  }
  fail("unknown or unexpected tag '" + name + "'");
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::If, cur().line);
  advance();  // if
  while (true) {
    ExprPtr cond = parse_tuple();
    expect_block_end();
    Body body = parse_body({"elif", "else", "endif"});
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (skip_name("elif")) continue;
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = parse_body({"endif"});
    }
    break;
  }
  advance();  // endif
  expect_block_end();
  return s;
}

std::vector<Target> Parser::parse_targets(bool allow_namespace) {
  std::vector<Target> targets;
  bool paren = skip_op("(");
  do {
    Target t{expect_name(), {}};
    if (allow_namespace && skip_op(".")) t.attr = expect_name();
    targets.push_back(std::move(t));
  } while (skip_op(","));
  if (paren) expect_op(")");
  return targets;
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::For, cur().line);
  advance();  // for
  s->targets = parse_targets(false);
  if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
  s->expr = parse_tuple(/*condexpr=*/false);
  if (skip_name("if")) s->cond = parse_expression();
  s->recursive = skip_name("recursive");
  expect_block_end();
  ++loop_depth_;
  s->body = parse_body({"endfor", "else"});
  --loop_depth_;
  if (skip_name("else")) {
    expect_block_end();
    s->else_body = parse_body({"endfor"});
  }
  advance();  // endfor
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_set() {
  int line = cur().line;
  advance();  // set
  std::vector<Target> targets = parse_targets(true);
  if (skip_op("=")) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
    s->targets = std::move(targets);
    s->expr = parse_tuple();
    expect_block_end();
    return s;
  }
  if (targets.size() != 1) fail("block set takes a single name");
  auto s = std::make_unique<Stmt>(Stmt::Kind::SetBlock, line);
  s->targets = std::move(targets);
  if (is_op("|")) s->expr = parse_filter_chain(std::make_unique<Expr>(Expr::Kind::Name, line));
  expect_block_end();
  s->body = parse_body({"endset"});
  advance();
  expect_block_end();
  return s;
}

void Parser::parse_params(std::vector<MacroParam>& params) {
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    MacroParam p{expect_name(), nullptr};
    if (skip_op("=")) p.default_value = parse_expression();
    params.push_back(std::move(p));
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, cur().line);
  advance();  // macro
  s->text = expect_name();
  parse_params(s->params);
  expect_block_end();
  int saved = loop_depth_;
  bool outer_varargs = saw_varargs_, outer_kwargs = saw_kwargs_;
  loop_depth_ = 0;
  saw_varargs_ = saw_kwargs_ = false;
  s->body = parse_body({"endmacro"});
  s->takes_varargs = saw_varargs_;
  s->takes_kwargs = saw_kwargs_;
  loop_depth_ = saved;
  // jinja2 counts names used by nested macros for the enclosing macro too.
  saw_varargs_ = outer_varargs || saw_varargs_;
  saw_kwargs_ = outer_kwargs || saw_kwargs_;
  advance();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, cur().line);
  advance();  // call
  if (is_op("(")) parse_params(s->params);
  s->expr = parse_expression();
  if (s->expr->kind != Expr::Kind::Call) fail("expected a call after {% call %}");
  expect_block_end();
  int saved = loop_depth_;  // the body runs as a function: loops outside it do not count
  loop_depth_ = 0;
  s->body = parse_body({"endcall"});
  loop_depth_ = saved;
  advance();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, cur().line);
  int line = cur().line;
  advance();  // filter; the first filter name follows without a '|'
  s->expr = parse_filter_chain(std::make_unique<Expr>(Expr::Kind::Name, line), /*first_bare=*/true);
  expect_block_end();
  s->body = parse_body({"endfilter"});
  advance();
  expect_block_end();
  return s;
}
StmtPtr Parser::parse_with() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::With, cur().line);
  advance();  // with
  while (cur().type != Tok::BlockEnd) {
    if (!s->params.empty()) expect_op(",");
    MacroParam p{expect_name(), nullptr};
    expect_op("=");
    p.default_value = parse_expression();
    s->params.push_back(std::move(p));
  }
  expect_block_end();
  s->body = parse_body({"endwith"});
  advance();
  expect_block_end();
  return s;
}

// transformers registers an extension whose {% generation %} block marks assistant text for
// training masks; when rendering a prompt it just renders its body (in its own scope).
StmtPtr Parser::parse_generation() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::Generation, cur().line);
  advance();  // generation
  expect_block_end();
  s->body = parse_body({"endgeneration"});
  advance();
  expect_block_end();
  return s;
}

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace pagoda::jinja
