// The request side of structured output: every spelling clients send becomes one
// OutputConstraint, and malformed or conflicting ones are 400s naming their field.
#include <catch2/catch.hpp>

#include "server/openai/structured_output.h"
#include "server/http/api_error.h"

using pagoda::OutputConstraint;
using pagoda::server::ApiError;
using pagoda::server::parse_output_constraint;
using pagoda::server::tool_choice_constraint;
using pagoda::server::ToolCallFormat;
using pagoda::server::ToolChoice;
using ojson = nlohmann::ordered_json;

namespace {

// The param of the 400 that parsing `body` throws ("" when it does not throw).
std::string error_param(const char* body) {
  try {
    parse_output_constraint(ojson::parse(body));
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    return e.param;
  }
  return "";
}

}  // namespace

TEST_CASE("no constraint: absent, null or text") {
  CHECK_FALSE(parse_output_constraint(ojson::parse(R"({"messages": []})")));
  CHECK_FALSE(parse_output_constraint(ojson::parse(R"({"response_format": null})")));
  CHECK_FALSE(parse_output_constraint(ojson::parse(R"({"response_format": {"type": "text"}})")));
}

TEST_CASE("OpenAI response_format json_object and json_schema keep the schema's key order") {
  auto r = parse_output_constraint(ojson::parse(R"({"response_format": {"type": "json_object"}})"));
  REQUIRE(r);
  CHECK(r->constraint.kind == OutputConstraint::Kind::JsonObject);

  r = parse_output_constraint(ojson::parse(
      R"({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
          "schema": {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}}}}}})"));
  REQUIRE(r);
  CHECK(r->constraint.kind == OutputConstraint::Kind::JsonSchema);
  CHECK(r->param == "response_format.json_schema.schema");
  CHECK(r->constraint.source.find("zeta") < r->constraint.source.find("alpha"));
}

TEST_CASE("llama.cpp and vLLM spellings") {
  auto kind = [](const char* body) {
    auto r = parse_output_constraint(ojson::parse(body));
    REQUIRE(r);
    return r->constraint.kind;
  };
  CHECK(kind(R"({"response_format": {"type": "json_object", "schema": {"type": "object"}}})") ==
        OutputConstraint::Kind::JsonSchema);
  CHECK(kind(R"({"json_schema": {"type": "string"}})") == OutputConstraint::Kind::JsonSchema);
  CHECK(kind(R"({"grammar": "root ::= \"yes\" | \"no\""})") == OutputConstraint::Kind::Gbnf);
  CHECK(kind(R"({"structured_outputs": {"regex": "[0-9]+"}})") == OutputConstraint::Kind::Regex);
  CHECK(kind(R"({"structured_outputs": {"choice": ["a", "b"]}})") == OutputConstraint::Kind::Choice);
  CHECK(kind(R"({"structured_outputs": {"json": {"type": "object"}}})") == OutputConstraint::Kind::JsonSchema);
  CHECK(kind(R"({"structured_outputs": {"json": "{\"type\": \"object\"}"}})") == OutputConstraint::Kind::JsonSchema);
  CHECK(kind(R"({"structured_outputs": {"grammar": "root ::= \"x\""}})") == OutputConstraint::Kind::Gbnf);
  CHECK(kind(R"({"guided_json": {"type": "object"}})") == OutputConstraint::Kind::JsonSchema);
  CHECK(kind(R"({"guided_regex": "a|b"})") == OutputConstraint::Kind::Regex);
  CHECK(kind(R"({"guided_choice": ["x"]})") == OutputConstraint::Kind::Choice);
  CHECK(kind(R"({"guided_grammar": "root ::= \"x\""})") == OutputConstraint::Kind::Gbnf);
  auto r = parse_output_constraint(ojson::parse(R"({"guided_choice": ["red", "green"]})"));
  REQUIRE(r);
  CHECK(r->constraint.choices == std::vector<std::string>{"red", "green"});
}

TEST_CASE("malformed constraints are 400s naming the field") {
  CHECK(error_param(R"({"response_format": {"type": "bogus"}})") == "response_format");
  CHECK(error_param(R"({"response_format": "json"})") == "response_format");
  CHECK(error_param(R"({"response_format": {}})") == "response_format");
  CHECK(error_param(R"({"response_format": {"type": "json_schema"}})") == "response_format.json_schema");
  CHECK(error_param(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": 5}}})") ==
        "response_format.json_schema.schema");
  CHECK(error_param(R"({"grammar": 5})") == "grammar");
  CHECK(error_param(R"({"grammar": ""})") == "grammar");
  CHECK(error_param(R"({"structured_outputs": {"regex": "a", "choice": ["b"]}})") == "structured_outputs");
  CHECK(error_param(R"({"structured_outputs": {"bogus": 1}})") == "structured_outputs.bogus");
  CHECK(error_param(R"({"guided_choice": []})") == "guided_choice");
  CHECK(error_param(R"({"guided_choice": ["a", 1]})") == "guided_choice[1]");
  CHECK(error_param(R"({"guided_json": "{not json"})") == "guided_json");
  // Two ways at once: the second named, the first mentioned.
  CHECK(error_param(R"({"response_format": {"type": "json_object"}, "grammar": "root ::= \"x\""})") == "grammar");
}

TEST_CASE("tool_choice required / named becomes a call in the model's format") {
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])");
  CHECK_FALSE(tool_choice_constraint(ToolChoice{ToolChoice::Mode::Auto, ""}, tools, ToolCallFormat::Hermes));
  CHECK_FALSE(tool_choice_constraint(ToolChoice{ToolChoice::Mode::None, ""}, tools, ToolCallFormat::Hermes));

  auto r = tool_choice_constraint(ToolChoice{ToolChoice::Mode::Required, ""}, tools, ToolCallFormat::Hermes);
  REQUIRE(r);
  CHECK(r->param == "tool_choice");
  CHECK(r->constraint.prefix == "<tool_call>\n");
  CHECK(r->constraint.suffix == "\n</tool_call>");
  const ojson schema = ojson::parse(r->constraint.source);
  REQUIRE(schema.contains("anyOf"));
  CHECK(schema["anyOf"].size() == 2);
  CHECK(schema["anyOf"][0]["properties"]["name"]["const"] == "get_weather");
  CHECK(schema["anyOf"][0]["properties"]["arguments"]["required"][0] == "city");

  r = tool_choice_constraint(ToolChoice{ToolChoice::Mode::Function, "now"}, tools, ToolCallFormat::Llama3);
  REQUIRE(r);
  const ojson one = ojson::parse(r->constraint.source);
  CHECK(one["properties"]["name"]["const"] == "now");
  CHECK(one["properties"].contains("parameters"));
  CHECK(r->constraint.prefix.empty());

  r = tool_choice_constraint(ToolChoice{ToolChoice::Mode::Required, ""}, tools, ToolCallFormat::Mistral);
  REQUIRE(r);
  CHECK(r->constraint.prefix == "[TOOL_CALLS]");
  CHECK(ojson::parse(r->constraint.source)["type"] == "array");
}
