// Grammar IR: a context-free grammar over Unicode code points as the GBNF parser produces it
// (rules of nested sequences, alternations, repetitions, literals and character classes),
// before lowering to the byte-level automaton in compiled_grammar.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/structured/structured.h"

namespace pagoda::structured {

// Inclusive code point range.
struct CodepointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
};

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kUnbounded = UINT32_MAX;  // Expr::max_count of * and +

struct Expr {
  enum class Kind { Literal, CharClass, RuleRef, Sequence, Alternation, Repeat };
  Kind kind = Kind::Sequence;
  std::vector<uint32_t> codepoints;     // Literal (may be empty: matches "")
  std::vector<CodepointRange> ranges;   // CharClass, as written
  bool negated = false;                 // CharClass: [^...]; `.` is a negated empty class
  uint32_t rule = 0;                    // RuleRef: index into Grammar::rules
  std::vector<Expr> children;           // Sequence / Alternation items; Repeat: exactly one
  uint32_t min_count = 0;               // Repeat
  uint32_t max_count = 0;               // Repeat (kUnbounded for * and +)
  uint32_t line = 0, column = 0;        // where it starts in the source (1-based)
};

struct GrammarRule {
  std::string name;
  Expr body;
  bool defined = false;   // false: only referenced so far (an error once parsing ends)
  uint32_t line = 0, column = 0;  // definition, or first reference while undefined
};

struct Grammar {
  std::vector<GrammarRule> rules;
  uint32_t start = 0;
};

// Parses llama.cpp's GBNF dialect (see gbnf_parser.cpp for the accepted syntax). Throws
// GrammarError naming line:column.
Grammar parse_gbnf(std::string_view text, const GrammarLimits& limits, std::string_view start_rule);

// Compiles a grammar built in code (front ends that do not go through GBNF text); the same
// checks and limits as compile_gbnf. Throws GrammarError.
std::shared_ptr<const CompiledGrammar> compile_grammar(const Grammar& grammar,
                                                       std::shared_ptr<const TokenVocabulary> vocab,
                                                       const GrammarLimits& limits = {});

// Rewrites every unbounded repetition whose body can match "" into one whose body cannot (the
// same language), so lowering's no-progress check accepts (a|b*)* and ((x)*)*.
void rewrite_nullable_repeats(Grammar& grammar);

// "line L, column C: " prefix of error messages.
std::string source_location(uint32_t line, uint32_t column);

}  // namespace pagoda::structured
