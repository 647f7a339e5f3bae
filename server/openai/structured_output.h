// Structured output, request side: reads what a request asks its output to match, in every
// spelling clients send, into one OutputConstraint (engine_api.h) for the engine to compile:
//   OpenAI:     response_format {"type": "text" | "json_object" | "json_schema",
//               "json_schema": {"name", "schema", "strict"}}; tool_choice "required" / named
//   llama.cpp:  response_format {"type": "json_object", "schema": {...}}, top-level
//               `json_schema` (a schema) and `grammar` (GBNF text)
//   vLLM:       structured_outputs {json | regex | choice | grammar}, and the older
//               guided_json / guided_regex / guided_choice / guided_grammar
// At most one may be given (a second is a 400 naming both); a malformed one is a 400 naming
// its field. Only the shape is checked here: whether the schema or grammar compiles is the
// engine's answer (EngineApi::compile_constraint).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine_api.h"
#include "server/openai/tool_calls.h"

namespace pagoda::server {

// A constraint and the request field it came from (the `param` of a compile error).
struct RequestedConstraint {
  OutputConstraint constraint;
  std::string param;  // "response_format", "structured_outputs.regex", "tool_choice", ...
};

// The constraint `body` (the request as parsed with key order kept, so a schema's
// `properties` keep theirs) asks for, or nullopt for free text. Throws ApiError(400).
std::optional<RequestedConstraint> parse_output_constraint(const nlohmann::ordered_json& body);

// tool_choice "required" or a named function: one call, in the model's own format `format`,
// naming one of `tools` (the request's tools, key order kept) — or exactly `choice.function`
// — with arguments valid against that function's `parameters`. nullopt for auto / none.
std::optional<RequestedConstraint> tool_choice_constraint(const ToolChoice& choice,
                                                          const nlohmann::ordered_json& tools,
                                                          ToolCallFormat format);

}  // namespace pagoda::server
