// Statement execution and expression evaluation over the syntax tree (see evaluator.h).
#include "engine/chat_template/evaluator.h"

#include <algorithm>
#include <optional>

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/ops.h"

namespace pagoda::jinja {

namespace {
constexpr const char* kLocatedPrefix = "template error at line ";
}

[[noreturn]] void rethrow_at_line(const ChatTemplateError& e, int line) {
  if (const auto* located = dynamic_cast<const LocatedError*>(&e)) throw *located;
  throw LocatedError(kLocatedPrefix + std::to_string(line) + ": " + e.what());
}

const Value* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return &it->second;
  }
  return nullptr;
}

Evaluator::DepthGuard::DepthGuard(Evaluator& e, int line) : ev(e) {
  if (++ev.depth_ > kMaxRecursion) {
    --ev.depth_;
    throw LocatedError(kLocatedPrefix + std::to_string(line) + ": recursion deeper than " +
                            std::to_string(kMaxRecursion) + " levels");
  }
}

Evaluator::Evaluator(const Value& globals) : globals_(globals) {}

Evaluator::~Evaluator() {
  for (auto& f : captured_) f->vars.clear();
}

std::string Evaluator::render(const Body& body) {
  auto top = std::make_shared<Frame>();
  for (const auto& [k, v] : globals_.dict->items) top->vars[k.s] = v;
  std::string out;
  exec(body, top, out);
  return out;
}

void Evaluator::append(std::string& out, const std::string& s) {
  if (out.size() + s.size() > kMaxStringBytes)
    throw ChatTemplateError("rendered output larger than the limit of " + std::to_string(kMaxStringBytes) + " bytes");
  out += s;
}

Evaluator::Flow Evaluator::exec(const Body& body, const FramePtr& frame, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec_stmt(*s, frame, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s, const FramePtr& frame, std::string& out) {
  DepthGuard guard(*this, s.line);
  try {
    switch (s.kind) {
      case Stmt::Kind::Text: append(out, s.text); return Flow::Normal;
      case Stmt::Kind::Output: append(out, eval(*s.expr, frame).str()); return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, frame).truthy()) return exec(body, frame, out);
        return exec(s.else_body, frame, out);
      case Stmt::Kind::For: return exec_for(s, frame, out);
      case Stmt::Kind::Set: exec_set(s, frame); return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        // The captured body has a scope of its own (names set inside do not leak), as in jinja2.
        auto inner = std::make_shared<Frame>();
        inner->parent = frame;
        std::string captured;
        // A break/continue inside the captured body leaves the enclosing loop, unassigned.
        if (Flow fl = exec(s.body, inner, captured); fl != Flow::Normal) return fl;
        Value v = Value::string(std::move(captured));
        if (s.expr) v = apply_filter_chain(*s.expr, v, frame);
        assign(s.targets, v, frame);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: frame->vars[s.text] = make_macro(s, frame); return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        // `caller()` renders the block body in a scope that sees the call site.
        const Stmt* stmt = &s;
        FramePtr site = frame;
        captured_.push_back(frame);
        Value caller = Value::function("caller", [this, stmt, site](CallArgs& a) {
          auto f = std::make_shared<Frame>();
          f->parent = site;
          for (size_t k = 0; k < stmt->params.size(); ++k) {
            const auto& p = stmt->params[k];
            Value v = a.get(k, p.name.c_str());
            if (v.is_undefined() && p.default_value) v = eval(*p.default_value, f);
            f->vars[p.name] = v;
          }
          std::string body;
          exec(stmt->body, f, body);
          return Value::string(std::move(body));
        });
        append(out, eval_call(*s.expr, frame, &caller).str());
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        auto inner = std::make_shared<Frame>();
        inner->parent = frame;
        std::string captured;
        if (Flow fl = exec(s.body, inner, captured); fl != Flow::Normal) return fl;
        append(out, apply_filter_chain(*s.expr, Value::string(std::move(captured)), frame).str());
        return Flow::Normal;
      }
      case Stmt::Kind::With:
      case Stmt::Kind::Generation: {
        auto inner = std::make_shared<Frame>();
        inner->parent = frame;
        for (const auto& p : s.params) inner->vars[p.name] = eval(*p.default_value, frame);
        return exec(s.body, inner, out);
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
  } catch (const ChatTemplateError& e) {
    rethrow_at_line(e, s.line);
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
  return run_loop(s, frame, iterate(eval(*s.expr, frame)), 0, out);
}

Evaluator::Flow Evaluator::run_loop(const Stmt& s, const FramePtr& frame, std::vector<Value> items,
                                    int64_t depth0, std::string& out) {
  if (s.cond) {
    // The inline `if` filters before the loop starts, so loop.length counts kept items only.
    std::vector<Value> kept;
    for (const Value& item : items) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      assign(s.targets, item, f);
      if (eval(*s.cond, f).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  // As jinja2 compiles it, `else` runs unless some iteration finished its body without a break
  // or continue (so it also runs after an early break), in a scope of its own.
  auto run_else = [&] {
    auto inner = std::make_shared<Frame>();
    inner->parent = frame;
    return exec(s.else_body, inner, out);
  };
  if (items.empty()) return run_else();
  bool completed = false;
  const int64_t n = static_cast<int64_t>(items.size());
  // One `loop` object per loop, updated in place each iteration (as jinja2's LoopContext is).
  Value loop = Value::make_dict();
  auto counter = std::make_shared<int64_t>(0);
  const char* keys[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                        "depth", "depth0", "previtem", "nextitem", "cycle", "changed"};
  for (const char* key : keys) loop.dict->items.emplace_back(Value::string(key), Value());
  auto& slot = loop.dict->items;
  slot[6].second = Value::integer(n);
  slot[7].second = Value::integer(depth0 + 1);
  slot[8].second = Value::integer(depth0);
  slot[11].second = Value::function("loop.cycle", [counter](CallArgs& a) {
    if (a.pos.empty()) throw ChatTemplateError("loop.cycle: no items given");
    return a.pos[static_cast<size_t>(*counter) % a.pos.size()];
  });
  // loop.changed(*values): true on the first call and whenever the values differ from the
  // previous call's.
  auto last_changed = std::make_shared<std::optional<Value>>();
  slot[12].second = Value::function("loop.changed", [last_changed](CallArgs& a) {
    Value now = Value::make_list(a.pos, true);
    if (*last_changed && equals(**last_changed, now)) return Value::boolean(false);
    *last_changed = std::move(now);
    return Value::boolean(true);
  });
  if (s.recursive) {
    // loop(items) renders this for statement (inline `if` and `else` included) over `items`,
    // one level deeper, in the scope the statement runs in, and returns the text.
    // The callable holds `frame` (see captured_); deeper levels run in the same frame.
    if (depth0 == 0) captured_.push_back(frame);
    const Stmt* stmt = &s;
    FramePtr scope = frame;
    loop.dict->call = std::make_shared<Function>(Function{"loop", [this, stmt, scope, depth0](CallArgs& a) {
      if (a.pos.size() != 1 || !a.kw.empty())
        throw ChatTemplateError("loop() takes exactly one argument, the items to loop over");
      std::string text;
      run_loop(*stmt, scope, iterate(a.pos[0]), depth0 + 1, text);
      return Value::string(std::move(text));
    }});
  }
  for (int64_t k = 0; k < n; ++k) {
    if (++iterations_ > kMaxLoopIterations)
      throw ChatTemplateError("more than " + std::to_string(kMaxLoopIterations) + " loop iterations");
    *counter = k;
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    assign(s.targets, items[k], f);
    slot[0].second = Value::integer(k + 1);
    slot[1].second = Value::integer(k);
    slot[2].second = Value::integer(n - k);
    slot[3].second = Value::integer(n - k - 1);
    slot[4].second = Value::boolean(k == 0);
    slot[5].second = Value::boolean(k == n - 1);
    slot[9].second = k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
    slot[10].second = k + 1 < n ? items[k + 1] : Value::undefined("there is no next item");
    loop.dict->depth = 1 + std::max(slot[9].second.depth(), slot[10].second.depth());
    f->vars["loop"] = loop;
    Flow fl = exec(s.body, f, out);
    if (fl == Flow::Break) break;
    completed = completed || fl == Flow::Normal;
  }
  if (!completed && !s.else_body.empty()) return run_else();
  return Flow::Normal;
}

void Evaluator::assign(const std::vector<Target>& targets, const Value& v, const FramePtr& frame) {
  auto store = [&](const Target& t, const Value& val) {
    if (t.attr.empty()) {
      frame->vars[t.name] = val;
      return;
    }
    const Value* ns = frame->lookup(t.name);
    if (!ns || !ns->is_dict() || ns->dict->flavor != Dict::Flavor::Namespace)
      throw ChatTemplateError("cannot assign attribute '" + t.attr + "' on '" + t.name + "': not a namespace");
    ns->dict->set(Value::string(t.attr), val);
  };
  if (targets.size() == 1) {
    store(targets[0], v);
    return;
  }
  if (!v.is_list() && !v.is_string() && !v.is_dict())
    throw ChatTemplateError(std::string("cannot unpack non-iterable ") + v.type_name() + " object");
  std::vector<Value> parts = iterate(v);
  if (parts.size() != targets.size())
    throw ChatTemplateError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                            std::to_string(targets.size()) + " names");
  for (size_t k = 0; k < targets.size(); ++k) store(targets[k], parts[k]);
}

void Evaluator::exec_set(const Stmt& s, const FramePtr& frame) { assign(s.targets, eval(*s.expr, frame), frame); }

Value Evaluator::make_macro(const Stmt& s, const FramePtr& frame) {
  const Stmt* stmt = &s;
  FramePtr defining = frame;
  captured_.push_back(frame);
  return Value::function(s.text, [this, stmt, defining](CallArgs& a) {
    DepthGuard guard(*this, stmt->line);
    auto f = std::make_shared<Frame>();
    f->parent = defining;
    // Extra arguments land in `varargs` / `kwargs` when the body uses them, as in jinja2.
    if (a.pos.size() > stmt->params.size() && !stmt->takes_varargs)
      throw ChatTemplateError("macro '" + stmt->text + "' takes not more than " +
                              std::to_string(stmt->params.size()) + " argument(s)");
    std::vector<Value> extra_pos;
    for (size_t k = stmt->params.size(); k < a.pos.size(); ++k) extra_pos.push_back(a.pos[k]);
    f->vars["varargs"] = Value::make_list(std::move(extra_pos), true);
    Value extra_kw = Value::make_dict();
    for (const auto& [name, v] : a.kw) {
      bool known = name == "caller";
      for (const auto& p : stmt->params) known = known || p.name == name;
      if (known) continue;
      if (!stmt->takes_kwargs)
        throw ChatTemplateError("macro '" + stmt->text + "' got an unexpected keyword argument '" + name + "'");
      extra_kw.dict->set(Value::string(name), v);
    }
    f->vars["kwargs"] = extra_kw;
    for (size_t k = 0; k < stmt->params.size(); ++k) {
      const auto& p = stmt->params[k];
      Value v = a.get(k, p.name.c_str());
      if (v.is_undefined() && !a.has(k, p.name.c_str()))
        v = p.default_value ? eval(*p.default_value, f) : Value::undefined("parameter '" + p.name + "' was not provided");
      f->vars[p.name] = v;
    }
    Value caller = a.keyword("caller");
    if (!caller.is_undefined()) f->vars["caller"] = caller;
    std::string out;
    exec(stmt->body, f, out);
    return Value::string(std::move(out));
  });
}

Value Evaluator::eval(const Expr& e, const FramePtr& frame) {
  DepthGuard guard(*this, e.line);
  switch (e.kind) {
    case Expr::Kind::Literal: return e.literal;
    case Expr::Kind::Name: return eval_name(e, frame);
    case Expr::Kind::GetAttr: return get_attr(eval(*e.args[0], frame), e.name);
    case Expr::Kind::GetItem: return get_item(eval(*e.args[0], frame), eval(*e.args[1], frame));
    case Expr::Kind::Slice: {
      Value parts[3];
      for (int k = 0; k < 3; ++k)
        if (e.args[k + 1]) parts[k] = eval(*e.args[k + 1], frame);
      return slice(eval(*e.args[0], frame), parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::Call: return eval_call(e, frame);
    case Expr::Kind::Filter: {
      Value v = eval(*e.args[0], frame);
      return apply_filter(e.name, v, eval_args(e, 1, frame));
    }
    case Expr::Kind::Test: {
      Value v = eval(*e.args[0], frame);
      bool r = apply_test(e.name, v, eval_args(e, 1, frame));
      return Value::boolean(r != e.negate);
    }
    case Expr::Kind::Unary: {
      Value v = eval(*e.args[0], frame);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (e.name == "-") return negate(v);
      if (!v.is_number()) throw ChatTemplateError(std::string("bad operand type for unary +: '") + v.type_name() + "'");
      return v.kind == Kind::Bool ? Value::integer(v.i) : v;
    }
    case Expr::Kind::Binary: return eval_binary(e, frame);
    case Expr::Kind::Compare: return eval_compare(e, frame);
    case Expr::Kind::Conditional:
      if (eval(*e.args[0], frame).truthy()) return eval(*e.args[1], frame);
      return e.args[2] ? eval(*e.args[2], frame) : Value::undefined("the conditional expression has no else branch");
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, frame));
      return Value::make_list(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], frame);
        if (key.is_list() && !key.list->tuple) throw ChatTemplateError("unhashable type: 'list'");
        if (key.is_dict()) throw ChatTemplateError("unhashable type: 'dict'");
        d.dict->set(key, eval(*e.args[k + 1], frame));
      }
      return d;
    }
  }
  return Value::undefined();
}

Value Evaluator::eval_name(const Expr& e, const FramePtr& frame) {
  if (const Value* v = frame->lookup(e.name)) return *v;
  return Value::undefined("'" + e.name + "' is undefined");
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first, const FramePtr& frame) {
  CallArgs a;
  for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], frame));
  for (const auto& [name, x] : e.kwargs) a.kw.emplace_back(name, eval(*x, frame));
  return a;
}

Value Evaluator::eval_call(const Expr& e, const FramePtr& frame, const Value* caller) {
  Value fn = eval(*e.args[0], frame);
  if (fn.is_undefined()) undefined_error(fn);
  if (fn.is_dict() && fn.dict->call) {  // a recursive loop's `loop`
    CallArgs a = eval_args(e, 1, frame);
    return fn.dict->call->call(a);
  }
  if (fn.kind != Kind::Function) throw ChatTemplateError(std::string("'") + fn.type_name() + "' object is not callable");
  CallArgs a = eval_args(e, 1, frame);
  if (caller) a.kw.emplace_back("caller", *caller);
  return fn.fn->call(a);
}

Value Evaluator::eval_binary(const Expr& e, const FramePtr& frame) {
  Value a = eval(*e.args[0], frame);
  if (e.name == "and") return a.truthy() ? eval(*e.args[1], frame) : a;
  if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], frame);
  return binary_op(e.name, a, eval(*e.args[1], frame));
}

Value Evaluator::eval_compare(const Expr& e, const FramePtr& frame) {
  Value left = eval(*e.args[0], frame);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.args[k + 1], frame);
    const std::string& op = e.ops[k];
    bool r;
    if (op == "==") r = equals(left, right);
    else if (op == "!=") r = !equals(left, right);
    else if (op == "in") r = contains(right, left);
    else if (op == "not in") r = !contains(right, left);
    else {
      if (left.is_undefined()) undefined_error(left);
      if (right.is_undefined()) undefined_error(right);
      if (op == "<") r = less(left, right);
      else if (op == ">") r = less(right, left);
      else if (op == "<=") r = !less(right, left);
      else r = !less(left, right);
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::apply_filter_chain(const Expr& chain, Value v, const FramePtr& frame) {
  if (chain.kind != Expr::Kind::Filter) return v;  // the placeholder operand
  DepthGuard guard(*this, chain.line);
  v = apply_filter_chain(*chain.args[0], std::move(v), frame);
  return apply_filter(chain.name, v, eval_args(chain, 1, frame));
}

}  // namespace pagoda::jinja
