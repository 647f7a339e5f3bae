// Structured output for reasoning models: a constraint with reasoning_end lets free text through
// up to and including the first "</think>" (then a little whitespace) and only then demands its
// grammar; with reasoning_start the block is optional. Walked byte by byte over the grammar the
// engine compiles (constraint_to_gbnf), including a 20,000-byte block (the matcher's stack must
// stay flat), non-ASCII text and near-misses of the tag.
#include <catch2/catch.hpp>

#include "engine/sampling/output_constraint.h"
#include "engine/structured/structured.h"

using namespace pagoda;

namespace {

OutputConstraint yes_or_no(bool optional_block) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::Choice;
  c.choices = {"yes", "no"};
  c.reasoning_end = "</think>";
  if (optional_block) c.reasoning_start = "<think>";
  return c;
}

structured::GrammarMatcher matcher(const OutputConstraint& c) {
  return structured::GrammarMatcher(
      structured::compile_gbnf(constraint_to_gbnf(c), nullptr, {}, "pagoda-wrapped-root"));
}

// Whether `text` is a complete output.
bool complete(const OutputConstraint& c, const std::string& text) {
  auto m = matcher(c);
  for (char ch : text)
    if (!m.accept_bytes(std::string(1, ch))) return false;
  return m.can_end();
}

}  // namespace

TEST_CASE("reasoning constraint: free text up to </think>, then the grammar", "[structured][reasoning]") {
  const OutputConstraint c = yes_or_no(false);
  CHECK(complete(c, "Let me think. </think>yes"));
  CHECK(complete(c, "<think>\nHmm: < / </t </thi <</think>\n\nno"));
  CHECK(complete(c, "h\xC3\xA9llo \xE6\x97\xA5\xE6\x9C\xAC</think> yes"));
  CHECK(!complete(c, "yes"));                    // the block must end first
  CHECK(!complete(c, "a</think>maybe"));         // then only the grammar
  CHECK(!complete(c, "a</think>yes</think>"));  // the first </think> ends the block
  CHECK(!complete(c, "a</think>\n\n\n\n\nyes")); // at most 4 whitespace characters between
  auto m = matcher(c);
  CHECK(m.accept_bytes("abc"));
  CHECK(!m.can_end());
}

TEST_CASE("reasoning constraint: a long block keeps the matcher flat", "[structured][reasoning]") {
  auto m = matcher(yes_or_no(false));
  std::string block;
  for (int i = 0; i < 20000; ++i) block += (char)(' ' + (i * 7919) % 95);  // printable, no "</think>"
  REQUIRE(block.find("</think>") == std::string::npos);
  for (size_t i = 0; i < block.size(); i += 7) REQUIRE(m.accept_bytes(block.substr(i, 7)));
  REQUIRE(m.accept_bytes("</think>"));
  REQUIRE(m.accept_bytes("no"));
  CHECK(m.can_end());
}

TEST_CASE("reasoning constraint: an optional block, and around a tool call's markers", "[structured][reasoning]") {
  const OutputConstraint c = yes_or_no(true);
  CHECK(complete(c, "yes"));
  CHECK(complete(c, "<think>why</think>\nno"));
  CHECK(complete(c, "\n<think>why</think>no"));
  CHECK(!complete(c, "why</think>no"));  // without the opening tag there is no block
  OutputConstraint call = yes_or_no(false);
  call.prefix = "<tool_call>\n";
  call.suffix = "\n</tool_call>";
  CHECK(complete(call, "I will call.</think>\n<tool_call>\nyes\n</tool_call>"));
  CHECK(!complete(call, "<tool_call>\nyes\n</tool_call>"));
}

TEST_CASE("reasoning constraint: bad delimiters and reserved names are refused", "[structured][reasoning]") {
  OutputConstraint c = yes_or_no(false);
  c.reasoning_end = "\x01";
  CHECK_THROWS_AS(constraint_to_gbnf(c), ConstraintError);
  OutputConstraint g;
  g.kind = OutputConstraint::Kind::Gbnf;
  g.source = "root ::= pagoda-reasoning\npagoda-reasoning ::= \"x\"\n";
  g.reasoning_end = "</think>";
  CHECK_THROWS_AS(constraint_to_gbnf(g), ConstraintError);
}
