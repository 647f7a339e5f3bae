#include "server/openai/structured_output.h"

#include <vector>

#include "server/http/api_error.h"

namespace pagoda::server {

namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "Invalid '" + param + "': " + message, "invalid_request_error", param);
}

RequestedConstraint schema_constraint(const ojson& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_boolean()) bad(param, "a JSON Schema must be an object.");
  RequestedConstraint r;
  r.constraint.kind = OutputConstraint::Kind::JsonSchema;
  r.constraint.source = schema.dump();
  r.param = param;
  return r;
}

// vLLM's json / guided_json: the schema as an object or as JSON text.
RequestedConstraint schema_or_text_constraint(const ojson& v, const std::string& param) {
  if (!v.is_string()) return schema_constraint(v, param);
  ojson parsed = ojson::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) bad(param, "the schema text is not valid JSON.");
  return schema_constraint(parsed, param);
}

RequestedConstraint text_constraint(OutputConstraint::Kind kind, const ojson& v, const std::string& param) {
  if (!v.is_string()) bad(param, "expected a string.");
  if (v.get_ref<const std::string&>().empty()) bad(param, "must not be empty.");
  RequestedConstraint r;
  r.constraint.kind = kind;
  r.constraint.source = v.get<std::string>();
  r.param = param;
  return r;
}

RequestedConstraint choice_constraint(const ojson& v, const std::string& param) {
  if (!v.is_array() || v.empty()) bad(param, "expected a non-empty array of strings.");
  RequestedConstraint r;
  r.constraint.kind = OutputConstraint::Kind::Choice;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) bad(param + "[" + std::to_string(i) + "]", "expected a string.");
    r.constraint.choices.push_back(v[i].get<std::string>());
  }
  r.param = param;
  return r;
}

// response_format; nullopt for {"type": "text"}.
std::optional<RequestedConstraint> response_format(const ojson& rf) {
  const std::string p = "response_format";
  if (!rf.is_object()) bad(p, "expected an object such as {\"type\": \"json_object\"}.");
  auto type = rf.find("type");
  // The contract (and OpenAI's): a bad type is reported on response_format itself.
  if (type == rf.end() || !type->is_string()) bad(p, "'type' must be 'text', 'json_object' or 'json_schema'.");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    // llama.cpp's extension: a schema right inside the json_object format.
    if (auto s = rf.find("schema"); s != rf.end() && !s->is_null()) return schema_constraint(*s, p + ".schema");
    RequestedConstraint r;
    r.constraint.kind = OutputConstraint::Kind::JsonObject;
    r.param = p;
    return r;
  }
  if (t == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object()) bad(p + ".json_schema", "expected an object with 'name' and 'schema'.");
    if (auto name = js->find("name"); name != js->end() && !name->is_string())
      bad(p + ".json_schema.name", "expected a string.");
    if (auto strict = js->find("strict"); strict != js->end() && !strict->is_boolean() && !strict->is_null())
      bad(p + ".json_schema.strict", "expected a boolean.");
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
      // OpenAI allows a json_schema format without a schema: any JSON object then.
      RequestedConstraint r;
      r.constraint.kind = OutputConstraint::Kind::JsonObject;
      r.param = p + ".json_schema";
      return r;
    }
    return schema_constraint(*schema, p + ".json_schema.schema");
  }
  bad(p, "'type' must be 'text', 'json_object' or 'json_schema', got '" + t + "'.");
}

// vLLM's structured_outputs object: exactly one of json / regex / choice / grammar.
std::optional<RequestedConstraint> structured_outputs(const ojson& so) {
  const std::string p = "structured_outputs";
  if (!so.is_object()) bad(p, "expected an object with one of 'json', 'regex', 'choice', 'grammar'.");
  std::optional<RequestedConstraint> r;
  auto take = [&](RequestedConstraint c) {
    if (r) bad(p, "give only one of 'json', 'regex', 'choice' and 'grammar'.");
    r = std::move(c);
  };
  for (const auto& [key, v] : so.items()) {
    if (v.is_null()) continue;
    if (key == "json") {
      take(schema_or_text_constraint(v, p + ".json"));
    } else if (key == "regex") {
      take(text_constraint(OutputConstraint::Kind::Regex, v, p + ".regex"));
    } else if (key == "choice") {
      take(choice_constraint(v, p + ".choice"));
    } else if (key == "grammar") {
      take(text_constraint(OutputConstraint::Kind::Gbnf, v, p + ".grammar"));
    } else if (key == "json_object") {
      if (!v.is_boolean()) bad(p + ".json_object", "expected a boolean.");
      if (v.get<bool>()) {
        RequestedConstraint c;
        c.constraint.kind = OutputConstraint::Kind::JsonObject;
        c.param = p + ".json_object";
        take(std::move(c));
      }
    } else if (key == "whitespace_pattern" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties" || key == "structural_tag") {
      bad(p + "." + key, "is not supported.");
    } else {
      bad(p + "." + key, "unknown field; expected 'json', 'regex', 'choice' or 'grammar'.");
    }
  }
  return r;
}

}  // namespace

std::optional<RequestedConstraint> parse_output_constraint(const ojson& body) {
  std::vector<RequestedConstraint> found;
  auto field = [&](const char* name) -> const ojson* {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const ojson* v = field("response_format"))
    if (auto r = response_format(*v)) found.push_back(std::move(*r));
  if (const ojson* v = field("json_schema")) found.push_back(schema_constraint(*v, "json_schema"));
  if (const ojson* v = field("grammar")) found.push_back(text_constraint(OutputConstraint::Kind::Gbnf, *v, "grammar"));
  if (const ojson* v = field("structured_outputs"))
    if (auto r = structured_outputs(*v)) found.push_back(std::move(*r));
  if (const ojson* v = field("guided_json")) found.push_back(schema_or_text_constraint(*v, "guided_json"));
  if (const ojson* v = field("guided_regex")) found.push_back(text_constraint(OutputConstraint::Kind::Regex, *v, "guided_regex"));
  if (const ojson* v = field("guided_choice")) found.push_back(choice_constraint(*v, "guided_choice"));
  if (const ojson* v = field("guided_grammar")) found.push_back(text_constraint(OutputConstraint::Kind::Gbnf, *v, "guided_grammar"));
  if (found.empty()) return std::nullopt;
  if (found.size() > 1)
    bad(found[1].param, "conflicts with '" + found[0].param + "': a request may constrain its output one way only.");
  return std::move(found[0]);
}

std::optional<RequestedConstraint> tool_choice_constraint(const ToolChoice& choice, const ojson& tools,
                                                          ToolCallFormat format) {
  if (choice.mode != ToolChoice::Mode::Required && choice.mode != ToolChoice::Mode::Function) return std::nullopt;
  // Llama 3 names the arguments "parameters"; Hermes and Mistral say "arguments".
  const char* args_key = format == ToolCallFormat::Llama3 ? "parameters" : "arguments";
  ojson branches = ojson::array();
  for (const ojson& tool : tools) {
    const ojson& fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (choice.mode == ToolChoice::Mode::Function && name != choice.function) continue;
    ojson params = ojson{{"type", "object"}};
    if (auto p = fn.find("parameters"); p != fn.end() && !p->is_null()) params = *p;
    ojson call = {{"type", "object"},
                  {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                  {"required", {"name", args_key}},
                  {"additionalProperties", false}};
    branches.push_back(std::move(call));
  }
  ojson one_call = branches.size() == 1 ? branches[0] : ojson{{"anyOf", branches}};
  RequestedConstraint r;
  r.param = "tool_choice";
  r.constraint.kind = OutputConstraint::Kind::JsonSchema;
  switch (format) {
    case ToolCallFormat::Mistral:
      r.constraint.source = ojson{{"type", "array"}, {"items", one_call}, {"minItems", 1}, {"maxItems", 1}}.dump();
      r.constraint.prefix = "[TOOL_CALLS]";
      break;
    case ToolCallFormat::Llama3:
      // A bare call: the parser accepts it at the output's start when it names a known tool.
      r.constraint.source = one_call.dump();
      break;
    case ToolCallFormat::Hermes:
    case ToolCallFormat::None:
      r.constraint.source = one_call.dump();
      r.constraint.prefix = "<tool_call>\n";
      r.constraint.suffix = "\n</tool_call>";
      break;
  }
  return r;
}

}  // namespace pagoda::server
