// The Responses API's response object as OpenAI's reference defines it: the fields every one
// carries, checked the same way by the in-process and the end-to-end tests.
#pragma once

#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace pagoda::testing {

// Checks the header fields and the presence and types of the request settings it reports.
inline void check_response_object(const nlohmann::json& j, const std::string& model) {
  INFO(j.dump());
  CHECK(j["id"].get<std::string>().rfind("resp_", 0) == 0);
  CHECK(j["object"] == "response");
  CHECK(j["created_at"].is_number_integer());
  CHECK(j["model"] == model);
  CHECK(j["error"].is_null());
  CHECK(j["output"].is_array());
  CHECK(j["usage"].is_object());
  for (const char* key : {"instructions", "max_output_tokens", "previous_response_id", "user"})
    CHECK((j.contains(key) && (j[key].is_null() || j[key].is_primitive())));
  CHECK(j["temperature"].is_number());
  CHECK(j["top_p"].is_number());
  CHECK(j["tools"].is_array());
  CHECK((j["tool_choice"].is_string() || j["tool_choice"].is_object()));
  CHECK(j["text"]["format"]["type"].is_string());
  CHECK(j["parallel_tool_calls"].is_boolean());
  CHECK(j["store"].is_boolean());
  CHECK(j["metadata"].is_object());
  CHECK(j["reasoning"].is_object());
  CHECK(j["truncation"] == "disabled");
}

}  // namespace pagoda::testing
