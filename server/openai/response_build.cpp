// Response building: results -> completion / chat objects and stream chunks (see
// response_build.h).
#include "server/openai/response_build.h"

namespace pagoda::server {

const char* finish_reason_str(FinishReason r) {
  return r == FinishReason::Length ? "length" : "stop";
}

json usage_json(const Usage& u) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens},
         {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
  // Speculative decoding, in the fields OpenAI reports predicted outputs with: drafted tokens
  // the model accepted, and those it rejected.
  if (u.spec_drafted_tokens > 0)
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.spec_accepted_tokens},
                                      {"rejected_prediction_tokens", u.spec_drafted_tokens - u.spec_accepted_tokens}};
  return j;
}

namespace {

// A token may hold part of a multi-byte character: its text is kept as it is and made valid
// when serialized (dump_json replaces invalid bytes); `bytes` carries the raw bytes.
json byte_list(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

}  // namespace

json completion_logprobs_json(const std::vector<TokenLogprob>& lps, const TokenText& text,
                              size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  size_t off = text_offset;
  for (const TokenLogprob& lp : lps) {
    std::string piece = text(lp.token);
    tokens.push_back(piece);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const TopLogprob& t : lp.top) {
      std::string key = text(t.token);
      if (!top.contains(key)) top[key] = t.logprob;
    }
    tops.push_back(std::move(top));
    offsets.push_back(off);
    off += piece.size();
  }
  return json{{"tokens", tokens},
              {"token_logprobs", token_lps},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

json chat_logprobs_json(const std::vector<TokenLogprob>& lps, const TokenText& text) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    std::string piece = text(lp.token);
    json top = json::array();
    for (const TopLogprob& t : lp.top) {
      std::string tp = text(t.token);
      top.push_back({{"token", tp}, {"logprob", t.logprob}, {"bytes", byte_list(tp)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", lp.logprob},
                       {"bytes", byte_list(piece)},
                       {"top_logprobs", top}});
  }
  return json{{"content", content}, {"refusal", nullptr}};
}

json completion_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                         const Usage& usage, bool with_logprobs, const TokenText& text) {
  json cs = json::array();
  for (const ChoiceResult& c : choices) {
    cs.push_back({{"index", c.index},
                  {"text", c.text},
                  {"logprobs", with_logprobs ? completion_logprobs_json(c.logprobs, text, 0)
                                             : json(nullptr)},
                  {"finish_reason", finish_reason_str(c.finish)}});
  }
  return json{{"id", m.id},           {"object", "text_completion"},
              {"created", m.created}, {"model", m.model},
              {"choices", cs},        {"usage", usage_json(usage)}};
}

json chat_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                   const Usage& usage, bool with_logprobs, const TokenText& text) {
  json cs = json::array();
  for (const ChoiceResult& c : choices) {
    json message = {{"role", "assistant"}, {"content", c.text}};
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    const char* finish = finish_reason_str(c.finish);
    if (!c.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCallOut& t : c.tool_calls)
        calls.push_back({{"id", t.id},
                         {"type", "function"},
                         {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      if (c.text.empty()) message["content"] = nullptr;
      message["tool_calls"] = std::move(calls);
      finish = "tool_calls";
    }
    cs.push_back({{"index", c.index},
                  {"message", std::move(message)},
                  {"logprobs", with_logprobs ? chat_logprobs_json(c.logprobs, text) : json(nullptr)},
                  {"finish_reason", finish}});
  }
  return json{{"id", m.id},           {"object", "chat.completion"},
              {"created", m.created}, {"model", m.model},
              {"choices", cs},        {"usage", usage_json(usage)}};
}

namespace {
json chunk_base(const ResponseMeta& m, const char* object, bool usage_null) {
  json j = {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
  if (usage_null) j["usage"] = nullptr;
  return j;
}
// A chunk for one choice: `key` ("text" or "delta") holds `value`.
json choice_chunk(const ResponseMeta& m, const char* object, int index, const char* key,
                  const json& value, const json& logprobs, const char* finish_reason,
                  bool usage_null) {
  json j = chunk_base(m, object, usage_null);
  j["choices"] = json::array({{{"index", index},
                               {key, value},
                               {"logprobs", logprobs},
                               {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}}});
  return j;
}
}  // namespace

json completion_chunk(const ResponseMeta& m, int index, const std::string& text,
                      const json& logprobs, const char* finish_reason, bool usage_null) {
  return choice_chunk(m, "text_completion", index, "text", text, logprobs, finish_reason, usage_null);
}

json chat_chunk(const ResponseMeta& m, int index, const json& delta, const json& logprobs,
                const char* finish_reason, bool usage_null) {
  return choice_chunk(m, "chat.completion.chunk", index, "delta", delta, logprobs, finish_reason,
                      usage_null);
}

json tool_call_head_delta(int call_index, const ToolCallOut& call) {
  return json{{"tool_calls", json::array({{{"index", call_index},
                                           {"id", call.id},
                                           {"type", "function"},
                                           {"function", {{"name", call.name}, {"arguments", ""}}}}})}};
}

json tool_call_arguments_delta(int call_index, const std::string& fragment) {
  return json{{"tool_calls",
               json::array({{{"index", call_index}, {"function", {{"arguments", fragment}}}}})}};
}

json usage_chunk(const ResponseMeta& m, const char* object, const Usage& usage) {
  json j = chunk_base(m, object, false);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace pagoda::server
