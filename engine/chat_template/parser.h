// Builds the syntax tree from tokens, following jinja2/parser.py's grammar and precedence.
#pragma once

#include <vector>

#include "engine/chat_template/ast.h"
#include "engine/chat_template/lexer.h"

namespace pagoda::jinja {

// Nesting of expressions or blocks deeper than this is a syntax error (bounds recursion).
inline constexpr int kMaxParseDepth = 200;

// Parses a whole template. Throws ChatTemplateError ("template syntax error at line N: ...").
Body parse(const std::vector<Token>& tokens);

}  // namespace pagoda::jinja
