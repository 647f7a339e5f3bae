// Expression parsing: one function per precedence level, from parse_expression() (conditional
// expressions) down to parse_primary() (literals, names, brackets), as in jinja2/parser.py.
#include <charconv>
#include <cstdlib>

#include "engine/chat_template/parser_impl.h"

namespace pagoda::jinja {

// A comma-separated list becomes a tuple (as in `{{ a, b }}` or `set x = 1, 2`).
ExprPtr Parser::parse_tuple(bool condexpr) {
  int line = cur().line;
  ExprPtr first = condexpr ? parse_expression() : parse_or();
  if (!is_op(",")) return first;
  auto tup = std::make_unique<Expr>(Expr::Kind::Tuple, line);
  tup->args.push_back(std::move(first));
  while (skip_op(",")) {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd) break;
    tup->args.push_back(condexpr ? parse_expression() : parse_or());
  }
  return tup;
}

ExprPtr Parser::parse_expression() {
  DepthGuard guard(*this);
  ExprPtr e = parse_or();
  while (is_name("if")) {
    int line = cur().line;
    advance();
    auto c = std::make_unique<Expr>(Expr::Kind::Conditional, line);
    c->args.push_back(parse_or());
    c->args.push_back(std::move(e));
    c->args.push_back(skip_name("else") ? parse_expression() : nullptr);
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
  auto e = std::make_unique<Expr>(Expr::Kind::Binary, line);
  e->name = op;
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    int line = cur().line;
    advance();
    e = binary("or", std::move(e), parse_and(), line);
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    int line = cur().line;
    advance();
    e = binary("and", std::move(e), parse_not(), line);
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto e = std::make_unique<Expr>(Expr::Kind::Unary, cur().line);
    advance();
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  int line = cur().line;
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
      op = cur().text;
      advance();
    } else if (is_name("in")) {
      op = "in";
      advance();
    } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      op = "not in";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = std::make_unique<Expr>(Expr::Kind::Compare, line);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    int line = cur().line;
    advance();
    e = binary(op, std::move(e), parse_concat(), line);
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  ExprPtr e = parse_math2();
  while (is_op("~")) {
    int line = cur().line;
    advance();
    e = binary("~", std::move(e), parse_math2(), line);
  }
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    int line = cur().line;
    advance();
    e = binary(op, std::move(e), parse_pow(), line);
  }
  return e;
}

ExprPtr Parser::parse_pow() {
  ExprPtr e = parse_unary(true);
  while (is_op("**")) {
    int line = cur().line;
    advance();
    e = binary("**", std::move(e), parse_unary(true), line);
  }
  return e;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = std::make_unique<Expr>(Expr::Kind::Unary, cur().line);
    e->name = cur().text;
    advance();
    e->args.push_back(parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_chain(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  DepthGuard guard(*this);
  const Token& tk = cur();
  int line = tk.line;
  if (tk.type == Tok::Name) {
    auto e = std::make_unique<Expr>(Expr::Kind::Literal, line);
    const std::string& n = tk.text;
    if (n == "true" || n == "True") e->literal = Value::boolean(true);
    else if (n == "false" || n == "False") e->literal = Value::boolean(false);
    else if (n == "none" || n == "None") e->literal = Value::none();
    else {
      e->kind = Expr::Kind::Name;
      e->name = n;
      saw_varargs_ = saw_varargs_ || n == "varargs";
      saw_kwargs_ = saw_kwargs_ || n == "kwargs";
    }
    advance();
    return e;
  }
  if (tk.type == Tok::String) {
    std::string s;
    while (cur().type == Tok::String) {  // adjacent literals concatenate
      s += cur().text;
      advance();
    }
    auto e = std::make_unique<Expr>(Expr::Kind::Literal, line);
    e->literal = Value::string(std::move(s));
    return e;
  }
  if (tk.type == Tok::Int || tk.type == Tok::Float) {
    auto e = std::make_unique<Expr>(Expr::Kind::Literal, line);
    e->literal = parse_number(tk);
    advance();
    return e;
  }
  if (skip_op("(")) {
    if (skip_op(")")) return std::make_unique<Expr>(Expr::Kind::Tuple, line);
    ExprPtr first = parse_expression();
    if (skip_op(")")) return first;
    auto tup = std::make_unique<Expr>(Expr::Kind::Tuple, line);
    tup->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_op(")")) break;
      tup->args.push_back(parse_expression());
    }
    expect_op(")");
    return tup;
  }
  if (skip_op("[")) {
    auto e = std::make_unique<Expr>(Expr::Kind::List, line);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression());
    }
    expect_op("]");
    return e;
  }
  if (skip_op("{")) {
    auto e = std::make_unique<Expr>(Expr::Kind::Dict, line);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression());
      expect_op(":");
      e->args.push_back(parse_expression());
    }
    expect_op("}");
    return e;
  }
  fail("expected an expression, got " + describe(tk));
}

Value Parser::parse_number(const Token& tk) {
  if (tk.type == Tok::Float) return Value::number(std::strtod(tk.text.c_str(), nullptr));
  int64_t v = 0;
  int base = 10;
  size_t skip = 0;
  if (tk.text.size() > 2 && tk.text[0] == '0' && (tk.text[1] == 'x' || tk.text[1] == 'o' || tk.text[1] == 'b')) {
    base = tk.text[1] == 'x' ? 16 : tk.text[1] == 'o' ? 8 : 2;
    skip = 2;
  }
  auto r = std::from_chars(tk.text.data() + skip, tk.text.data() + tk.text.size(), v, base);
  if (r.ec != std::errc()) fail("integer literal out of range: " + tk.text);
  return Value::integer(v);
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == Tok::Int) {
        auto g = std::make_unique<Expr>(Expr::Kind::GetItem, line);
        g->args.push_back(std::move(e));
        auto idx = std::make_unique<Expr>(Expr::Kind::Literal, line);
        idx->literal = parse_number(cur());
        advance();
        g->args.push_back(std::move(idx));
        e = std::move(g);
      } else {
        auto g = std::make_unique<Expr>(Expr::Kind::GetAttr, line);
        g->name = expect_name();
        g->args.push_back(std::move(e));
        e = std::move(g);
      }
    } else if (skip_op("[")) {
      e = parse_subscript(std::move(e), line);
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj, int line) {
  ExprPtr parts[3];
  bool is_slice = false;
  if (!is_op(":")) parts[0] = parse_expression();
  if (skip_op(":")) {
    is_slice = true;
    if (!is_op(":") && !is_op("]")) parts[1] = parse_expression();
    if (skip_op(":") && !is_op("]")) parts[2] = parse_expression();
  }
  expect_op("]");
  auto e = std::make_unique<Expr>(is_slice ? Expr::Kind::Slice : Expr::Kind::GetItem, line);
  e->args.push_back(std::move(obj));
  if (!is_slice && !parts[0]) fail("expected an index");
  for (int k = 0; k < (is_slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
  return e;
}

// Call arguments into e->args (after any already there) and e->kwargs.
void Parser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string key = cur().text;
      advance();
      advance();
      e.kwargs.emplace_back(key, parse_expression());
    } else {
      if (!e.kwargs.empty()) fail("positional argument after keyword argument");
      e.args.push_back(parse_expression());
    }
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = std::make_unique<Expr>(Expr::Kind::Call, cur().line);
  e->args.push_back(std::move(callee));
  parse_call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string n = expect_name();
  while (is_op(".") && peek().type == Tok::Name) {
    advance();
    n += '.';
    n += expect_name();
  }
  return n;
}

ExprPtr Parser::parse_filter_chain(ExprPtr e, bool first_bare) {
  while (true) {
    int line = cur().line;
    if (first_bare || skip_op("|")) {
      first_bare = false;
      auto f = std::make_unique<Expr>(Expr::Kind::Filter, line);
      f->name = dotted_name();
      f->args.push_back(std::move(e));
      if (is_op("(")) parse_call_args(*f);
      e = std::move(f);
    } else if (is_name("is")) {
      advance();
      auto t = std::make_unique<Expr>(Expr::Kind::Test, line);
      t->negate = skip_name("not");
      t->name = dotted_name();
      t->args.push_back(std::move(e));
      if (is_op("(")) {
        parse_call_args(*t);
      } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                  cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
        t->args.push_back(parse_postfix(parse_primary()));
      }
      e = std::move(t);
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}
}  // namespace pagoda::jinja
