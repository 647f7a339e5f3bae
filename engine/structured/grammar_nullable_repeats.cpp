// Unbounded repetitions whose body can match the empty string ((a|b*)*, ((x)*)*, (a?)+),
// rewritten before lowering so the matcher cannot loop without consuming a byte: with x
// nullable, x{m,} is the same language as (x without "")*. The "without the empty string"
// form is built structurally; a nullable rule reference gets a derived rule holding its body
// without "" (memoized, so recursive rules terminate).
#include <map>
#include <optional>

#include "engine/structured/grammar_ir.h"

namespace pagoda::structured {

namespace {

class NullableRepeats {
 public:
  explicit NullableRepeats(Grammar& g) : g_(g) {
    nullable_rule_.assign(g_.rules.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g_.rules.size(); ++r)
        if (!nullable_rule_[r] && nullable(g_.rules[r].body)) nullable_rule_[r] = changed = true;
    }
  }

  void run() {
    // Derived rules appended on the way are rewritten too (the bound is re-read).
    for (size_t r = 0; r < g_.rules.size(); ++r) {
      Expr body = g_.rules[r].body;  // a copy: rules may be appended meanwhile
      rewrite(body);
      g_.rules[r].body = std::move(body);
    }
  }

 private:
  bool nullable(const Expr& e) const {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.codepoints.empty();
      case Expr::Kind::CharClass: return false;
      case Expr::Kind::RuleRef: return e.rule < nullable_rule_.size() && nullable_rule_[e.rule];
      case Expr::Kind::Sequence:
        for (const Expr& c : e.children)
          if (!nullable(c)) return false;
        return true;
      case Expr::Kind::Alternation:
        for (const Expr& c : e.children)
          if (nullable(c)) return true;
        return false;
      case Expr::Kind::Repeat:
        return e.min_count == 0 || e.max_count == 0 || (!e.children.empty() && nullable(e.children[0]));
    }
    return false;
  }

  static Expr alternation_of(std::vector<Expr> alts, const Expr& where) {
    if (alts.size() == 1) return std::move(alts[0]);
    Expr out;
    out.kind = Expr::Kind::Alternation;
    out.line = where.line;
    out.column = where.column;
    out.children = std::move(alts);
    return out;
  }

  // The language of `e` without the empty string; nullopt when nothing is left.
  std::optional<Expr> nonempty(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        if (e.codepoints.empty()) return std::nullopt;
        return e;
      case Expr::Kind::CharClass: return e;
      case Expr::Kind::RuleRef: return nonempty_rule(e);
      case Expr::Kind::Sequence: {
        // The first non-empty part is child i; the ones before it matched "".
        std::vector<Expr> alts;
        for (size_t i = 0; i < e.children.size(); ++i) {
          if (std::optional<Expr> first = nonempty(e.children[i])) {
            Expr s;
            s.kind = Expr::Kind::Sequence;
            s.line = e.line;
            s.column = e.column;
            s.children.push_back(std::move(*first));
            for (size_t k = i + 1; k < e.children.size(); ++k) s.children.push_back(e.children[k]);
            alts.push_back(std::move(s));
          }
          if (!nullable(e.children[i])) break;
        }
        if (alts.empty()) return std::nullopt;
        return alternation_of(std::move(alts), e);
      }
      case Expr::Kind::Alternation: {
        std::vector<Expr> alts;
        for (const Expr& c : e.children)
          if (std::optional<Expr> n = nonempty(c)) alts.push_back(std::move(*n));
        if (alts.empty()) return std::nullopt;
        return alternation_of(std::move(alts), e);
      }
      case Expr::Kind::Repeat: {
        if (e.max_count == 0 || e.children.empty()) return std::nullopt;
        Expr out = e;
        out.min_count = 1;
        if (nullable(e.children[0])) {
          // Copies matching "" can be dropped: one to max non-empty copies.
          std::optional<Expr> body = nonempty(e.children[0]);
          if (!body) return std::nullopt;
          out.children[0] = std::move(*body);
        } else if (e.min_count >= 1) {
          return e;
        }
        return out;
      }
    }
    return std::nullopt;
  }

  std::optional<Expr> nonempty_rule(const Expr& ref) {
    if (ref.rule >= g_.rules.size() || !nullable_rule_[ref.rule]) return ref;
    auto found = derived_.find(ref.rule);
    if (found != derived_.end()) {
      if (!found->second) return std::nullopt;
      Expr out = ref;
      out.rule = *found->second;
      return out;
    }
    uint32_t index = static_cast<uint32_t>(g_.rules.size());
    derived_[ref.rule] = index;
    GrammarRule rule;
    rule.name = g_.rules[ref.rule].name + " (without the empty string)";
    rule.defined = true;
    rule.line = g_.rules[ref.rule].line;
    rule.column = g_.rules[ref.rule].column;
    Expr body = g_.rules[ref.rule].body;  // a copy: the vector grows below
    g_.rules.push_back(rule);
    nullable_rule_.push_back(false);
    std::optional<Expr> n = nonempty(body);
    if (!n) {
      // Only "": the derived rule is unused unless the rule recursed into itself meanwhile.
      derived_[ref.rule] = std::nullopt;
      Expr empty;
      empty.kind = Expr::Kind::Literal;
      g_.rules[index].body = empty;
      return std::nullopt;
    }
    g_.rules[index].body = std::move(*n);
    Expr out = ref;
    out.rule = index;
    return out;
  }

  void rewrite(Expr& e) {
    for (Expr& c : e.children) rewrite(c);
    if (e.kind != Expr::Kind::Repeat || e.max_count != kUnbounded || e.children.empty() || !nullable(e.children[0]))
      return;
    std::optional<Expr> body = nonempty(e.children[0]);
    if (!body) {
      Expr empty;
      empty.kind = Expr::Kind::Literal;
      empty.line = e.line;
      empty.column = e.column;
      e = empty;
      return;
    }
    e.children[0] = std::move(*body);
    e.min_count = 0;
  }

  Grammar& g_;
  std::vector<bool> nullable_rule_;
  std::map<uint32_t, std::optional<uint32_t>> derived_;
};

}  // namespace

void rewrite_nullable_repeats(Grammar& grammar) { NullableRepeats(grammar).run(); }

}  // namespace pagoda::structured
