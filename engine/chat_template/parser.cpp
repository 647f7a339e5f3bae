// Recursive-descent parser: statements in parse_body(), expressions from parse_expression()
// down to parse_primary(), one function per precedence level as in jinja2.
#include "engine/chat_template/parser.h"

#include <charconv>
#include <cstdlib>

namespace pagoda::jinja {
namespace {

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
  Body parse_body(const std::vector<const char*>& end_tags) {
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
        s->expr = parse_tuple(true);
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

  StmtPtr parse_statement() {
    const std::string& name = cur().text;
    int line = cur().line;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a loop");
      auto s = std::make_unique<Stmt>(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
      advance();
      expect_block_end();
      return s;
    }
    fail("unknown or unexpected tag '" + name + "'");
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::If, cur().line);
    advance();  // if
    while (true) {
      ExprPtr cond = parse_tuple(false);
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

  std::vector<Target> parse_targets(bool allow_namespace) {
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

  StmtPtr parse_for() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::For, cur().line);
    advance();  // for
    s->targets = parse_targets(false);
    if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_tuple(false, /*condexpr=*/false);
    if (skip_name("if")) s->cond = parse_expression();
    if (is_name("recursive")) fail("recursive loops are not supported");
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

  StmtPtr parse_set() {
    int line = cur().line;
    advance();  // set
    std::vector<Target> targets = parse_targets(true);
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
      s->targets = std::move(targets);
      s->expr = parse_tuple(false);
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

  void parse_params(std::vector<MacroParam>& params) {
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

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, cur().line);
    advance();  // macro
    s->text = expect_name();
    parse_params(s->params);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, cur().line);
    advance();  // call
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression();
    if (s->expr->kind != Expr::Kind::Call) fail("expected a call after {% call %}");
    expect_block_end();
    s->body = parse_body({"endcall"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
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

  // ---- expressions --------------------------------------------------------------------
  // A comma-separated list becomes a tuple (as in `{{ a, b }}` or `set x = 1, 2`).
  ExprPtr parse_tuple(bool in_output, bool condexpr = true) {
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

  ExprPtr parse_expression() {
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

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = std::make_unique<Expr>(Expr::Kind::Binary, line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      advance();
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      advance();
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
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

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      advance();
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      advance();
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  Value parse_number(const Token& tk) {
    if (tk.type == Tok::Float) return Value::number(std::strtod(tk.text.c_str(), nullptr));
    int64_t v = 0;
    auto r = std::from_chars(tk.text.data(), tk.text.data() + tk.text.size(), v);
    if (r.ec != std::errc()) fail("integer literal out of range: " + tk.text);
    return Value::integer(v);
  }

  ExprPtr parse_postfix(ExprPtr e) {
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

  ExprPtr parse_subscript(ExprPtr obj, int line) {
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
  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto e = std::make_unique<Expr>(Expr::Kind::Call, cur().line);
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == Tok::Name) {
      advance();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter_chain(ExprPtr e, bool first_bare = false) {
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

  const std::vector<Token>& t_;
  size_t p_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace pagoda::jinja
