// POST /v1/load_lora_adapter and /v1/unload_lora_adapter: loading and unloading LoRA adapters
// while serving, in vLLM's shape (body {"lora_name", "lora_path"} / {"lora_name"}; 200 with a
// plain-text "Success: ..." line; errors in the OpenAI error shape). Off unless the server runs
// with --allow-runtime-lora (404 then, as a vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING has no
// such routes); like every route they sit behind the API key.
#include "server/http/api_error.h"
#include "server/openai/handlers.h"
#include "server/openai/request_parse.h"

namespace pagoda::server {
namespace {

std::string string_field(const RequestJson& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty())
    throw ApiError(400, std::string("'") + key + "' must be a non-empty string", "invalid_request_error", key,
                   "invalid_value");
  return it->get<std::string>();
}

void refuse_unless_allowed(bool allowed) {
  if (!allowed)
    throw ApiError(404, "Loading LoRA adapters at run time is off: start the server with --allow-runtime-lora.",
                   "invalid_request_error", "", "not_found");
}

// A refused load or unload as the client's error.
ApiError lora_error(const LoraOpResult& r, const std::string& name) {
  if (r.code == "lora_not_found")
    return ApiError(404, "The lora adapter '" + name + "' cannot be found.", "invalid_request_error", "lora_name",
                    "not_found");
  if (r.code == "lora_exists")
    return ApiError(400, "The lora adapter '" + name + "' has already been loaded.", "invalid_request_error",
                    "lora_name", r.code);
  if (r.code == "lora_invalid")
    return ApiError(400, r.error, "invalid_request_error", "lora_path", r.code);
  return ApiError(400, r.error, "invalid_request_error", "", r.code.empty() ? "lora_refused" : r.code);
}

void send_text(httplib::Response& res, const std::string& text) {
  res.status = 200;
  res.set_content(text, "text/plain; charset=utf-8");
}

}  // namespace

void Handlers::load_lora_adapter(const httplib::Request& req, httplib::Response& res) {
  try {
    refuse_unless_allowed(opts_.allow_runtime_lora);
    const RequestJson body = parse_json_body(req.body);
    const std::string name = string_field(body, "lora_name");
    const std::string path = string_field(body, "lora_path");
    bool base_name = name == opts_.model_name;
    for (const std::string& alias : opts_.model_aliases) base_name = base_name || name == alias;
    if (base_name)
      throw ApiError(400, "'" + name + "' is the base model's name", "invalid_request_error", "lora_name",
                     "invalid_value");
    const LoraOpResult r = engine_.load_lora(name, path);
    if (!r.ok) throw lora_error(r, name);
    send_text(res, "Success: LoRA adapter '" + name + "' added successfully.");
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void Handlers::unload_lora_adapter(const httplib::Request& req, httplib::Response& res) {
  try {
    refuse_unless_allowed(opts_.allow_runtime_lora);
    const RequestJson body = parse_json_body(req.body);
    const std::string name = string_field(body, "lora_name");
    const LoraOpResult r = engine_.unload_lora(name);
    if (!r.ok) throw lora_error(r, name);
    send_text(res, "Success: LoRA adapter '" + name + "' removed successfully.");
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

}  // namespace pagoda::server
