// JSON Schema -> GBNF converter.
#include <catch2/catch.hpp>

#include "engine/structured/json_schema.h"

using namespace pagoda::structured;
using Json = nlohmann::ordered_json;

TEST_CASE("json schema smoke") {
  for (const char* s : {R"({"type":"object","properties":{"a":{"type":"integer","minimum":3,"maximum":120},"b":{"type":"string","maxLength":5}},"required":["a"]})",
                        R"({"type":"number","minimum":-1.5,"exclusiveMaximum":2.25})",
                        R"({"enum":["x",1,null,{"k":[1.0]}]})",
                        R"({"type":"string","format":"date-time"})",
                        R"({"type":"string","pattern":"^[a-z]+$","maxLength":8})",
                        R"({"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}},"additionalProperties":false}},"$ref":"#/$defs/node"})",
                        R"({"type":"array","prefixItems":[{"type":"boolean"}],"items":{"type":"null"},"minItems":1,"maxItems":3})",
                        R"({"minProperties":1,"maxProperties":2})"})
    WARN(s << "\n" << json_schema_to_gbnf(Json::parse(s)));
}
