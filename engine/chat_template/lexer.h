// Splits template source into tokens the way jinja2's lexer does with trim_blocks=True and
// lstrip_blocks=True: text outside tags becomes Data (with whitespace control already
// applied), comments vanish, {% raw %} bodies become Data, and the inside of {{ }} and {% %}
// becomes expression tokens.
#pragma once

#include <string>
#include <vector>

namespace pagoda::jinja {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // Data text, name, decoded string literal, number digits, operator
  int line;          // 1-based line where the token starts
};

// Throws ChatTemplateError on unterminated tags, strings or comments and unbalanced brackets.
std::vector<Token> tokenize(const std::string& source);

// A readable name for a token in error messages ("'end of statement block'", "'foo'").
std::string describe(const Token& t);

}  // namespace pagoda::jinja
