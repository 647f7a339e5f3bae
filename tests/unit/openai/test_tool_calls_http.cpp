// Function calling over real loopback HTTP, in process, with the FakeEngine playing scripted
// model output: message.tool_calls and finish_reason "tool_calls", the streamed delta.tool_calls
// shape, streaming == non-streaming, content kept when the output holds no call, tool_choice,
// and 400s for malformed tools / tool_choice.
#include <catch2/catch.hpp>

#include <cctype>
#include <fstream>
#include <sstream>

#include "engine/chat_template/chat_template.h"
#include "server/http/http_server.h"
#include "server/openai/handlers.h"
#include "server/http/metrics.h"
#include "tests/support/fake_engine.h"
#include "tests/support/http_test_util.h"
#include "tests/support/inproc_http.h"
#include "tests/support/testdata.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

// ByteTokenizer plus one control token, "[TOOL_CALLS]" (id 258): like Mistral's vocabulary, it
// detokenizes to nothing unless special tokens are asked for.
class MarkerTokenizer : public ByteTokenizer {
 public:
  static constexpr int32_t kToolCalls = 258;
  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    if (parse_special && text == "[TOOL_CALLS]") return {kToolCalls};
    return ByteTokenizer::encode(text, add_special, parse_special);
  }
  std::string token_to_piece(int32_t id, bool special) const override {
    if (id == kToolCalls) return special ? token_text(id) : "";
    return ByteTokenizer::token_to_piece(id, special);
  }
  int32_t vocab_size() const override { return 259; }
  const std::string& token_text(int32_t id) const override {
    static const std::string marker = "[TOOL_CALLS]";
    return id == kToolCalls ? marker : ByteTokenizer::token_text(id);
  }
  bool is_control(int32_t id) const override { return id >= 256; }
};

struct ToolServer {
  server::Metrics metrics;
  MarkerTokenizer tok;
  FakeEngine engine{FakeEngine::Options{8192}, &tok};  // room for real templates' tool prompts
  std::shared_ptr<server::Handlers> handlers;
  std::unique_ptr<InProcHttpServer> http;  // declared after what it serves: stops first
  int port = 0;

  // `render`: the chat template (default: "DUMP" answers with what the template was given,
  // anything else with role: content lines).
  explicit ToolServer(server::ToolCallFormat format = server::ToolCallFormat::Hermes,
                      server::Handlers::ChatRenderer render = nullptr) {
    server::Handlers::Options ho;
    ho.model_name = "fake-model";
    ho.tool_call_format = format;
    if (!render) {
      render = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools, bool,
                  const nlohmann::ordered_json&) {
        if (messages[0]["content"] == "DUMP") return messages.dump() + tools.dump();
        std::string s;
        for (const auto& m : messages) s += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
        return s + "assistant:";
      };
    }
    handlers = std::make_shared<server::Handlers>(engine, render, metrics, ho);
    server::HttpServer::Options so;
    so.worker_threads = 8;
    http = std::make_unique<InProcHttpServer>(so, metrics, handlers);
    port = http->port();
  }
  HttpResult post(const json& body) { return http_post(port, "/v1/chat/completions", body); }
};

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}])");

json chat_request(json extra = json::object()) {
  json req = {{"model", "fake-model"},
              {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
              {"tools", kTools},
              {"max_tokens", 1000}};
  for (auto& [k, v] : extra.items()) req[k] = v;
  return req;
}

// One choice as the OpenAI SDK's stream accumulator would build it, checking each chunk's shape.
struct Streamed {
  std::string content;
  json tool_calls = json::array();
  std::string finish;
};

std::vector<Streamed> accumulate(const std::string& body, size_t choices) {
  std::vector<Streamed> out(choices);
  auto events = sse_events(body);
  REQUIRE(!events.empty());
  CHECK(events.back() == "[DONE]");
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    json j = json::parse(e);
    REQUIRE(j["object"] == "chat.completion.chunk");
    for (const json& c : j["choices"]) {
      Streamed& s = out.at(c["index"].get<size_t>());
      CHECK(s.finish.empty());  // nothing after the finish chunk
      const json& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) s.content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const json& tc : d["tool_calls"]) {
          size_t k = tc["index"].get<size_t>();
          if (k == s.tool_calls.size()) {  // a new call: id, type and name come first
            REQUIRE(tc.contains("id"));
            CHECK(tc["type"] == "function");
            CHECK(tc["function"]["arguments"] == "");
            s.tool_calls.push_back({{"id", tc["id"]},
                                    {"type", "function"},
                                    {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
          } else {
            REQUIRE(k + 1 == s.tool_calls.size());  // fragments only for the latest call
            CHECK(!tc.contains("id"));
            std::string& args = s.tool_calls[k]["function"]["arguments"].get_ref<std::string&>();
            args += tc["function"]["arguments"].get<std::string>();
          }
        }
      }
      if (!c["finish_reason"].is_null()) s.finish = c["finish_reason"].get<std::string>();
    }
  }
  return out;
}

// Calls without their ids (which differ between requests).
json without_ids(json calls) {
  for (auto& c : calls) c.erase("id");
  return calls;
}

const char* kTwoCalls =
    "I'll check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"Paris events\", \"n\": 3}}\n"
    "</tool_call>";

}  // namespace

TEST_CASE("tools: a Hermes call becomes message.tool_calls", "[tool_calls][server]") {
  ToolServer s;
  s.engine.set_script(FakeEngine::script_bytes(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  auto r = s.post(chat_request());
  INFO(r.body);
  REQUIRE(r.status == 200);
  json c = r.j()["choices"][0];
  CHECK(c["finish_reason"] == "tool_calls");
  CHECK(c["message"]["role"] == "assistant");
  CHECK(c["message"]["content"].is_null());
  REQUIRE(c["message"]["tool_calls"].size() == 1);
  json call = c["message"]["tool_calls"][0];
  std::string id = call["id"];
  CHECK(id.rfind("call_", 0) == 0);
  CHECK(id.size() == 29);
  CHECK(call["type"] == "function");
  CHECK(call["function"]["name"] == "get_weather");
  CHECK(call["function"]["arguments"] == R"({"city":"Paris"})");
  CHECK(json::parse(call["function"]["arguments"].get<std::string>())["city"] == "Paris");
  CHECK(r.j()["usage"]["completion_tokens"] > 0);
}

TEST_CASE("tools: streaming gives the same calls and content as non-streaming",
          "[tool_calls][server]") {
  ToolServer s;
  s.engine.set_script(FakeEngine::script_bytes(kTwoCalls));
  auto r = s.post(chat_request({{"n", 2}}));
  REQUIRE(r.status == 200);
  json plain = r.j();
  auto st = s.post(chat_request({{"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  REQUIRE(st.status == 200);
  auto streamed = accumulate(st.body, 2);
  for (int i = 0; i < 2; ++i) {
    const json& m = plain["choices"][i]["message"];
    CHECK(m["content"] == "I'll check both.");
    REQUIRE(m["tool_calls"].size() == 2);
    CHECK(m["tool_calls"][1]["function"]["arguments"] == R"({"q":"Paris events","n":3})");
    CHECK(m["tool_calls"][0]["id"] != m["tool_calls"][1]["id"]);
    CHECK(plain["choices"][i]["finish_reason"] == "tool_calls");
    CHECK(streamed[i].content == m["content"].get<std::string>());
    CHECK(without_ids(streamed[i].tool_calls) == without_ids(m["tool_calls"]));
    CHECK(streamed[i].finish == "tool_calls");
  }
  // Usage still arrives last.
  auto events = sse_events(st.body);
  json last = json::parse(events[events.size() - 2]);
  CHECK(last["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]);
}

TEST_CASE("tools: logprobs keep flowing while a call is held back", "[tool_calls][server]") {
  ToolServer s;
  s.engine.set_script(FakeEngine::script_bytes(kTwoCalls));
  auto st = s.post(chat_request({{"stream", true}, {"logprobs", true}}));
  REQUIRE(st.status == 200);
  size_t lp_tokens = 0;
  for (const std::string& e : sse_events(st.body)) {
    if (e == "[DONE]") continue;
    json j = json::parse(e);
    for (const json& c : j["choices"])
      if (c["logprobs"].is_object()) lp_tokens += c["logprobs"]["content"].size();
  }
  CHECK(lp_tokens == std::string(kTwoCalls).size());  // one per (byte) token, none lost
  auto streamed = accumulate(st.body, 1);
  CHECK(streamed[0].tool_calls.size() == 2);
  auto r = s.post(chat_request({{"logprobs", true}}));
  CHECK(r.j()["choices"][0]["logprobs"]["content"].size() == lp_tokens);
  CHECK(r.j()["choices"][0]["message"]["tool_calls"].size() == 2);
}

TEST_CASE("tools: output that is not a call stays content, byte for byte", "[tool_calls][server]") {
  ToolServer s;
  for (std::string out : {std::string("The weather is fine. <tool_"),
                          std::string("<tool_call>{\"name\": \"get_weather\", \"arguments\": {oops}</tool_call> sorry"),
                          std::string("  plain answer\n")}) {
    s.engine.set_script(FakeEngine::script_bytes(out));
    for (bool stream : {false, true}) {
      auto r = s.post(chat_request({{"stream", stream}}));
      INFO(r.body);
      REQUIRE(r.status == 200);
      if (stream) {
        auto st = accumulate(r.body, 1);
        CHECK(st[0].content == out);
        CHECK(st[0].tool_calls.empty());
        CHECK(st[0].finish == "stop");
      } else {
        json c = r.j()["choices"][0];
        CHECK(c["message"]["content"] == out);
        CHECK(!c["message"].contains("tool_calls"));
        CHECK(c["finish_reason"] == "stop");
      }
    }
  }
  // Cut off by max_tokens in the middle of a call: the raw text, finish "length".
  s.engine.set_script(FakeEngine::script_bytes(kTwoCalls));
  auto r = s.post(chat_request({{"max_tokens", 30}}));
  json c = r.j()["choices"][0];
  CHECK(c["message"]["content"] == std::string(kTwoCalls).substr(0, 30));
  CHECK(c["finish_reason"] == "length");
}

TEST_CASE("tools: tool_choice none, no tools, required and named", "[tool_calls][server]") {
  ToolServer s;
  const std::string call = "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
  s.engine.set_script(FakeEngine::script_bytes(call));
  // "none", or no tools at all: the output is never read for calls.
  for (json req : {chat_request({{"tool_choice", "none"}}),
                   json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}}) {
    auto r = s.post(req);
    REQUIRE(r.status == 200);
    CHECK(r.j()["choices"][0]["message"]["content"] == call);
    CHECK(r.j()["choices"][0]["finish_reason"] == "stop");
  }
  for (json choice : {json("auto"), json("required"),
                      json{{"type", "function"}, {"function", {{"name", "search"}}}}}) {
    const size_t before = s.engine.constraints().size();
    auto r = s.post(chat_request({{"tool_choice", choice}}));
    REQUIRE(r.status == 200);
    CHECK(r.j()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "search");
    // "required" and a named function constrain decoding to one call in the model's format
    // (here Hermes); "auto" leaves the output free.
    const auto constraints = s.engine.constraints();
    if (choice == "auto") {
      CHECK(constraints.size() == before);
    } else {
      REQUIRE(constraints.size() == before + 1);
      CHECK(constraints.back().kind == pagoda::OutputConstraint::Kind::JsonSchema);
      CHECK(constraints.back().prefix == "<tool_call>\n");
      CHECK(constraints.back().source.find("\"search\"") != std::string::npos);
    }
  }
  // The fake engine ignores the grammar (the real one is tested in test_engine_structured and
  // e2e): an answer that holds no call is still returned as content, not lost.
  s.engine.set_script(FakeEngine::script_bytes("no call today"));
  auto r = s.post(chat_request({{"tool_choice", "required"}}));
  REQUIRE(r.status == 200);
  CHECK(r.j()["choices"][0]["message"]["content"] == "no call today");
  CHECK(r.j()["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("tools: malformed tools and tool_choice are 400 naming the field", "[tool_calls][server]") {
  ToolServer s;
  auto check = [&](json extra, const std::string& param) {
    auto r = s.post(chat_request(extra));
    INFO(r.body);
    REQUIRE(r.status == 400);
    CHECK(r.j()["error"]["type"] == "invalid_request_error");
    CHECK(r.j()["error"]["param"] == param);
  };
  check({{"tools", "get_weather"}}, "tools");
  check({{"tools", {1}}}, "tools[0]");
  check({{"tools", {{{"type", "retrieval"}}}}}, "tools[0].type");
  check({{"tools", {{{"type", "function"}}}}}, "tools[0].function");
  check({{"tools", {{{"type", "function"}, {"function", {{"name", ""}}}}}}}, "tools[0].function.name");
  check({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}}}},
        "tools[0].function.parameters");
  check({{"tool_choice", "always"}}, "tool_choice");
  check({{"tool_choice", 3}}, "tool_choice");
  check({{"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
        "tool_choice.function.name");
  check({{"tool_choice", {{"type", "function"}}}}, "tool_choice.function");
  check({{"tool_choice", {{"type", "code"}, {"function", {{"name", "search"}}}}}}, "tool_choice.type");
  check({{"parallel_tool_calls", "yes"}}, "parallel_tool_calls");
  auto r = s.post({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tool_choice", "required"}});
  CHECK(r.status == 400);
  CHECK(r.j()["error"]["param"] == "tool_choice");
  // tool_choice "auto" without tools is harmless.
  CHECK(s.post({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tool_choice", "auto"},
                {"max_tokens", 2}}).status == 200);
}

TEST_CASE("tools: a Mistral marker that is a control token still opens the calls",
          "[tool_calls][server]") {
  ToolServer s(server::ToolCallFormat::Mistral);
  std::vector<FakeEngine::ScriptToken> script = {{MarkerTokenizer::kToolCalls, ""}};
  for (auto& t : FakeEngine::script_bytes(
           R"([{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "search", "arguments": {"q": "x"}}])"))
    script.push_back(t);
  s.engine.set_script(script);
  auto r = s.post(chat_request());
  INFO(r.body);
  REQUIRE(r.status == 200);
  json m = r.j()["choices"][0]["message"];
  REQUIRE(m["tool_calls"].size() == 2);
  CHECK(m["content"].is_null());
  for (const json& c : m["tool_calls"]) {  // Mistral's template wants ids of 9 alphanumerics
    std::string id = c["id"];
    CHECK(id.size() == 9);
    CHECK(std::all_of(id.begin(), id.end(), [](char ch) { return std::isalnum((unsigned char)ch); }));
  }
  CHECK(m["tool_calls"][1]["function"]["arguments"] == R"({"q":"x"})");
  auto st = s.post(chat_request({{"stream", true}}));
  auto streamed = accumulate(st.body, 1);
  CHECK(without_ids(streamed[0].tool_calls) == without_ids(m["tool_calls"]));
  CHECK(streamed[0].content.empty());
}

TEST_CASE("tools: a control-token marker with no call after it stays invisible",
          "[tool_calls][server]") {
  ToolServer s(server::ToolCallFormat::Mistral);
  std::vector<FakeEngine::ScriptToken> script = {{MarkerTokenizer::kToolCalls, ""}};
  for (auto& t : FakeEngine::script_bytes(" no json here")) script.push_back(t);
  s.engine.set_script(script);
  auto r = s.post(chat_request());
  CHECK(r.j()["choices"][0]["message"]["content"] == " no json here");
  CHECK(r.j()["choices"][0]["finish_reason"] == "stop");
  auto st = s.post(chat_request({{"stream", true}}));
  auto streamed = accumulate(st.body, 1);
  CHECK(streamed[0].content == " no json here");
  CHECK(streamed[0].tool_calls.empty());
}

TEST_CASE("tools: format none turns parsing off", "[tool_calls][server]") {
  ToolServer s(server::ToolCallFormat::None);
  const std::string call = "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
  s.engine.set_script(FakeEngine::script_bytes(call));
  auto r = s.post(chat_request());
  CHECK(r.j()["choices"][0]["message"]["content"] == call);
}

TEST_CASE("tools: arguments sent back as a JSON string reach the template as an object",
          "[tool_calls][server]") {
  ToolServer s;
  const std::string body = R"({"messages": [{"role": "user", "content": "DUMP"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{\"zeta\": 1, \"alpha\": \"x\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "42"}]})";
  auto r = http_post(s.port, "/tokenize", body);
  REQUIRE(r.status == 200);
  const json reply = r.j();
  std::string text;
  for (int id : reply["tokens"])
    if (id < 256) text += static_cast<char>(id);
  INFO(text);
  CHECK(text.find(R"("arguments":{"zeta":1,"alpha":"x"})") != std::string::npos);
}

// The conversation goes on with the real chat templates of each family: the calls pagoda
// returned (ids, arguments as a JSON string) are accepted by the template and rendered the way
// the model wrote them.
TEST_CASE("tools: returned calls render back through the real chat templates",
          "[tool_calls][server][testdata]") {
  if (!pagoda::testing::testdata_available("chat-templates/templates")) return;
  struct Family {
    const char* template_file;
    server::ToolCallFormat format;
    std::string output;    // what the model writes
    std::string rendered;  // how the template shows that call in the next prompt
  };
  const Family families[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", server::ToolCallFormat::Hermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", server::ToolCallFormat::Llama3,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", server::ToolCallFormat::Mistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \""},
  };
  for (const Family& f : families) {
    INFO(f.template_file);
    std::ifstream in(std::string(PAGODA_TESTDATA_DIR) + "/chat-templates/templates/" + f.template_file);
    REQUIRE(in.good());
    std::stringstream src;
    src << in.rdbuf();
    auto tmpl = std::make_shared<ChatTemplate>(src.str());
    auto render = [tmpl](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                         bool add_gen, const nlohmann::ordered_json&) {
      ChatTemplate::Inputs ti;
      ti.messages_ordered = messages;
      ti.tools_ordered = tools;
      ti.add_generation_prompt = add_gen;
      return tmpl->render(ti);
    };
    REQUIRE(server::resolve_tool_call_format("auto", src.str()) == f.format);
    ToolServer s(f.format, render);
    s.engine.set_script(FakeEngine::script_bytes(f.output));
    auto first = s.post(chat_request());
    INFO(first.body);
    REQUIRE(first.status == 200);
    json msg = first.j()["choices"][0]["message"];
    REQUIRE(msg["tool_calls"].size() == 1);
    json convo = chat_request();
    convo["messages"].push_back(msg);
    convo["messages"].push_back(
        {{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "21 C"}});
    auto r = http_post(s.port, "/tokenize", convo);
    INFO(r.body);
    REQUIRE(r.status == 200);  // the template accepted the call and its id
    const json reply = r.j();
    std::string text;
    for (int id : reply["tokens"])
      if (id < 256) text += static_cast<char>(id);
    INFO(text);
    CHECK(text.find(f.rendered) != std::string::npos);
    CHECK(text.find("21 C") != std::string::npos);
  }
}
