// End-to-end tests of structured output: the real `pagoda serve` on a
// random-weight model with Phi-3's vocabulary, driven over loopback HTTP the way the OpenAI API
// documents it. Owns: response_format json_schema over the schemas in
// tests/e2e/data/structured_schemas.json (every output that finishes with "stop" must validate,
// checked by Debian's python3-jsonschema through tests/e2e/validate_json_schema.py, independent
// of pagoda's own converter), json_object, the /v1/completions endpoint, the peers' extensions
// (vLLM structured_outputs / guided_*, llama.cpp grammar / json_schema), 400s for bad
// constraints, forced tool calls (tool_choice required / named) under the hermes, llama3 and
// mistral tool-call formats, 16 concurrent requests with different schemas, preemption and
// recompute, n > 1, logprobs and seeded reproducibility.
//
// A random-weight model wanders: where output is cut by max_tokens (finish_reason "length") it
// is only a prefix, so those are counted apart and most must finish with "stop". Schemas bound
// their strings, arrays and numbers; where the converter allows no bound (format email/uri,
// free keys), the data file's `bias` gives the string-closing tokens a logit_bias.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/e2e/e2e_fixture.h"
#include "tests/support/skip.h"

using namespace pagoda::testing;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // keeps `properties` in the order written

namespace {

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kMaxTokens = 400;  // the model's context is 512; prompts take ~30 tokens

// ---- the validator ------------------------------------------------------------------------

// "" when /usr/bin/python3 and its jsonschema module are usable, else what is missing.
const std::string& validator_missing() {
  static const std::string missing = []() -> std::string {
    if (access(kPython, X_OK) != 0) return std::string(kPython) + " (Debian's python3)";
    std::string cmd = std::string(kPython) + " -c 'import jsonschema' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0)
      return std::string("the jsonschema module of ") + kPython + " (apt-get install python3-jsonschema)";
    return "";
  }();
  return missing;
}

// Starts every case tagged [jsonschema]: without the validator it skips (tests/support/skip.h).
#define SKIP_WITHOUT_VALIDATOR()                                                                  \
  if (!pagoda::testing::requirement_met(validator_missing().empty(),                              \
                                        "structured output validation needs " + validator_missing())) \
    return;

struct Verdict {
  bool valid = false;
  std::string error;
  std::vector<std::string> unchecked_formats;
  bool duplicate_keys = false;  // an object repeats a key (the last value was validated)
};

struct Validation {
  std::vector<std::string> formats_active;
  std::vector<Verdict> verdicts;  // one per item, in order
};

// Runs tests/e2e/validate_json_schema.py over (schema, output text) pairs.
Validation validate(const std::vector<std::pair<ojson, std::string>>& items) {
  static std::atomic<int> counter{0};
  std::string in = e2e_dir() + "/validate_" + std::to_string(counter++) + ".jsonl";
  {
    std::ofstream f(in);
    for (size_t i = 0; i < items.size(); ++i) {
      ojson line = {{"id", i}, {"schema", items[i].first}, {"output", items[i].second}};
      f << line.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
    }
  }
  std::string cmd = std::string(kPython) + " " PAGODA_SOURCE_DIR "/tests/e2e/validate_json_schema.py " + in;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) throw std::runtime_error("validator failed (" + std::to_string(rc) + "): " + cmd + "\n" + out);
  Validation v;
  v.verdicts.resize(items.size());
  std::istringstream lines(out);
  std::string line;
  bool first = true;
  size_t seen = 0;
  while (std::getline(lines, line)) {
    json j = json::parse(line);
    if (first) {
      v.formats_active = j["formats_active"].get<std::vector<std::string>>();
      first = false;
      continue;
    }
    Verdict& d = v.verdicts.at(j["id"].get<size_t>());
    d.valid = j["valid"].get<bool>();
    d.error = j["error"].get<std::string>();
    d.unchecked_formats = j["unchecked_formats"].get<std::vector<std::string>>();
    d.duplicate_keys = j["duplicate_keys"].get<bool>();
    ++seen;
  }
  if (seen != items.size()) throw std::runtime_error("validator answered " + std::to_string(seen) +
                                                     " of " + std::to_string(items.size()) + ":\n" + out);
  return v;
}

// ---- requests -----------------------------------------------------------------------------

struct Choice {
  std::string text;            // message.content / text, or the streamed deltas joined
  std::string finish;          // finish_reason
  json tool_calls = json::array();  // [{id, type, function: {name, arguments}}]
  json logprobs;               // the choice's logprobs (non-streaming only)
};

struct Answer {
  int status = 0;
  std::string body;
  std::vector<Choice> choices;
  json error;  // the error object of a non-200 answer
};

// POSTs `body` (chat when it has "messages", else completions) and gathers the choices, whether
// the answer is streamed or not.
Answer ask(int port, const ojson& body) {
  const bool chat = body.contains("messages");
  const bool stream = body.value("stream", false);
  HttpResult r = http_post(port, chat ? "/v1/chat/completions" : "/v1/completions", body.dump(), "", 180);
  Answer a;
  a.status = r.status;
  a.body = r.body;
  if (r.status != 200) {
    json j = json::parse(r.body, nullptr, false);
    if (!j.is_discarded() && j.contains("error")) a.error = j["error"];
    return a;
  }
  auto at = [&](size_t i) -> Choice& {
    if (i >= a.choices.size()) a.choices.resize(i + 1);
    return a.choices[i];
  };
  if (!stream) {
    json j = r.j();
    for (const json& c : j["choices"]) {
      Choice& ch = at(c["index"].get<size_t>());
      if (chat) {
        const json& m = c["message"];
        if (m.contains("content") && m["content"].is_string()) ch.text = m["content"].get<std::string>();
        if (m.contains("tool_calls") && m["tool_calls"].is_array()) ch.tool_calls = m["tool_calls"];
      } else {
        ch.text = c["text"].get<std::string>();
      }
      if (c["finish_reason"].is_string()) ch.finish = c["finish_reason"].get<std::string>();
      if (c.contains("logprobs")) ch.logprobs = c["logprobs"];
    }
    return a;
  }
  for (const std::string& e : sse_events(r.body)) {
    if (e == "[DONE]") continue;
    json j = json::parse(e);
    if (j.contains("error")) {
      a.status = -1;  // an error inside the stream
      a.error = j["error"];
      continue;
    }
    for (const json& c : j.value("choices", json::array())) {
      Choice& ch = at(c["index"].get<size_t>());
      if (c.contains("finish_reason") && c["finish_reason"].is_string())
        ch.finish = c["finish_reason"].get<std::string>();
      if (!chat) {
        if (c.contains("text")) ch.text += c["text"].get<std::string>();
        continue;
      }
      const json& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) ch.text += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const json& t : d["tool_calls"]) {
          size_t k = t.value("index", ch.tool_calls.size());
          while (ch.tool_calls.size() <= k)
            ch.tool_calls.push_back({{"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
          json& call = ch.tool_calls[k];
          if (t.contains("id")) call["id"] = t["id"];
          if (t.contains("function")) {
            const json& f = t["function"];
            if (f.contains("name") && f["name"].is_string())
              call["function"]["name"] = call["function"]["name"].get<std::string>() + f["name"].get<std::string>();
            if (f.contains("arguments") && f["arguments"].is_string())
              call["function"]["arguments"] =
                  call["function"]["arguments"].get<std::string>() + f["arguments"].get<std::string>();
          }
        }
      }
    }
  }
  return a;
}

ojson chat_request(const std::string& user, int max_tokens, uint64_t seed, bool stream) {
  ojson b = {{"model", "model"},
             {"messages", ojson::array({ojson{{"role", "system"}, {"content", "Reply in JSON."}},
                                        ojson{{"role", "user"}, {"content", user}}})},
             {"max_tokens", max_tokens},
             {"temperature", 0.7},
             {"seed", seed}};
  if (stream) b["stream"] = true;
  return b;
}

ojson completion_request(const std::string& prompt, int max_tokens, uint64_t seed, bool stream) {
  ojson b = {{"model", "model"}, {"prompt", prompt}, {"max_tokens", max_tokens},
             {"temperature", 0.7}, {"seed", seed}};
  if (stream) b["stream"] = true;
  return b;
}

ojson schema_format(const ojson& schema) {
  return {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"schema", schema}, {"strict", true}}}};
}

// Runs fn(0..n-1) on `workers` threads.
void parallel_for(size_t n, size_t workers, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t w = 0; w < std::min(n, workers); ++w)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < n;) fn(i);
    });
  for (auto& t : pool) t.join();
}

std::vector<ojson> load_schemas() {
  std::ifstream f(PAGODA_SOURCE_DIR "/tests/e2e/data/structured_schemas.json");
  if (!f) throw std::runtime_error("cannot read tests/e2e/data/structured_schemas.json");
  ojson d = ojson::parse(f);
  return d["schemas"].get<std::vector<ojson>>();
}

// logit_bias (+8) for the tokens spelling each of `texts`, so that a random model closes strings
// the schema cannot bound (format email/uri refuse maxLength). The ids come from the server's
// /tokenize ("a" + text: the last token) and are checked with /detokenize; a text that is not
// one token is left out (WARN), which only makes outputs longer.
ojson logit_bias_for(int port, const ojson& texts) {
  static std::mutex mu;
  static std::map<std::string, int> cache;  // text -> id, -1 when not one token
  std::lock_guard<std::mutex> lock(mu);
  ojson bias = ojson::object();
  for (const auto& t : texts) {
    const std::string text = t.get<std::string>();
    if (!cache.count(text)) {
      int id = -1;
      HttpResult a = http_post(port, "/tokenize", json{{"prompt", "a"}, {"add_special_tokens", false}});
      HttpResult r = http_post(port, "/tokenize", json{{"prompt", "a" + text}, {"add_special_tokens", false}});
      if (a.status == 200 && r.status == 200) {
        json ta = a.j()["tokens"], tr = r.j()["tokens"];
        if (tr.size() == ta.size() + 1) {
          int cand = tr.back().get<int>();
          HttpResult d = http_post(port, "/detokenize", json{{"tokens", {cand}}});
          if (d.status == 200 && d.j()["prompt"] == text) id = cand;
        }
      }
      cache[text] = id;
    }
    if (cache[text] >= 0) bias[std::to_string(cache[text])] = 8;
  }
  return bias;
}

// The server the cases share, at most 16 sequences at once (start_server's --max-seqs 32 is
// overridden: the last flag wins).
ServerProcess& server() {
  static std::unique_ptr<ServerProcess> s = start_server({"--max-seqs", "16"});
  return *s;
}

// The keys of an object output follow `properties` order, as written in the schema (clients
// and the OpenAI docs rely on it). Returns "" or what is out of order.
std::string property_order_problem(const ojson& schema, const std::string& text) {
  if (!schema.is_object() || !schema.contains("properties")) return "";
  ojson v = ojson::parse(text, nullptr, false);
  if (!v.is_object()) return "";
  std::map<std::string, size_t> rank;
  size_t r = 0;
  for (const auto& [k, _] : schema["properties"].items()) rank[k] = r++;
  size_t last = 0;
  bool any = false;
  for (const auto& [k, _] : v.items()) {
    auto it = rank.find(k);
    if (it == rank.end()) continue;
    if (any && it->second < last) return "key '" + k + "' comes after a later property";
    last = it->second;
    any = true;
  }
  return "";
}

// Whether some object the schema describes takes keys it does not name (additionalProperties
// absent, true or a schema): there a grammar cannot keep two members from sharing a key, which
// RFC 8259 allows. Elsewhere a repeated key is a converter bug.
bool admits_free_keys(const ojson& schema) {
  if (schema.is_array()) {
    for (const auto& v : schema)
      if (admits_free_keys(v)) return true;
    return false;
  }
  if (!schema.is_object()) return false;
  bool objectish = (schema.contains("type") && schema["type"] == "object") || schema.contains("properties") ||
                   schema.contains("additionalProperties");
  if (objectish && !(schema.contains("additionalProperties") && schema["additionalProperties"] == false))
    return true;
  for (const auto& [k, v] : schema.items())
    if (k != "enum" && k != "const" && admits_free_keys(v)) return true;
  return false;
}

struct Outcome {
  std::string label;
  ojson schema;
  ojson request;
  Answer answer;
};

// Validates every "stop" output of `runs` (choice by choice); returns the count validated.
size_t require_valid(const std::vector<Outcome>& runs, const std::string& what) {
  std::vector<std::pair<ojson, std::string>> items;
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t c = 0; c < runs[i].answer.choices.size(); ++c)
      if (runs[i].answer.choices[c].finish == "stop") {
        items.emplace_back(runs[i].schema, runs[i].answer.choices[c].text);
        where.emplace_back(i, c);
      }
  if (items.empty()) return 0;
  Validation v = validate(items);
  std::set<std::string> unchecked;
  size_t duplicates = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const Outcome& o = runs[where[k].first];
    INFO(what << " " << o.label << " choice " << where[k].second);
    INFO("schema: " << o.schema.dump());
    INFO("output: " << items[k].second);
    INFO("validator: " << v.verdicts[k].error);
    CHECK(v.verdicts[k].valid);
    if (v.verdicts[k].duplicate_keys) {
      ++duplicates;
      CHECK(admits_free_keys(o.schema));
    }
    for (const auto& f : v.verdicts[k].unchecked_formats) unchecked.insert(f);
  }
  if (duplicates)
    std::printf("structured e2e: %s: %zu outputs repeat a free object key (RFC 8259 allows it)\n", what.c_str(),
                duplicates);
  for (const auto& f : unchecked)
    WARN("format '" << f << "' not checked: this jsonschema has no checker for it");
  return items.size();
}

}  // namespace

// ---- the tests ----------------------------------------------------------------------------

TEST_CASE("structured e2e: the validator rejects what it should", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  // Without this, a validator that accepts everything would make every test below pass.
  std::vector<std::pair<ojson, std::string>> items = {
      {ojson{{"type", "string"}, {"format", "date"}}, "\"2021-02-29\""},
      {ojson{{"type", "string"}, {"format", "time"}}, "\"24:00:00Z\""},
      {ojson{{"type", "string"}, {"format", "date-time"}}, "\"2021-01-01 00:00:00\""},
      {ojson{{"type", "string"}, {"format", "uuid"}}, "\"123e4567e89b12d3a456426614174000\""},
      {ojson{{"type", "string"}, {"format", "email"}}, "\"nobody\""},
      {ojson{{"type", "string"}, {"format", "uri"}}, "\"no scheme here\""},
      {ojson{{"type", "string"}, {"maxLength", 2}}, "\"abc\""},
      {ojson{{"type", "string"}, {"pattern", "^[a-z]+$"}}, "\"aB\""},
      {ojson{{"type", "integer"}, {"exclusiveMaximum", 10}}, "10"},
      {ojson{{"type", "object"}, {"additionalProperties", false}}, "{\"a\":1}"},
      {ojson{{"type", "object"}}, "{\"a\":1"},
      {ojson{{"const", "x"}}, "\"x\" \"x\""},
  };
  Validation v = validate(items);
  for (size_t i = 0; i < items.size(); ++i) {
    INFO(items[i].first.dump() << " vs " << items[i].second);
    CHECK_FALSE(v.verdicts[i].valid);
  }
  for (const char* f : {"date", "time", "date-time", "email", "uuid", "uri"}) {
    INFO("format " << f);
    CHECK(std::count(v.formats_active.begin(), v.formats_active.end(), f) == 1);
  }
  Validation ok = validate({{ojson{{"type", "string"}, {"format", "date-time"}}, "\"2024-02-29T23:59:59.5+05:30\""},
                            {ojson{{"type", "string"}, {"maxLength", 2}}, "\"\\u00e9\\n\""},
                            {ojson{{"type", "object"}}, "{\"a\":1,\"a\":2}"}});
  CHECK(ok.verdicts[0].valid);
  CHECK(ok.verdicts[1].valid);
  CHECK(ok.verdicts[2].valid);
  CHECK(ok.verdicts[2].duplicate_keys);
  CHECK(admits_free_keys(ojson{{"type", "object"}}));
  CHECK_FALSE(admits_free_keys(ojson::parse(R"({"type":"object","properties":{"a":{"type":"object",
      "additionalProperties":false}},"additionalProperties":false})")));
}

TEST_CASE("structured e2e: response_format json_schema, 50+ schemas, streaming and not", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  const std::vector<ojson> schemas = load_schemas();
  REQUIRE(schemas.size() >= 50);
  const int port = server().port();
  // Each schema four times, each with its own seed: streamed and not, at temperature 0.7 and 1.
  std::vector<Outcome> runs(schemas.size() * 4);
  parallel_for(runs.size(), 16, [&](size_t i) {
    const ojson& s = schemas[i / 4];
    const bool stream = i % 2 == 1;
    const double temperature = i % 4 >= 2 ? 1.0 : 0.7;
    Outcome& o = runs[i];
    o.label = s["name"].get<std::string>() + " T=" + (i % 4 >= 2 ? "1" : "0.7") + (stream ? " (stream)" : "");
    o.schema = s["schema"];
    o.request = chat_request("Give an example.", kMaxTokens, 1000 + i, stream);
    o.request["temperature"] = temperature;
    o.request["response_format"] = schema_format(o.schema);
    if (s.contains("bias")) o.request["logit_bias"] = logit_bias_for(port, s["bias"]);
    o.answer = ask(port, o.request);
  });
  size_t stop = 0, length = 0;
  std::vector<std::string> cut;
  for (const Outcome& o : runs) {
    INFO(o.label << ": " << o.answer.body.substr(0, 600));
    REQUIRE(o.answer.status == 200);
    REQUIRE(o.answer.choices.size() == 1);
    const Choice& c = o.answer.choices[0];
    CHECK((c.finish == "stop" || c.finish == "length"));
    if (c.finish == "stop") {
      ++stop;
      CHECK(property_order_problem(o.schema, c.text) == "");
    } else if (c.finish == "length") {
      ++length;
      cut.push_back(o.label);
      CHECK(!c.text.empty());
    }
  }
  size_t validated = require_valid(runs, "json_schema");
  std::printf("structured e2e: %zu schemas, %zu requests: %zu finished by stop (all validated: %zu), "
              "%zu by length\n", schemas.size(), runs.size(), stop, validated, length);
  std::string cut_list;
  for (const auto& l : cut) cut_list += " " + l;
  if (!cut.empty()) std::printf("structured e2e: cut by length:%s\n", cut_list.c_str());
  INFO("cut by length:" << cut_list);
  CHECK(validated == stop);
  CHECK(stop * 10 >= runs.size() * 9);  // most finish: outputs are kept short by the schemas
}

TEST_CASE("structured e2e: json_object and the completions endpoint", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  const int port = server().port();
  const std::vector<ojson> schemas = load_schemas();
  const ojson any_object = {{"type", "object"}};
  std::vector<Outcome> runs;
  // json_object on both endpoints, streamed and not. A random model writing any JSON object
  // wanders (with uniform sampling a third finish in 400 tokens); half the requests bias the
  // '"' token so that strings close and the object finishes.
  const ojson quote_bias = logit_bias_for(port, ojson::array({"\""}));
  for (int i = 0; i < 8; ++i) {
    Outcome o;
    bool chat = i < 4, biased = i % 4 >= 2;
    o.label = std::string("json_object ") + (chat ? "chat" : "completions") + (biased ? " biased" : "") +
              (i % 2 ? " (stream)" : "");
    o.schema = any_object;
    o.request = chat ? chat_request("Any JSON object.", kMaxTokens, 50 + i, i % 2)
                     : completion_request("A JSON object:", kMaxTokens, 50 + i, i % 2);
    o.request["response_format"] = {{"type", "json_object"}};
    if (biased) o.request["logit_bias"] = quote_bias;
    runs.push_back(o);
  }
  size_t i = 0;  // json_schema on /v1/completions
  for (const char* name : {"flat_object", "array_of_enums", "const_string", "oneof_tagged", "recursive_tree",
                           "pattern_alternation", "format_date_time", "integer_negative"}) {
    auto s = std::find_if(schemas.begin(), schemas.end(), [&](const ojson& x) { return x["name"] == name; });
    REQUIRE(s != schemas.end());
    Outcome o;
    o.label = std::string("completions ") + name + (i % 2 ? " (stream)" : "");
    o.schema = (*s)["schema"];
    o.request = completion_request("JSON:", kMaxTokens, 70 + i, i % 2);
    o.request["response_format"] = schema_format(o.schema);
    runs.push_back(o);
    ++i;
  }
  parallel_for(runs.size(), 16, [&](size_t i) { runs[i].answer = ask(port, runs[i].request); });
  size_t stop = 0, object_stop = 0;
  for (const Outcome& o : runs) {
    INFO(o.label << ": " << o.answer.body.substr(0, 600));
    REQUIRE(o.answer.status == 200);
    const Choice& c = o.answer.choices.at(0);
    CHECK((c.finish == "stop" || c.finish == "length"));
    // Bounded schemas and biased objects finish.
    if (o.request.contains("logit_bias") || o.schema != any_object) CHECK(c.finish == "stop");
    if (c.finish == "stop") {
      ++stop;
      if (o.schema == any_object) {
        ++object_stop;
        json v = json::parse(c.text, nullptr, false);
        CHECK(v.is_object());
      }
    } else {
      // A prefix of an object: it starts like one (no text before it).
      CHECK(c.text.substr(0, 1) == "{");
    }
  }
  std::printf("structured e2e: json_object %zu of 8 finished by stop; completions+json_object %zu of %zu\n",
              object_stop, stop, runs.size());
  CHECK(require_valid(runs, "json_object/completions") == stop);
}

TEST_CASE("structured e2e: vLLM and llama.cpp extensions", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  const int port = server().port();
  const std::string gbnf = "root ::= answer \" \" num\nanswer ::= \"yes\" | \"no\"\nnum ::= [0-9] [0-9]?\n";
  const std::string gbnf_re = "(yes|no) [0-9][0-9]?";
  const ojson schema = {{"type", "object"},
                        {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}}},
                        {"required", {"ok", "n"}},
                        {"additionalProperties", false}};
  struct Case {
    std::string name;
    std::function<void(ojson&)> set;
    std::string regex;                  // the whole output must match
    std::vector<std::string> choices;   // or be one of these
    bool json_schema = false;           // or validate against `schema`
  };
  std::vector<Case> cases = {
      {"structured_outputs.regex", [](ojson& b) { b["structured_outputs"] = {{"regex", "[a-z]{2,5}-[0-9]{1,3}"}}; },
       "[a-z]{2,5}-[0-9]{1,3}", {}},
      {"guided_regex", [](ojson& b) { b["guided_regex"] = "(yes|no)!{1,3}"; }, "(yes|no)!{1,3}", {}},
      {"structured_outputs.choice", [](ojson& b) { b["structured_outputs"] = {{"choice", {"alpha", "beta", "gamma delta"}}}; },
       "", {"alpha", "beta", "gamma delta"}},
      {"guided_choice", [](ojson& b) { b["guided_choice"] = {"red", "green", "blue"}; }, "", {"red", "green", "blue"}},
      {"grammar", [&](ojson& b) { b["grammar"] = gbnf; }, gbnf_re, {}},
      {"structured_outputs.grammar", [&](ojson& b) { b["structured_outputs"] = {{"grammar", gbnf}}; }, gbnf_re, {}},
      {"guided_grammar", [&](ojson& b) { b["guided_grammar"] = gbnf; }, gbnf_re, {}},
      {"structured_outputs.json", [&](ojson& b) { b["structured_outputs"] = {{"json", schema}}; }, "", {}, true},
      {"guided_json", [&](ojson& b) { b["guided_json"] = schema; }, "", {}, true},
      {"json_schema (llama.cpp)", [&](ojson& b) { b["json_schema"] = schema; }, "", {}, true},
      {"response_format json_object + schema (llama.cpp)",
       [&](ojson& b) { b["response_format"] = {{"type", "json_object"}, {"schema", schema}}; }, "", {}, true},
  };
  std::vector<Outcome> runs;
  std::vector<size_t> case_of;
  for (size_t k = 0; k < cases.size(); ++k)
    for (int v = 0; v < 3; ++v) {  // chat, chat streamed, completions (alternately streamed)
      Outcome o;
      o.label = cases[k].name + (v == 0 ? " chat" : v == 1 ? " chat (stream)" : " completions");
      o.schema = schema;
      o.request = v < 2 ? chat_request("Answer.", 64, 300 + k * 3 + v, v == 1)
                        : completion_request("Answer:", 64, 300 + k * 3 + v, k % 2);
      cases[k].set(o.request);
      runs.push_back(o);
      case_of.push_back(k);
    }
  parallel_for(runs.size(), 16, [&](size_t i) { runs[i].answer = ask(port, runs[i].request); });
  std::vector<Outcome> to_validate;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Outcome& o = runs[i];
    const Case& c = cases[case_of[i]];
    INFO(o.label << ": " << o.request.dump() << "\n-> " << o.answer.body.substr(0, 600));
    REQUIRE(o.answer.status == 200);
    const Choice& ch = o.answer.choices.at(0);
    INFO("output: " << ch.text);
    CHECK(ch.finish == "stop");  // every constraint here is bounded
    if (!c.regex.empty()) CHECK(std::regex_match(ch.text, std::regex(c.regex)));
    if (!c.choices.empty()) CHECK(std::count(c.choices.begin(), c.choices.end(), ch.text) == 1);
    if (c.json_schema) to_validate.push_back(o);
  }
  CHECK(require_valid(to_validate, "extension") == to_validate.size());

  // {"type": "text"} is no constraint at all.
  ojson plain = chat_request("Hi.", 8, 1, false);
  plain["response_format"] = {{"type", "text"}};
  plain["ignore_eos"] = true;
  Answer a = ask(port, plain);
  INFO(a.body);
  REQUIRE(a.status == 200);
  CHECK(a.choices.at(0).finish == "length");
}

TEST_CASE("structured e2e: bad constraints are 400s naming the parameter", "[e2e][structured]") {
  const int port = server().port();
  struct Bad {
    std::string name;
    std::function<void(ojson&)> set;
    std::vector<std::string> params;  // error.param starts with one of these
    std::string mentions;             // error.message contains this ("" = anything)
    bool completions = false;
  };
  const ojson valid_schema = {{"type", "string"}, {"maxLength", 3}};
  std::vector<Bad> bad = {
      {"unknown response_format.type", [](ojson& b) { b["response_format"] = {{"type", "bogus"}}; },
       {"response_format"}, "bogus"},
      {"unknown response_format.type (completions)", [](ojson& b) { b["response_format"] = {{"type", "yaml"}}; },
       {"response_format"}, "yaml", true},
      {"response_format not an object", [](ojson& b) { b["response_format"] = "json"; }, {"response_format"}, ""},
      {"json_schema without a schema object", [](ojson& b) { b["response_format"] = {{"type", "json_schema"}}; },
       {"response_format"}, ""},
      {"invalid schema {type: 5}", [](ojson& b) { b["response_format"] = schema_format({{"type", 5}}); },
       {"response_format"}, ""},
      {"invalid schema (type name)", [](ojson& b) { b["response_format"] = schema_format({{"type", "strnig"}}); },
       {"response_format"}, "strnig"},
      {"refused keyword contentEncoding",
       [](ojson& b) { b["response_format"] = schema_format({{"type", "string"}, {"contentEncoding", "base64"}}); },
       {"response_format"}, "contentEncoding"},
      {"refused uniqueItems",
       [](ojson& b) {
         b["response_format"] = schema_format({{"type", "array"}, {"items", {{"type", "integer"}}}, {"uniqueItems", true}});
       },
       {"response_format"}, "uniqueItems"},
      {"refused format ipv6", [](ojson& b) { b["response_format"] = schema_format({{"type", "string"}, {"format", "ipv6"}}); },
       {"response_format"}, "ipv6"},
      {"refused form of not",
       [](ojson& b) { b["response_format"] = schema_format({{"type", "integer"}, {"not", {{"multipleOf", 3}}}}); },
       {"response_format"}, "not"},
      {"oneOf with overlapping branches",
       [](ojson& b) {
         // The overlap (integers of at least 2) cannot be cut out: non-integers above a bound.
         b["response_format"] = schema_format({{"oneOf", {{{"type", "integer"}}, {{"minimum", 2}}}}});
       },
       {"response_format"}, "oneOf"},
      {"pattern with a lookahead",
       [](ojson& b) { b["response_format"] = schema_format({{"type", "string"}, {"pattern", "^(?=a)a$"}}); },
       {"response_format"}, ""},
      {"schema with a dangling $ref", [](ojson& b) { b["response_format"] = schema_format({{"$ref", "#/$defs/nope"}}); },
       {"response_format"}, ""},
      {"schema that accepts nothing", [](ojson& b) { b["response_format"] = schema_format(false); },
       {"response_format"}, ""},
      {"unparsable GBNF", [](ojson& b) { b["grammar"] = "root ::= (\"a\""; }, {"grammar"}, ""},
      {"GBNF without root", [](ojson& b) { b["grammar"] = "start ::= \"a\""; }, {"grammar"}, "root"},
      {"GBNF with an undefined rule", [](ojson& b) { b["grammar"] = "root ::= missing"; }, {"grammar"}, "missing"},
      {"bad regex in structured_outputs.regex", [](ojson& b) { b["structured_outputs"] = {{"regex", "[a-"}}; },
       {"structured_outputs"}, ""},
      {"bad regex in guided_regex", [](ojson& b) { b["guided_regex"] = "(ab"; }, {"guided_regex"}, ""},
      {"empty guided_choice", [](ojson& b) { b["guided_choice"] = ojson::array(); }, {"guided_choice"}, ""},
      {"bad structured_outputs.json", [](ojson& b) { b["structured_outputs"] = {{"json", {{"type", 5}}}}; },
       {"structured_outputs"}, ""},
      {"two constraints: response_format and structured_outputs",
       [&](ojson& b) {
         b["response_format"] = {{"type", "json_object"}};
         b["structured_outputs"] = {{"regex", "[a-z]+"}};
       },
       {"response_format", "structured_outputs"}, ""},
      {"two constraints: grammar and guided_choice",
       [](ojson& b) {
         b["grammar"] = "root ::= \"a\"";
         b["guided_choice"] = {"a", "b"};
       },
       {"grammar", "guided_choice"}, ""},
      {"two constraints inside structured_outputs", [](ojson& b) { b["structured_outputs"] = {{"regex", "a"}, {"choice", {"a"}}}; },
       {"structured_outputs"}, ""},
      {"two constraints: json_schema and response_format json_schema",
       [&](ojson& b) {
         b["json_schema"] = valid_schema;
         b["response_format"] = schema_format(valid_schema);
       },
       {"json_schema", "response_format"}, ""},
      {"tool_choice required with a tool whose parameters are not a schema",
       [](ojson& b) {
         b["tools"] = ojson::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", 5}}}}}}});
         b["tool_choice"] = "required";
       },
       {"tool_choice", "tools"}, ""},
      {"a schema whose grammar is over the size bound",
       [](ojson& b) {
         ojson values = ojson::array();
         for (int v = 0; v < 20000; ++v) values.push_back("value number " + std::to_string(v));
         b["response_format"] = schema_format({{"enum", values}});
       },
       {"response_format"}, ""},
      {"bad GBNF on completions", [](ojson& b) { b["grammar"] = "root ::= [a-"; }, {"grammar"}, "", true},
  };
  std::vector<Answer> answers(bad.size());
  std::vector<ojson> requests(bad.size());
  for (size_t i = 0; i < bad.size(); ++i) {
    requests[i] = bad[i].completions ? completion_request("x", 4, 1, false) : chat_request("x", 4, 1, false);
    bad[i].set(requests[i]);
  }
  parallel_for(bad.size(), 8, [&](size_t i) { answers[i] = ask(port, requests[i]); });
  for (size_t i = 0; i < bad.size(); ++i) {
    const Answer& a = answers[i];
    INFO(bad[i].name << ": " << requests[i].dump() << "\n-> " << a.status << " " << a.body.substr(0, 600));
    CHECK(a.status == 400);
    if (a.status != 400) continue;
    REQUIRE(a.error.is_object());
    CHECK(a.error["type"] == "invalid_request_error");
    REQUIRE(a.error["param"].is_string());
    const std::string param = a.error["param"].get<std::string>();
    bool param_ok = false;
    for (const auto& p : bad[i].params) param_ok |= param.rfind(p, 0) == 0;
    CHECK(param_ok);
    REQUIRE(a.error["message"].is_string());
    if (!bad[i].mentions.empty())
      CHECK(a.error["message"].get<std::string>().find(bad[i].mentions) != std::string::npos);
  }
  CHECK(http_get(port, "/health").status == 200);
}

namespace {

const ojson kWeatherParams = {
    {"type", "object"},
    {"properties", {{"city", {{"type", "string"}, {"minLength", 1}, {"maxLength", 12}}},
                    {"unit", {{"enum", {"celsius", "fahrenheit"}}}}}},
    {"required", {"city", "unit"}},
    {"additionalProperties", false}};
const ojson kTimeParams = {{"type", "object"},
                           {"properties", {{"tz", {{"type", "string"}, {"pattern", "^[A-Z]{3}$"}}},
                                           {"hour24", {{"type", "boolean"}}}}},
                           {"required", {"tz"}},
                           {"additionalProperties", false}};

ojson tools() {
  return ojson::array(
      {ojson{{"type", "function"},
             {"function", {{"name", "get_weather"}, {"description", "Weather in a city"}, {"parameters", kWeatherParams}}}},
       ojson{{"type", "function"},
             {"function", {{"name", "get_time"}, {"description", "Time in a zone"}, {"parameters", kTimeParams}}}}});
}

// Forced tool calls (required, then named get_weather), streamed and not, on the server at
// `port`: every answer carries parsed calls whose arguments validate against the parameters.
void check_forced_tool_calls(int port, const std::string& parser) {
  std::vector<Outcome> runs;
  for (int i = 0; i < 8; ++i) {
    Outcome o;
    bool named = i >= 4, stream = i % 2 == 1;
    o.label = parser + (named ? " named" : " required") + (stream ? " (stream)" : "");
    o.request = chat_request("What is the weather in Paris?", 300, 500 + i, stream);
    o.request["tools"] = tools();
    o.request["tool_choice"] = named ? ojson{{"type", "function"}, {"function", {{"name", "get_weather"}}}}
                                     : ojson("required");
    runs.push_back(o);
  }
  parallel_for(runs.size(), 8, [&](size_t i) { runs[i].answer = ask(port, runs[i].request); });
  std::vector<std::pair<ojson, std::string>> items;
  std::vector<std::string> labels;
  for (const Outcome& o : runs) {
    INFO(o.label << ": " << o.answer.body.substr(0, 800));
    REQUIRE(o.answer.status == 200);
    const Choice& c = o.answer.choices.at(0);
    CHECK((c.finish == "tool_calls" || c.finish == "stop"));
    REQUIRE(c.tool_calls.is_array());
    REQUIRE(!c.tool_calls.empty());
    CHECK(c.text.empty());  // the forced call is the whole answer: no content beside it
    for (const json& call : c.tool_calls) {
      INFO("call: " << call.dump());
      CHECK(call["type"] == "function");
      CHECK(call.contains("id"));
      const std::string name = call["function"]["name"].get<std::string>();
      const std::string args = call["function"]["arguments"].get<std::string>();
      const bool named = o.request["tool_choice"].is_object();
      if (named) CHECK(name == "get_weather");
      CHECK((name == "get_weather" || name == "get_time"));
      if (name != "get_weather" && name != "get_time") continue;
      items.emplace_back(name == "get_weather" ? kWeatherParams : kTimeParams, args);
      labels.push_back(o.label + " " + name);
    }
  }
  if (items.empty()) return;
  Validation v = validate(items);
  for (size_t k = 0; k < items.size(); ++k) {
    INFO(labels[k] << " arguments: " << items[k].second << "\nvalidator: " << v.verdicts[k].error);
    CHECK(v.verdicts[k].valid);
  }
  std::printf("structured e2e: tool calls (%s): %zu calls in 8 answers, all validated\n", parser.c_str(), items.size());
}

}  // namespace

TEST_CASE("structured e2e: tool_choice required and named force a valid call (auto -> hermes)", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  check_forced_tool_calls(server().port(), "default");
}

TEST_CASE("structured e2e: forced tool calls in the llama3 and mistral formats", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  for (const char* parser : {"llama3", "mistral"}) {
    auto s = start_server({"--max-seqs", "16", "--tool-call-parser", parser});
    check_forced_tool_calls(s->port(), parser);
  }
}

TEST_CASE("structured e2e: 16 concurrent requests with different schemas do not leak", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  const int port = server().port();
  // 16 different schemas from the file (no $ref: they are nested below), each wrapped so that
  // the output also names its own request: {"req": <const i>, "v": <schema i>}.
  std::vector<ojson> picked;
  for (const ojson& s : load_schemas()) {
    std::string text = s["schema"].dump();
    if (text.find("$ref") != std::string::npos || text.find("$schema") != std::string::npos) continue;
    if (picked.size() < 16) picked.push_back(s);
  }
  REQUIRE(picked.size() == 16);
  std::vector<Outcome> runs(16);
  std::latch start(16 + 4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      Outcome& o = runs[i];
      o.label = "concurrent " + std::to_string(i) + " " + picked[i]["name"].get<std::string>();
      o.schema = {{"type", "object"},
                  {"properties", {{"req", {{"const", i}}}, {"v", picked[i]["schema"]}}},
                  {"required", {"req", "v"}},
                  {"additionalProperties", false}};
      o.request = chat_request("Example " + std::to_string(i), kMaxTokens, 900 + i, i % 2);
      o.request["response_format"] = schema_format(o.schema);
      start.arrive_and_wait();
      o.answer = ask(port, o.request);
    });
  }
  std::vector<Answer> free_answers(4);  // unconstrained requests in the same batches
  for (size_t i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      ojson b = chat_request("Say anything.", 48, 950 + i, i % 2);
      b["ignore_eos"] = true;
      start.arrive_and_wait();
      free_answers[i] = ask(port, b);
    });
  for (auto& t : threads) t.join();
  size_t stop = 0;
  for (const Outcome& o : runs) {
    INFO(o.label << ": " << o.answer.body.substr(0, 600));
    REQUIRE(o.answer.status == 200);
    const Choice& c = o.answer.choices.at(0);
    CHECK((c.finish == "stop" || c.finish == "length"));
    if (c.finish == "stop") ++stop;
    // Even a cut output starts with its own request number.
    std::string head = "{\"req\":" + o.schema["properties"]["req"]["const"].dump();
    CHECK(c.text.substr(0, head.size()) == head);
  }
  for (const Answer& a : free_answers) {
    INFO(a.body.substr(0, 300));
    REQUIRE(a.status == 200);
    CHECK(a.choices.at(0).finish == "length");  // ignore_eos, not constrained: runs to max_tokens
  }
  CHECK(require_valid(runs, "concurrent") == stop);
  CHECK(stop >= 14);
}

TEST_CASE("structured e2e: constrained requests survive preemption and recompute", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  // 64 KV blocks (1024 tokens) for 16 requests of ~150 tokens each: the scheduler preempts
  // and recomputes; the grammar state must survive that, and with the same seeds the outputs
  // equal those of the roomy shared server.
  auto tight = start_server({"--kv-cache-memory", "256KiB", "--max-seqs", "16", "--max-step-ms", "off"});
  const ojson schema = {{"type", "array"},
                        {"items", {{"type", "string"}, {"minLength", 8}, {"maxLength", 8}}},
                        {"minItems", 30},
                        {"maxItems", 30}};
  std::vector<Outcome> runs(32);
  for (size_t i = 0; i < 32; ++i) {
    Outcome& o = runs[i];
    const bool roomy = i >= 16;
    o.label = std::string(roomy ? "roomy " : "tight ") + std::to_string(i % 16) + (i % 2 ? " (stream)" : "");
    o.schema = schema;
    o.request = chat_request("List " + std::to_string(i % 16), kMaxTokens, 600 + i % 16, i % 2);
    o.request["response_format"] = schema_format(schema);
  }
  const int tight_port = tight->port(), roomy_port = server().port();
  parallel_for(32, 32, [&](size_t i) { runs[i].answer = ask(i >= 16 ? roomy_port : tight_port, runs[i].request); });
  for (const Outcome& o : runs) {
    INFO(o.label << ": " << o.answer.body.substr(0, 600));
    REQUIRE(o.answer.status == 200);
    CHECK(o.answer.choices.at(0).finish == "stop");
  }
  CHECK(require_valid(runs, "preemption") == 32);
  const double preemptions = metric_value(http_get(tight_port, "/metrics").body, "pagoda_preemptions_total");
  std::printf("structured e2e: %g preemptions among 16 constrained requests on 64 KV blocks\n", preemptions);
  CHECK(preemptions > 0);
  for (size_t i = 0; i < 16; ++i) {
    INFO(runs[i].label << " vs " << runs[i + 16].label);
    CHECK(runs[i].answer.choices.at(0).text == runs[i + 16].answer.choices.at(0).text);
  }
}

TEST_CASE("structured e2e: n = 2, logprobs, seeded reproducibility", "[e2e][structured][jsonschema]") {
  SKIP_WITHOUT_VALIDATOR();
  const int port = server().port();
  const ojson schema = {{"type", "object"},
                        {"properties", {{"name", {{"type", "string"}, {"maxLength", 6}}},
                                        {"level", {{"type", "integer"}, {"minimum", 1}, {"maximum", 5}}},
                                        {"tags", {{"type", "array"}, {"items", {{"enum", {"a", "b", "c"}}}}, {"maxItems", 2}}}}},
                        {"required", {"name", "level", "tags"}},
                        {"additionalProperties", false}};
  std::vector<Outcome> runs;
  for (int stream = 0; stream < 2; ++stream) {  // n = 2
    Outcome o;
    o.label = std::string("n=2") + (stream ? " (stream)" : "");
    o.schema = schema;
    o.request = chat_request("Two examples.", 200, 42, stream);
    o.request["n"] = 2;
    o.request["response_format"] = schema_format(schema);
    runs.push_back(o);
  }
  {  // logprobs, chat and completions
    Outcome o;
    o.label = "chat logprobs";
    o.schema = schema;
    o.request = chat_request("One example.", 200, 43, false);
    o.request["logprobs"] = true;
    o.request["top_logprobs"] = 3;
    o.request["response_format"] = schema_format(schema);
    runs.push_back(o);
    o.label = "completions logprobs";
    o.request = completion_request("JSON:", 200, 44, false);
    o.request["logprobs"] = 3;
    o.request["response_format"] = schema_format(schema);
    runs.push_back(o);
  }
  for (int k = 0; k < 4; ++k) {  // the same seeded request twice, streamed and not
    Outcome o;
    o.label = "seeded " + std::to_string(k / 2) + (k % 2 ? " (stream)" : "");
    o.schema = schema;
    o.request = chat_request("Again.", 200, 77 + k / 2, k % 2);
    o.request["response_format"] = schema_format(schema);
    runs.push_back(o);
  }
  parallel_for(runs.size(), 8, [&](size_t i) { runs[i].answer = ask(port, runs[i].request); });
  for (const Outcome& o : runs) {
    INFO(o.label << ": " << o.answer.body.substr(0, 1500));
    REQUIRE(o.answer.status == 200);
    REQUIRE(o.answer.choices.size() == (o.request.contains("n") ? 2u : 1u));
    for (const Choice& c : o.answer.choices) CHECK(c.finish == "stop");
  }
  CHECK(require_valid(runs, "n/logprobs/seed") == 10);
  // n = 2: two samples, not one answer twice (a 6-letter name and a level: a tie is unlikely).
  for (int i = 0; i < 2; ++i) CHECK(runs[i].answer.choices[0].text != runs[i].answer.choices[1].text);
  // logprobs describe the masked distribution: finite, <= 0, top alternatives sum to <= 1.
  {
    const json& lp = runs[2].answer.choices[0].logprobs;
    INFO(lp.dump().substr(0, 1500));
    REQUIRE(lp.contains("content"));
    REQUIRE(lp["content"].is_array());
    REQUIRE(!lp["content"].empty());
    std::string joined;
    for (const json& t : lp["content"]) {
      REQUIRE(t["logprob"].is_number());
      double l = t["logprob"].get<double>();
      CHECK(std::isfinite(l));
      CHECK(l <= 1e-6);
      joined += t["token"].get<std::string>();
      double mass = 0;
      for (const json& alt : t["top_logprobs"])  // non-number (masked) entries: the test case below
        if (alt["logprob"].is_number()) mass += std::exp(alt["logprob"].get<double>());
      CHECK(mass <= 1.0 + 1e-3);
    }
    CHECK(joined == runs[2].answer.choices[0].text);
  }
  {
    const json& lp = runs[3].answer.choices[0].logprobs;
    INFO(lp.dump().substr(0, 1500));
    REQUIRE(lp.contains("tokens"));
    std::string joined;
    for (const json& t : lp["tokens"]) joined += t.get<std::string>();
    CHECK(joined == runs[3].answer.choices[0].text);
    for (const json& l : lp["token_logprobs"]) CHECK((l.is_number() && l.get<double>() <= 1e-6));
  }
  // Same seed, same constrained output, streamed or not.
  CHECK(runs[4].answer.choices[0].text == runs[5].answer.choices[0].text);
  CHECK(runs[6].answer.choices[0].text == runs[7].answer.choices[0].text);
}

// A token the grammar masks has probability 0 and is no alternative: when fewer tokens than
// top_logprobs are allowed, fewer are listed (the server once padded the list with masked tokens
// written as {"token": "<unk>", "logprob": null}; fixed in 8135b92).
TEST_CASE("structured e2e: top_logprobs list no grammar-masked token", "[e2e][structured]") {
  const int port = server().port();
  const ojson schema = {{"type", "object"},
                        {"properties", {{"name", {{"type", "string"}, {"maxLength", 6}}},
                                        {"level", {{"type", "integer"}, {"minimum", 1}, {"maximum", 5}}}}},
                        {"required", {"name", "level"}},
                        {"additionalProperties", false}};
  ojson chat = chat_request("One example.", 200, 43, false);
  chat["logprobs"] = true;
  chat["top_logprobs"] = 5;
  chat["response_format"] = schema_format(schema);
  ojson completion = completion_request("JSON:", 200, 44, false);
  completion["logprobs"] = 5;
  completion["response_format"] = schema_format(schema);
  Answer a = ask(port, chat), b = ask(port, completion);
  REQUIRE(a.status == 200);
  REQUIRE(b.status == 200);
  size_t masked = 0, listed = 0;
  for (const json& t : a.choices.at(0).logprobs["content"])
    for (const json& alt : t["top_logprobs"]) {
      ++listed;
      if (!alt["logprob"].is_number()) ++masked;
    }
  for (const json& top : b.choices.at(0).logprobs["top_logprobs"])
    for (const auto& [tok, l] : top.items()) {
      ++listed;
      if (!l.is_number()) ++masked;
    }
  INFO(a.body.substr(0, 1500));
  INFO(b.body.substr(0, 1500));
  INFO(masked << " of " << listed << " alternatives have a non-number logprob");
  CHECK(masked == 0);
}
