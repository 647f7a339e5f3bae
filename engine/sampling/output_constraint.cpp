#include "engine/sampling/output_constraint.h"

#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/structured/json_schema.h"
#include "engine/structured/regex.h"
#include "engine/tokenizer/tokenizer.h"

namespace pagoda {

namespace {

const char* kind_name(OutputConstraint::Kind k) {
  switch (k) {
    case OutputConstraint::Kind::JsonObject: return "json_object";
    case OutputConstraint::Kind::JsonSchema: return "json_schema";
    case OutputConstraint::Kind::Gbnf: return "gbnf";
    case OutputConstraint::Kind::Regex: return "regex";
    case OutputConstraint::Kind::Choice: return "choice";
  }
  return "?";
}

// The part the kind describes, as a grammar whose start rule is `root`.
std::string body_gbnf(const OutputConstraint& c) {
  structured::SchemaOptions opts;
  opts.flexible_whitespace = c.flexible_whitespace;
  switch (c.kind) {
    case OutputConstraint::Kind::JsonObject:
      return structured::json_object_gbnf(opts);
    case OutputConstraint::Kind::JsonSchema: {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(c.source);
      } catch (const nlohmann::json::exception& e) {
        throw ConstraintError(std::string("the schema is not valid JSON: ") + e.what());
      }
      if (!schema.is_object() && !schema.is_boolean())
        throw ConstraintError("the schema must be a JSON object (or a boolean)");
      return structured::json_schema_to_gbnf(schema, opts);
    }
    case OutputConstraint::Kind::Gbnf:
      return c.source;
    case OutputConstraint::Kind::Regex:
      return structured::regex_to_gbnf(c.source);
    case OutputConstraint::Kind::Choice:
      return structured::choice_gbnf(c.choices);
  }
  throw ConstraintError("unknown constraint kind");
}

// `name` ::= any text in which `end` first occurs at its very end: the states of a
// Knuth-Morris-Pratt matcher for `end` (rule name-K: K bytes of `end` matched), each byte
// either advancing it, falling back, or restarting. Tail references only, so the matcher's
// stack stays flat however long the text.
std::string text_until_gbnf(const std::string& name, const std::string& end) {
  for (unsigned char ch : end)
    if (ch < 0x20 || ch >= 0x7f) throw ConstraintError("the reasoning delimiter must be printable ASCII");
  if (end.empty()) throw ConstraintError("empty reasoning delimiter");
  // fail[k]: the longest proper border of end[0, k).
  std::vector<size_t> fail(end.size() + 1, 0);
  for (size_t k = 2; k <= end.size(); ++k) {
    size_t b = fail[k - 1];
    while (b > 0 && end[b] != end[k - 1]) b = fail[b];
    fail[k] = end[b] == end[k - 1] ? b + 1 : 0;
  }
  auto next = [&](size_t k, char ch) {
    while (k > 0 && end[k] != ch) k = fail[k];
    return end[k] == ch ? k + 1 : 0;
  };
  auto state = [&](size_t k) { return name + "-" + std::to_string(k); };
  auto hex = [](unsigned char ch) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", ch);
    return std::string(buf);
  };
  std::string distinct;
  for (char ch : end)
    if (distinct.find(ch) == std::string::npos) distinct += ch;
  std::string out = name + " ::= " + state(0) + "\n";
  for (size_t k = 0; k < end.size(); ++k) {
    out += state(k) + " ::= ";
    std::string others = "[^";
    for (char ch : distinct) {
      size_t to = next(k, ch);
      out += structured::gbnf_literal(std::string(1, ch)) + (to == end.size() ? "" : " " + state(to)) + " | ";
      others += hex((unsigned char)ch);
    }
    out += others + "] " + state(0) + "\n";
  }
  return out;
}

// The reasoning block a constraint lets through first, as rule `pagoda-reasoning`.
std::string reasoning_gbnf(const OutputConstraint& c) {
  const std::string ws = "[ \\t\\r\\n]{0,4}";
  std::string block = "pagoda-reasoning-text " + ws;
  if (!c.reasoning_start.empty())
    block = "(" + ws + " " + structured::gbnf_literal(c.reasoning_start) + " " + block + ")?";
  return "pagoda-reasoning ::= " + block + "\n" + text_until_gbnf("pagoda-reasoning-text", c.reasoning_end);
}

}  // namespace

std::string constraint_to_gbnf(const OutputConstraint& c) {
  std::string gbnf;
  try {
    gbnf = body_gbnf(c);
  } catch (const structured::SchemaError& e) {
    throw ConstraintError(std::string("invalid JSON schema: ") + e.what());
  } catch (const structured::RegexError& e) {
    throw ConstraintError("invalid regex at byte " + std::to_string(e.offset) + ": " + e.what());
  }
  const bool reasoning = !c.reasoning_end.empty();
  if (c.prefix.empty() && c.suffix.empty() && !reasoning) return gbnf;
  // Wrapped (a reasoning block first, a tool call's markers around its JSON): a new start rule
  // that refers to `root`.
  const std::string start = "pagoda-wrapped-root";
  for (const char* reserved : {"pagoda-wrapped-root", "pagoda-reasoning"})
    if (gbnf.find(reserved) != std::string::npos)
      throw ConstraintError(std::string("the grammar uses the reserved rule name ") + reserved);
  return gbnf + "\n" + (reasoning ? reasoning_gbnf(c) : "") + start + " ::= " + (reasoning ? "pagoda-reasoning " : "") +
         (c.prefix.empty() ? "" : structured::gbnf_literal(c.prefix) + " ") + "root" +
         (c.suffix.empty() ? "" : " " + structured::gbnf_literal(c.suffix)) + "\n";
}

std::shared_ptr<const structured::TokenVocabulary> token_vocabulary(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> eog(static_cast<size_t>(n)), special(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    eog[static_cast<size_t>(id)] = tok.is_eog(id);
    special[static_cast<size_t>(id)] = tok.is_control(id);
    if (!special[static_cast<size_t>(id)]) bytes[static_cast<size_t>(id)] = tok.token_to_piece(id, false);
  }
  return structured::TokenVocabulary::build(std::move(bytes), std::move(eog), std::move(special));
}

ConstraintCompiler::ConstraintCompiler(const Tokenizer& tok, size_t cache_capacity)
    : vocab_(token_vocabulary(tok)), cache_(cache_capacity) {}

std::shared_ptr<const structured::CompiledGrammar> ConstraintCompiler::compile(const OutputConstraint& c) {
  const bool wrapped = !c.prefix.empty() || !c.suffix.empty() || !c.reasoning_end.empty();
  // The cache key is the constraint itself (kind, options, wrapping, source), not the GBNF, so
  // a hit skips the schema conversion too.
  nlohmann::json key = {{"kind", kind_name(c.kind)}, {"ws", c.flexible_whitespace},
                        {"prefix", c.prefix}, {"suffix", c.suffix}, {"source", c.source},
                        {"reasoning", {c.reasoning_start, c.reasoning_end}},
                        {"choices", c.choices}};
  try {
    return cache_.get_or_compile(kind_name(c.kind), key.dump(), vocab_, [&] {
      return structured::compile_gbnf(constraint_to_gbnf(c), vocab_, {},
                                      wrapped ? "pagoda-wrapped-root" : "root");
    });
  } catch (const structured::GrammarError& e) {
    throw ConstraintError(std::string(c.kind == OutputConstraint::Kind::Gbnf ? "invalid grammar: "
                                                                               : "grammar error: ") +
                          e.what());
  }
}

}  // namespace pagoda
