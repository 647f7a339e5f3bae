// `pagoda serve --speculative` end to end on a real trained model
// (../shared/testdata/models/stories260K.gguf): greedy completions of the 8 prompts of
// stories260K.expected.json with n-gram drafts and with the model drafting for itself equal the
// non-speculative text (f16 KV gives llama.cpp's ids, test_stories_fidelity), alone and as 16
// concurrent requests, half of them opting out ("speculative": false); /metrics counts the
// drafts by drafter, each request's usage its accepted and rejected drafts
// (completion_tokens_details), and every KV block (the model's and the draft model's) comes back.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/http_test_util.h"
#include "tests/support/testdata.h"

using json = nlohmann::json;
using namespace pagoda::testing;

namespace {

const RequiredTestdata needs{"models/stories260K.gguf", "models/stories260K.expected.json"};

const json& cases() {
  static const json j = json::parse(std::ifstream(testdata_path("models/stories260K.expected.json")))["cases"];
  return j;
}

std::unique_ptr<ServerProcess> serve(std::vector<std::string> spec_flags) {
  const std::string model = testdata_path("models/stories260K.gguf").string();
  std::vector<std::string> args{"--model", model, "--threads", "1", "--device", "cpu", "--max-seqs", "16",
                                "--ctx-size", "256", "--kv-cache-memory", "8MiB", "--spec-tokens", "4"};
  args.insert(args.end(), spec_flags.begin(), spec_flags.end());
  auto s = std::make_unique<ServerProcess>(PAGODA_BINARY, args, free_port());
  REQUIRE(s->wait_ready(60));
  return s;
}

// The greedy 64-token completion of case `c`; empty on an HTTP error. `details`: the usage's
// completion_tokens_details (accepted / rejected drafts; null when nothing was drafted).
std::string complete(int port, const json& c, bool speculative, json* details = nullptr) {
  json body{{"prompt", c["prompt_ids"]}, {"max_tokens", 64}, {"temperature", 0}, {"ignore_eos", true}};
  if (!speculative) body["speculative"] = false;
  const HttpResult r = http_post(port, "/v1/completions", body);
  if (r.status != 200) return "";
  const json j = json::parse(r.body);
  if (details) *details = j["usage"].value("completion_tokens_details", json());
  return j["choices"][0]["text"].get<std::string>();
}

double metric(ServerProcess& s, const std::string& name) {
  return metric_value(http_get(s.port(), "/metrics").body, name);
}

// The 8 prompts one by one, then 16 at once (odd ones not speculating): all the plain text.
// `batch_speculates`: the 16 must verify drafts too (the cost gate off).
void check_greedy_equivalence(ServerProcess& s, bool batch_speculates) {
  const double blocks_before = metric(s, "pagoda_kv_blocks_used");
  double usage_drafted = 0, usage_accepted = 0;
  for (const auto& c : cases()) {
    INFO(c["prompt"].get<std::string>());
    json details;
    CHECK(complete(s.port(), c, true, &details) == c["greedy_text"].get<std::string>());
    if (details.is_null()) continue;
    usage_accepted += details["accepted_prediction_tokens"].get<double>();
    usage_drafted += details["accepted_prediction_tokens"].get<double>() + details["rejected_prediction_tokens"].get<double>();
  }
  // The requests' usage adds up to the engine's counters (nothing else ran yet; the counters
  // are published at the end of the step that answered the last request).
  CHECK(wait_for([&] { return usage_drafted == metric(s, "pagoda_spec_draft_tokens_total"); }, 5));
  CHECK(usage_accepted == metric(s, "pagoda_spec_accepted_tokens_total"));
  const double verified_alone = metric(s, "pagoda_spec_verify_steps_total");
  CHECK(verified_alone > 0);
  std::vector<std::string> got(16);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < got.size(); ++i)
    clients.emplace_back([&, i] { got[i] = complete(s.port(), cases()[i % 8], i % 2 == 0); });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("concurrent request " << i << (i % 2 == 0 ? " (speculating)" : " (not speculating)"));
    CHECK(got[i] == cases()[i % 8]["greedy_text"].get<std::string>());
  }
  if (batch_speculates) CHECK(metric(s, "pagoda_spec_verify_steps_total") > verified_alone);
  // Every block comes back (a request's blocks are freed on the engine's next step).
  CHECK(wait_for([&] { return metric(s, "pagoda_kv_blocks_used") == blocks_before; }, 5));
  CHECK(wait_for([&] { return metric(s, "pagoda_spec_draft_kv_blocks_used") == 0; }, 5));
}

}  // namespace

TEST_CASE("serve --speculative ngram: the plain greedy text, alone and 16 at once", "[testdata]") {
  // The cost gate off: a 16-sequence batch of this tiny model is compute-bound, and the point
  // here is that speculating and plain sequences share steps correctly.
  auto s = serve({"--speculative", "ngram", "--spec-cost-gate", "off"});
  check_greedy_equivalence(*s, true);
  const std::string text = http_get(s->port(), "/metrics").body;
  CHECK(text.find("pagoda_spec_draft_tokens_total{model_name=") != std::string::npos);
  CHECK(text.find(",drafter=\"ngram\"} ") != std::string::npos);
  CHECK(metric_value(text, "pagoda_spec_accepted_tokens_total") <= metric_value(text, "pagoda_spec_draft_tokens_total"));
}

TEST_CASE("serve --speculative draft with the model as its own draft: the plain text, drafts accepted", "[testdata]") {
  const std::string model = testdata_path("models/stories260K.gguf").string();
  auto s = serve({"--speculative", "draft", "--draft-model", model});  // the cost gate on
  check_greedy_equivalence(*s, false);
  const std::string text = http_get(s->port(), "/metrics").body;
  CHECK(text.find(",drafter=\"draft\"} ") != std::string::npos);
  const double drafted = metric_value(text, "pagoda_spec_draft_tokens_total");
  const double accepted = metric_value(text, "pagoda_spec_accepted_tokens_total");
  CHECK(accepted > 0);
  // The same weights draft and verify: nearly every draft is the target's own greedy choice.
  CHECK(accepted >= 0.9 * drafted);
}
