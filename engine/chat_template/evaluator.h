// Renders a parsed template: executes statements, evaluates expressions, manages scopes
// (a new scope per loop iteration and per macro call, as jinja2 does) and enforces the
// limits that stop runaway templates.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/chat_template/ast.h"

namespace pagoda::jinja {

// One variable scope; lookups fall back to the parent.
struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;

  const Value* lookup(const std::string& name) const;
};

class Evaluator {
 public:
  // `globals` is a dict of the names visible everywhere (functions and render inputs).
  explicit Evaluator(const Value& globals);
  // Breaks the reference cycles closures create (see captured_).
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Renders `body` in a fresh top-level scope. Throws ChatTemplateError.
  std::string render(const Body& body);

 private:
  enum class Flow { Normal, Break, Continue };
  using FramePtr = std::shared_ptr<Frame>;

  Flow exec(const Body& body, const FramePtr& frame, std::string& out);
  Flow exec_stmt(const Stmt& s, const FramePtr& frame, std::string& out);
  Flow exec_for(const Stmt& s, const FramePtr& frame, std::string& out);
  // Runs a for loop over `items` (before its inline `if`) at nesting level `depth0` (0 for the
  // statement itself, +1 for each recursive loop(...) call), in a scope below `frame`.
  Flow run_loop(const Stmt& s, const FramePtr& frame, std::vector<Value> items, int64_t depth0,
                std::string& out);
  void exec_set(const Stmt& s, const FramePtr& frame);
  void assign(const std::vector<Target>& targets, const Value& v, const FramePtr& frame);
  Value make_macro(const Stmt& s, const FramePtr& frame);

  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_name(const Expr& e, const FramePtr& frame);
  Value eval_call(const Expr& e, const FramePtr& frame, const Value* caller = nullptr);
  Value eval_compare(const Expr& e, const FramePtr& frame);
  Value eval_binary(const Expr& e, const FramePtr& frame);
  CallArgs eval_args(const Expr& e, size_t first, const FramePtr& frame);
  // Applies a filter chain whose innermost operand is the placeholder of a filter block.
  Value apply_filter_chain(const Expr& chain, Value v, const FramePtr& frame);

  void append(std::string& out, const std::string& s);
  // Counts nesting; throws past kMaxRecursion.
  struct DepthGuard {
    Evaluator& ev;
    DepthGuard(Evaluator& e, int line);
    ~DepthGuard() { --ev.depth_; }
  };

  Value globals_;
  // Scopes captured by macros and call blocks. A macro stored in the scope it captures is a
  // shared_ptr cycle; nothing of a render outlives it, so the destructor empties these scopes.
  std::vector<FramePtr> captured_;
  int depth_ = 0;
  int64_t iterations_ = 0;
};

// A ChatTemplateError whose message already names its template line.
struct LocatedError : ChatTemplateError {
  using ChatTemplateError::ChatTemplateError;
};

// Rethrows `e` as a LocatedError naming `line`, unless it already names one.
[[noreturn]] void rethrow_at_line(const ChatTemplateError& e, int line);

}  // namespace pagoda::jinja
