// Grammar IR -> byte-level automaton (compiled_grammar.h): groups and alternations become
// helper rules, repetitions become right-recursive helper rules (x* : R ::= x R | empty, and a
// chain of optional rules for small {m,n}; larger counts count in binary, O(log n) rules),
// terminals become byte DFAs. Then nullability, and the
// check that no rule can reach itself without consuming a byte (left recursion), which the
// matcher's eager expansion could not handle.
#include <algorithm>

#include "engine/structured/compiled_grammar.h"

namespace pagoda::structured {

namespace {

struct PendingElement {
  Element element;
  uint32_t node_begin = 0, node_end = 0;  // nodes built for a terminal, owner fixed on append
};
using PendingAlt = std::vector<PendingElement>;

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Sorted, merged, negated if asked, surrogates removed.
std::vector<CodepointRange> normalize_class(std::vector<CodepointRange> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodepointRange& a, const CodepointRange& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> merged;
  for (const CodepointRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, r.hi);
    else
      merged.push_back(r);
  }
  if (negated) {
    std::vector<CodepointRange> complement;
    uint32_t next = 0;
    for (const CodepointRange& r : merged) {
      if (r.lo > next) complement.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodepoint) complement.push_back({next, kMaxCodepoint});
    merged = std::move(complement);
  }
  std::vector<CodepointRange> out;
  for (const CodepointRange& r : merged) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  return out;
}

class Lowering {
 public:
  Lowering(const Grammar& g, const GrammarLimits& limits) : grammar_(g), limits_(limits) {
    impl_ = std::make_unique<CompiledGrammar::Impl>();
    impl_->limits = limits;
  }

  std::unique_ptr<CompiledGrammar::Impl> run() {
    // The start: RuleRef(start) End, at element 0.
    impl_->elements.push_back({Element::Kind::RuleRef, grammar_.start});
    impl_->elements.push_back({Element::Kind::End, 0});
    impl_->start_element = 0;
    for (const GrammarRule& r : grammar_.rules) {
      LoweredRule lr;
      lr.name = r.name;
      impl_->rules.push_back(std::move(lr));
      origin_.push_back({r.line, r.column});
    }
    for (uint32_t id = 0; id < grammar_.rules.size(); ++id) {
      const Expr& body = grammar_.rules[id].body;
      if (body.kind == Expr::Kind::Alternation) {
        for (const Expr& alt : body.children) add_alternative(id, lower_alternative(alt, id));
      } else {
        add_alternative(id, lower_alternative(body, id));
      }
    }
    compute_nullable();
    check_left_recursion();
    return std::move(impl_);
  }

 private:
  void check_budget() {
    size_t used = impl_->elements.size() + impl_->nodes.size() + pending_elements_;
    if (used > limits_.max_elements)
      throw GrammarError("grammar too large: more than " + std::to_string(limits_.max_elements) +
                         " elements after expanding repetitions");
    if (impl_->rules.size() > limits_.max_rules)
      throw GrammarError("grammar too large: more than " + std::to_string(limits_.max_rules) +
                         " rules after lowering groups and repetitions");
  }

  uint32_t new_rule(uint32_t parent, const Expr& origin) {
    LoweredRule r;
    r.name = impl_->rules[parent].name + "#" + std::to_string(++helper_count_);
    impl_->rules.push_back(std::move(r));
    origin_.push_back({origin.line, origin.column});
    check_budget();
    return static_cast<uint32_t>(impl_->rules.size() - 1);
  }

  void add_alternative(uint32_t rule, PendingAlt alt) {
    uint32_t first = static_cast<uint32_t>(impl_->elements.size());
    for (PendingElement& p : alt) {
      uint32_t index = static_cast<uint32_t>(impl_->elements.size());
      for (uint32_t n = p.node_begin; n < p.node_end; ++n) impl_->nodes[n].element = index;
      impl_->elements.push_back(p.element);
    }
    impl_->elements.push_back({Element::Kind::End, 0});
    pending_elements_ -= alt.size();
    impl_->rules[rule].alternatives.push_back(first);
    check_budget();
  }

  PendingAlt lower_alternative(const Expr& e, uint32_t rule) {
    PendingAlt alt;
    lower_into(e, alt, rule);
    return alt;
  }

  void push(PendingAlt& seq, PendingElement p) {
    seq.push_back(p);
    ++pending_elements_;
    check_budget();
  }

  void push_ref(PendingAlt& seq, uint32_t rule) {
    PendingElement p;
    p.element = {Element::Kind::RuleRef, rule};
    push(seq, p);
  }

  void lower_into(const Expr& e, PendingAlt& seq, uint32_t rule) {
    switch (e.kind) {
      case Expr::Kind::Literal: {
        if (e.codepoints.empty()) return;
        std::string bytes;
        for (uint32_t cp : e.codepoints) append_utf8(bytes, cp);
        PendingElement p;
        p.node_begin = static_cast<uint32_t>(impl_->nodes.size());
        p.element = {Element::Kind::Terminal, build_literal_dfa(*impl_, 0, bytes)};
        p.node_end = static_cast<uint32_t>(impl_->nodes.size());
        push(seq, p);
        return;
      }
      case Expr::Kind::CharClass: {
        std::vector<CodepointRange> set = normalize_class(e.ranges, e.negated);
        if (set.empty())
          throw GrammarError(source_location(e.line, e.column) +
                             "character class matches no character");
        PendingElement p;
        p.node_begin = static_cast<uint32_t>(impl_->nodes.size());
        p.element = {Element::Kind::Terminal, build_codepoint_dfa(*impl_, 0, set)};
        p.node_end = static_cast<uint32_t>(impl_->nodes.size());
        push(seq, p);
        return;
      }
      case Expr::Kind::RuleRef:
        if (e.rule >= grammar_.rules.size())
          throw GrammarError(source_location(e.line, e.column) + "reference to rule #" +
                             std::to_string(e.rule) + ", which does not exist");
        push_ref(seq, e.rule);
        return;
      case Expr::Kind::Sequence:
        for (const Expr& c : e.children) lower_into(c, seq, rule);
        return;
      case Expr::Kind::Alternation: {
        uint32_t helper = new_rule(rule, e);
        for (const Expr& c : e.children) add_alternative(helper, lower_alternative(c, helper));
        push_ref(seq, helper);
        return;
      }
      case Expr::Kind::Repeat:
        lower_repeat(e, seq, rule);
        return;
    }
  }

  void lower_repeat(const Expr& e, PendingAlt& seq, uint32_t rule) {
    if (e.children.size() != 1 || e.max_count < e.min_count)
      throw GrammarError(source_location(e.line, e.column) + "malformed repetition");
    const Expr& body = e.children[0];
    if (e.max_count == 0) return;
    // A terminal or reference is re-lowered at each use; anything bigger becomes one helper
    // rule referenced at each use.
    bool simple = body.kind == Expr::Kind::Literal || body.kind == Expr::Kind::CharClass ||
                  body.kind == Expr::Kind::RuleRef;
    uint32_t unit_rule = UINT32_MAX;
    auto unit_as_rule = [&]() {
      if (unit_rule == UINT32_MAX) {
        unit_rule = new_rule(rule, body);
        if (body.kind == Expr::Kind::Alternation) {
          for (const Expr& c : body.children)
            add_alternative(unit_rule, lower_alternative(c, unit_rule));
        } else {
          add_alternative(unit_rule, lower_alternative(body, unit_rule));
        }
      }
      return unit_rule;
    };
    auto emit_unit = [&](PendingAlt& into, uint32_t owner) {
      if (simple) lower_into(body, into, owner);
      else push_ref(into, unit_as_rule());
    };
    // Counts up to kRepeatUnrollLimit are unrolled; larger ones count in binary (see below).
    if (e.min_count <= kRepeatUnrollLimit) {
      for (uint32_t i = 0; i < e.min_count; ++i) emit_unit(seq, rule);
    } else {
      BinaryCounter counter(*this, rule, e, unit_as_rule());
      counter.exactly(e.min_count, seq);
    }
    if (e.max_count == kUnbounded) {
      uint32_t star = new_rule(rule, e);
      PendingAlt more;
      emit_unit(more, star);
      push_ref(more, star);
      add_alternative(star, std::move(more));
      add_alternative(star, {});
      push_ref(seq, star);
      return;
    }
    uint32_t optional_count = e.max_count - e.min_count;
    if (optional_count > kRepeatUnrollLimit) {
      BinaryCounter counter(*this, rule, e, unit_as_rule());
      uint32_t up_to = counter.up_to(optional_count);
      if (up_to != UINT32_MAX) push_ref(seq, up_to);
      return;
    }
    uint32_t previous = UINT32_MAX;
    for (uint32_t i = 0; i < optional_count; ++i) {
      uint32_t opt = new_rule(rule, e);
      PendingAlt one;
      emit_unit(one, opt);
      if (previous != UINT32_MAX) push_ref(one, previous);
      add_alternative(opt, std::move(one));
      add_alternative(opt, {});
      previous = opt;
    }
    if (previous != UINT32_MAX) push_ref(seq, previous);
  }

  // Large repetition counts without unrolling: power(i) matches the unit exactly 2^i times
  // (power(i) ::= power(i-1) power(i-1)), below(i) matches it 0 .. 2^i - 1 times
  // (below(i) ::= power(i-1) below(i-1) | below(i-1), the alternatives told apart by length,
  // so the grammar stays unambiguous), up_to(n) 0 .. n times by n's binary digits. A count n
  // costs O(log n) rules and parse stacks O(log n) deep, whatever n is.
  class BinaryCounter {
   public:
    BinaryCounter(Lowering& l, uint32_t owner, const Expr& origin, uint32_t unit)
        : l_(l), owner_(owner), origin_(origin) {
      powers_.push_back(unit);
    }

    void exactly(uint32_t n, PendingAlt& seq) {
      for (int bit = 31; bit >= 0; --bit)
        if ((n >> bit) & 1u) l_.push_ref(seq, power(uint32_t(bit)));
    }

    // A rule matching 0..n units, or UINT32_MAX for n == 0 (nothing to write).
    uint32_t up_to(uint32_t n) {
      if (n == 0) return UINT32_MAX;
      uint32_t top = 31;
      while (!((n >> top) & 1u)) --top;
      if (top < 31 && n == (1u << (top + 1)) - 1) return below(top + 1);
      uint32_t r = l_.new_rule(owner_, origin_);
      uint32_t low = below(top);
      l_.add_alternative(r, low == UINT32_MAX ? PendingAlt{} : ref_alt(low));
      PendingAlt high = ref_alt(power(top));
      uint32_t rest = up_to(n - (1u << top));
      if (rest != UINT32_MAX) l_.push_ref(high, rest);
      l_.add_alternative(r, std::move(high));
      return r;
    }

   private:
    PendingAlt ref_alt(uint32_t target) {
      PendingAlt alt;
      l_.push_ref(alt, target);
      return alt;
    }

    uint32_t power(uint32_t i) {
      while (powers_.size() <= i) {
        uint32_t half = powers_.back();
        uint32_t r = l_.new_rule(owner_, origin_);
        PendingAlt twice = ref_alt(half);
        l_.push_ref(twice, half);
        l_.add_alternative(r, std::move(twice));
        powers_.push_back(r);
      }
      return powers_[i];
    }

    uint32_t below(uint32_t i) {
      if (i == 0) return UINT32_MAX;
      while (belows_.size() < i) {
        uint32_t k = uint32_t(belows_.size()) + 1;  // building below(k)
        uint32_t smaller = k == 1 ? UINT32_MAX : belows_.back();
        uint32_t r = l_.new_rule(owner_, origin_);
        PendingAlt more = ref_alt(power(k - 1));
        if (smaller != UINT32_MAX) l_.push_ref(more, smaller);
        l_.add_alternative(r, std::move(more));
        l_.add_alternative(r, smaller == UINT32_MAX ? PendingAlt{} : ref_alt(smaller));
        belows_.push_back(r);
      }
      return belows_[i - 1];
    }

    Lowering& l_;
    uint32_t owner_;
    const Expr& origin_;
    std::vector<uint32_t> powers_;  // powers_[i] = power(i); powers_[0] is the unit rule
    std::vector<uint32_t> belows_;  // belows_[i - 1] = below(i)
  };

  void compute_nullable() {
    auto& el = impl_->elements;
    auto& rules = impl_->rules;
    bool changed = true;
    for (size_t pass = 0; changed && pass <= rules.size() + 1; ++pass) {
      changed = false;
      for (LoweredRule& r : rules) {
        if (r.nullable) continue;
        for (uint32_t a : r.alternatives) {
          bool all = true;
          for (uint32_t i = a; el[i].kind != Element::Kind::End; ++i) {
            if (el[i].kind == Element::Kind::Terminal ||
                !rules[el[i].value].nullable) {
              all = false;
              break;
            }
          }
          if (all) {
            r.nullable = true;
            changed = true;
            break;
          }
        }
      }
    }
    impl_->nullable_from.assign(el.size(), 0);
    for (size_t i = el.size(); i-- > 0;) {
      if (el[i].kind == Element::Kind::End) impl_->nullable_from[i] = 1;
      else if (el[i].kind == Element::Kind::Terminal) impl_->nullable_from[i] = 0;
      else impl_->nullable_from[i] = rules[el[i].value].nullable && impl_->nullable_from[i + 1];
    }
  }

  // Rules reachable from the start of `rule` without consuming a byte.
  std::vector<uint32_t> left_corners(uint32_t rule) const {
    std::vector<uint32_t> out;
    const auto& el = impl_->elements;
    for (uint32_t a : impl_->rules[rule].alternatives) {
      for (uint32_t i = a; el[i].kind == Element::Kind::RuleRef; ++i) {
        out.push_back(el[i].value);
        if (!impl_->rules[el[i].value].nullable) break;
      }
    }
    return out;
  }

  std::string describe(uint32_t rule) const {
    const std::string& name = impl_->rules[rule].name;
    if (rule < grammar_.rules.size()) return "'" + name + "'";
    return "the group or repetition at line " + std::to_string(origin_[rule].first) +
           ", column " + std::to_string(origin_[rule].second) + " (in rule '" +
           name.substr(0, name.find('#')) + "')";
  }

  void check_left_recursion() {
    size_t n = impl_->rules.size();
    std::vector<std::vector<uint32_t>> corners(n);
    for (uint32_t r = 0; r < n; ++r) corners[r] = left_corners(r);
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t root = 0; root < n; ++root) {
      if (color[root]) continue;
      path.push_back({root, 0});
      color[root] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == corners[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        uint32_t c = corners[r][next++];
        if (color[c] == 1) {
          std::string msg = "left recursion: rule " + describe(c) +
                            " can reach itself without consuming input";
          if (c >= grammar_.rules.size() && describe(c).find("group") != std::string::npos)
            msg += " (a repeated expression that can match the empty string?)";
          throw GrammarError(source_location(origin_[c].first, origin_[c].second) + msg);
        }
        if (color[c] == 0) {
          color[c] = 1;
          path.push_back({c, 0});
        }
      }
    }
  }

  const Grammar& grammar_;
  const GrammarLimits& limits_;
  std::unique_ptr<CompiledGrammar::Impl> impl_;
  std::vector<std::pair<uint32_t, uint32_t>> origin_;  // per rule: source line, column
  size_t helper_count_ = 0;
  size_t pending_elements_ = 0;
};

}  // namespace

std::unique_ptr<CompiledGrammar::Impl> lower_grammar(const Grammar& grammar,
                                                     const GrammarLimits& limits) {
  Lowering lowering(grammar, limits);
  return lowering.run();
}

}  // namespace pagoda::structured
