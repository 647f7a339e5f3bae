// POST /v1/embeddings: parsing and encodings (embeddings.h) and Handlers::embeddings, which
// submits every input as an embedding request (prefill only, batched with generation traffic
// by the engine's scheduler) and answers in OpenAI's shape.
#include "server/openai/embeddings.h"

#include <cmath>
#include <cstring>

#include "server/openai/handlers.h"

namespace pagoda::server {

EmbeddingRequest parse_embedding_request(const RequestJson& body) {
  EmbeddingRequest r;
  r.model = parse_model_field(body);
  r.inputs = parse_prompt_inputs(body, "input");
  if (r.inputs.size() > kMaxEmbeddingInputs)
    throw ApiError(400, "Invalid value for 'input': at most " + std::to_string(kMaxEmbeddingInputs) +
                            " inputs per request.", "invalid_request_error", "input");
  for (size_t i = 0; i < r.inputs.size(); ++i)
    if (!r.inputs[i].is_tokens && r.inputs[i].text.empty()) {
      const std::string param = r.inputs.size() > 1 ? "input[" + std::to_string(i) + "]" : "input";
      throw ApiError(400, "Invalid value for '" + param + "': the input is an empty string.",
                     "invalid_request_error", param);
    }
  if (auto e = body.find("encoding_format"); e != body.end() && !e->is_null()) {
    const std::string f = e->is_string() ? e->get<std::string>() : "";
    if (f != "float" && f != "base64")
      throw ApiError(400, "Invalid value for 'encoding_format': expected 'float' or 'base64'.",
                     "invalid_request_error", "encoding_format");
    r.base64 = f == "base64";
  }
  if (auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() < 1 || d->get<int64_t>() > (1 << 20))
      throw ApiError(400, "Invalid value for 'dimensions': expected a positive integer.", "invalid_request_error",
                     "dimensions");
    r.dimensions = static_cast<int>(d->get<int64_t>());
  }
  return r;
}

std::vector<float> truncate_embedding(std::vector<float> v, std::optional<int> dimensions) {
  if (!dimensions || *dimensions >= static_cast<int>(v.size())) return v;
  v.resize(static_cast<size_t>(*dimensions));
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  if (ss > 0)
    for (float& x : v) x = static_cast<float>(x / std::sqrt(ss));
  return v;
}

std::string embedding_base64(const std::vector<float>& v) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xff);  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t left = bytes.size() - i;
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (left > 1) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (left > 2) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += left > 1 ? kAlphabet[(n >> 6) & 63] : '=';
    out += left > 2 ? kAlphabet[n & 63] : '=';
  }
  return out;
}

void Handlers::embeddings(const httplib::Request& req, httplib::Response& res,
                          const std::shared_ptr<AccessRecord>& record) {
  EmbeddingRequest er;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;
  const int ctx = engine_.context_size();
  try {
    er = parse_embedding_request(parse_json_body(req.body));
    model = served_model(er.model);
    for (size_t i = 0; i < er.inputs.size(); ++i) {
      const std::string param = er.inputs.size() > 1 ? "input[" + std::to_string(i) + "]" : "input";
      PromptInput& in = er.inputs[i];
      std::vector<int32_t> ids;
      try {
        ids = in.is_tokens ? in.tokens : encode_prompt(in.text);
      } catch (const std::exception& e) {
        throw ApiError(400, "Invalid value for '" + param + "': " + e.what(), "invalid_request_error", param);
      }
      check_token_ids(ids, param);
      if (ids.empty())
        throw ApiError(400, "Invalid value for '" + param + "': it has no tokens.", "invalid_request_error", param);
      if (static_cast<int>(ids.size()) > ctx) throw context_exceeded(ctx, param, ids.size());
      prompts.push_back(std::move(ids));
    }
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  record->request_id = new_id("embd-");
  res.set_header("X-Request-Id", record->request_id);

  std::vector<GenerationRequest> reqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs[i].prompt = std::move(prompts[i]);
    reqs[i].embed = true;
    reqs[i].pooling = opts_.pooling;
  }
  json data = json::array();
  int prompt_tokens = 0;
  try {
    std::vector<PrefillResult> done = run_prefill_batch(req, std::move(reqs), "input");
    for (size_t i = 0; i < done.size(); ++i) {
      std::vector<float>& e = done[i].last.embedding;
      if (e.empty())
        throw ApiError(500, "The embedding could not be computed.", "server_error", "", "embedding_failed");
      if (er.dimensions && *er.dimensions > static_cast<int>(e.size()))
        throw ApiError(400, "Invalid value for 'dimensions': this model's embeddings have " +
                                std::to_string(e.size()) + " dimensions.", "invalid_request_error", "dimensions");
      std::vector<float> v = truncate_embedding(std::move(e), er.dimensions);
      json item = {{"object", "embedding"}, {"index", i}};
      item["embedding"] = er.base64 ? json(embedding_base64(v)) : json(v);
      data.push_back(std::move(item));
      prompt_tokens += done[i].usage.prompt_tokens;
    }
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  record->prompt_tokens = prompt_tokens;
  send_json(res, {{"object", "list"},
                  {"data", std::move(data)},
                  {"model", model},
                  {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

}  // namespace pagoda::server
