// Shared by the structured-output tests and benchmark: byte-only matching helpers, vocabularies
// from the test GGUF files, and a few realistic JSON grammars in GBNF.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/sampling/output_constraint.h"
#include "engine/gguf/gguf.h"
#include "engine/structured/structured.h"
#include "engine/tokenizer/tokenizer.h"

namespace structured_test {

using namespace pagoda::structured;

// Does the grammar match exactly `text` (bytes)?
inline bool full_match(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}
inline bool full_match(const std::string& gbnf, const std::string& text) {
  return full_match(compile_gbnf(gbnf, nullptr), text);
}
// Is `text` a prefix of some match?
inline bool prefix_match(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(compile_gbnf(gbnf, nullptr));
  return m.accept_bytes(text);
}

// Token bytes of a GGUF vocabulary as the server sees them (engine/sampling/output_constraint.h).
inline std::shared_ptr<const TokenVocabulary> load_vocabulary(const std::string& path) {
  pagoda::gguf::GgufFile file = pagoda::gguf::GgufFile::open(path);
  return pagoda::token_vocabulary(*pagoda::Tokenizer::from_gguf(file));
}

// Generic JSON (any value at the top is an object), flexible whitespace.
inline const char* kJsonGbnf = R"GBNF(
# any JSON object
root   ::= ws object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws     ::= | " " | "\n" [ \t]{0,20}
)GBNF";

// What a JSON Schema converter produces for a person record: fixed keys in order, nested
// object and arrays, enum, integer and number, optional property.
inline const char* kPersonSchemaGbnf = R"GBNF(
root ::= "{" space "\"name\"" space ":" space string "," space "\"age\"" space ":" space integer "," space "\"email\"" space ":" space string "," space "\"tags\"" space ":" space tags "," space "\"address\"" space ":" space address "," space "\"status\"" space ":" space status ( "," space "\"scores\"" space ":" space scores )? "}" space
tags ::= "[" space ( string ( "," space string )* )? "]" space
scores ::= "[" space ( number ( "," space number ){0,9} )? "]" space
address ::= "{" space "\"street\"" space ":" space string "," space "\"city\"" space ":" space string "," space "\"zip\"" space ":" space zip ( "," space "\"geo\"" space ":" space geo )? "}" space
geo ::= "[" space number "," space number "]" space
zip ::= "\"" [0-9]{5} ( "-" [0-9]{4} )? "\"" space
status ::= ( "\"active\"" | "\"inactive\"" | "\"banned\"" | "\"pending review\"" ) space
integer ::= "-"? ( [0-9] | [1-9] [0-9]{1,15} ) space
number ::= "-"? ( [0-9] | [1-9] [0-9]{1,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? space
string ::= "\"" char* "\"" space
char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
space ::= | " " | "\n" [ \t]{0,20}
)GBNF";

// A list of tool calls (names from an enum, free-form arguments object), compact.
inline const char* kToolCallsGbnf = R"GBNF(
root ::= "[" call ( "," call ){0,3} "]"
call ::= "{\"name\":" name ",\"arguments\":" object "}"
name ::= "\"get_weather\"" | "\"search_web\"" | "\"send_email\"" | "\"create_calendar_event\""
object ::= "{" ( pair ( "," pair )* )? "}"
pair ::= string ":" value
value ::= object | array | string | number | "true" | "false" | "null"
array ::= "[" ( value ( "," value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? [0-9]+ ( "." [0-9]+ )?
)GBNF";

// Non-ASCII classes and literals: tokens that split characters must work.
inline const char* kUnicodeGbnf = R"GBNF(
root ::= ( greek | cjk | "é" | "→" | emoji | " " ){1,40} "."
greek ::= [α-ωΑ-Ω]
cjk ::= [\u4e00-\u9fff]
emoji ::= [\U0001F600-\U0001F64F]
)GBNF";

}  // namespace structured_test
