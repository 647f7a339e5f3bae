// Fidelity on real weights: ../shared/testdata/models/stories260K.gguf (a trained model, all
// tensors F32) against stories260K.expected.json (llama.cpp's greedy ids and logprobs, f32 KV),
// through `pagoda generate` and through `pagoda serve`, for each KV cache type:
// - f32 KV: all 64 greedy ids of the 8 prompts equal llama.cpp's, each chosen token's logprob
//   within 1e-3 (generate and server);
// - f16 KV: the same ids;
// - q8_0 KV: along the f16 run's text (teacher forcing, so one flip does not change the text
//   that follows), q8_0's greedy choice equals f16's at >= 56 of 64 steps per prompt, and every
//   step where it differs is a near-tie of the f16 run (top-2 gap below twice the largest
//   logprob change q8_0 causes on that text); free-running agreement and the logprob change
//   are printed (docs/performance.md quotes them);
// - f16 K with q8_0 V (--kv-cache-type-v q8_0): free-running, every prompt keeps >= 56 of the
//   f16 run's 64 greedy ids (8-bit K is what moves near-ties; 8-bit V barely does); the ids kept
//   and the logprob change along the f16 text are printed.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/http_test_util.h"
#include "tests/support/test_files.h"
#include "tests/support/testdata.h"

using json = nlohmann::json;
using namespace pagoda::testing;
namespace fs = std::filesystem;

namespace {

const RequiredTestdata needs{"models/stories260K.gguf", "models/stories260K.expected.json"};

std::string model_path() { return testdata_path("models/stories260K.gguf").string(); }

const json& expected() {
  static const json j = json::parse(std::ifstream(testdata_path("models/stories260K.expected.json")));
  return j;
}

struct Generated {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `pagoda generate` greedy, 64 tokens, with --print-tokens: the ids and logprobs it reports.
// `kv_type`: a --kv-cache-type name, or "K/V" names for --kv-cache-type-k / -v ("f16/q8_0").
Generated generate(const std::string& prompt, const std::string& kv_type) {
  const size_t slash = kv_type.find('/');
  const std::string kv_flags = slash == std::string::npos
                                   ? " --kv-cache-type " + kv_type
                                   : " --kv-cache-type-k " + kv_type.substr(0, slash) + " --kv-cache-type-v " +
                                         kv_type.substr(slash + 1);
  const fs::path err = fs::temp_directory_path() / ("pagoda_fid_" + std::to_string(getpid()) + ".err");
  const std::string cmd = std::string("'") + PAGODA_BINARY + "' generate --model " + shell_quote(model_path()) +
                          " --prompt " + shell_quote(prompt) + " -n 64 --ignore-eos --threads 1 --device cpu" +
                          kv_flags + " --print-tokens > /dev/null 2> '" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  const std::string text = read_file(err);
  fs::remove(err);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  Generated g;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("token ", 0) != 0) continue;
    int id = 0;
    double lp = 0;
    REQUIRE(std::sscanf(line.c_str(), "token %d %lf", &id, &lp) == 2);
    g.ids.push_back(id);
    g.logprobs.push_back(lp);
  }
  return g;
}

// `kv_type` as generate() takes it.
std::unique_ptr<ServerProcess> serve(const std::string& kv_type) {
  std::vector<std::string> args{"--model", model_path(), "--threads", "1", "--device", "cpu", "--max-seqs", "4",
                                "--ctx-size", "512", "--kv-cache-memory", "8MiB"};
  const size_t slash = kv_type.find('/');
  if (slash == std::string::npos) {
    args.insert(args.end(), {"--kv-cache-type", kv_type});
  } else {
    args.insert(args.end(),
                {"--kv-cache-type-k", kv_type.substr(0, slash), "--kv-cache-type-v", kv_type.substr(slash + 1)});
  }
  auto s = std::make_unique<ServerProcess>(PAGODA_BINARY, args, free_port());
  REQUIRE(s->wait_ready(60));
  return s;
}

// Teacher forcing through the server: the logprobs (chosen and top 2) of every token of `ids`
// after its prefix (echo + logprobs, nothing generated).
json score(ServerProcess& s, const std::vector<int32_t>& ids) {
  const HttpResult r = http_post(s.port(), "/v1/completions",
                                 json{{"prompt", ids}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 0}});
  REQUIRE(r.status == 200);
  return json::parse(r.body)["choices"][0]["logprobs"];
}

}  // namespace

TEST_CASE("stories260K with an f32 KV cache: llama.cpp's 64 greedy ids and logprobs within 1e-3 (generate)", "[testdata]") {
  double worst = 0;
  for (const auto& c : expected()["cases"]) {
    INFO(c["prompt"].get<std::string>());
    const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    const auto want_lp = c["greedy_logprobs"].get<std::vector<double>>();
    const Generated g = generate(c["prompt"].get<std::string>(), "f32");
    REQUIRE(g.ids == want);
    for (size_t i = 0; i < want_lp.size(); ++i) worst = std::max(worst, std::fabs(g.logprobs[i] - want_lp[i]));
    CHECK(generate(c["prompt"].get<std::string>(), "f16").ids == want);
  }
  WARN("f32 KV: largest logprob difference from llama.cpp " << worst);
  CHECK(worst < 1e-3);
}

TEST_CASE("stories260K with an f32 KV cache through the server: llama.cpp's text and logprobs", "[testdata]") {
  auto s = serve("f32");
  double worst = 0;
  for (const auto& c : expected()["cases"]) {
    INFO(c["prompt"].get<std::string>());
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want_lp = c["greedy_logprobs"].get<std::vector<double>>();
    const HttpResult r = http_post(s->port(), "/v1/completions",
                                   json{{"prompt", prompt}, {"max_tokens", 64}, {"temperature", 0}, {"logprobs", 0},
                                        {"ignore_eos", true}});
    REQUIRE(r.status == 200);
    const json body = json::parse(r.body);
    CHECK(body["usage"]["prompt_tokens"] == prompt.size());
    const json& choice = body["choices"][0];
    CHECK(choice["text"] == c["greedy_text"]);
    const json& lps = choice["logprobs"]["token_logprobs"];
    REQUIRE(lps.size() == 64);
    for (size_t i = 0; i < 64; ++i) worst = std::max(worst, std::fabs(lps[i].get<double>() - want_lp[i]));
    // The ids: scoring llama.cpp's continuation must give, at each step, the id as the top token.
    auto ids = prompt;
    const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), want.begin(), want.end());
    const json scored = score(*s, ids);
    for (size_t i = 0; i < 64; ++i) {
      const size_t at = prompt.size() + i;
      double best = -1e30;
      for (auto& [tok, lp] : scored["top_logprobs"][at].items()) best = std::max(best, lp.get<double>());
      CHECK(scored["token_logprobs"][at].get<double>() == best);
      CHECK(std::fabs(scored["token_logprobs"][at].get<double>() - want_lp[i]) < 1e-3);
    }
  }
  WARN("f32 KV through the server: largest logprob difference from llama.cpp " << worst);
  CHECK(worst < 1e-3);
}

TEST_CASE("stories260K with a q8_0 KV cache follows the f16 one except at near-ties", "[testdata]") {
  auto f16 = serve("f16"), q8 = serve("q8_0");
  for (const auto& c : expected()["cases"]) {
    const std::string prompt_text = c["prompt"].get<std::string>();
    INFO(prompt_text);
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const Generated g16 = generate(prompt_text, "f16"), g8 = generate(prompt_text, "q8_0");
    REQUIRE(g16.ids.size() == 64);
    REQUIRE(g8.ids.size() == 64);
    int free_same = 0, common_prefix = 0;
    for (size_t i = 0; i < 64; ++i) free_same += g16.ids[i] == g8.ids[i];
    while (common_prefix < 64 && g16.ids[size_t(common_prefix)] == g8.ids[size_t(common_prefix)]) ++common_prefix;

    // Teacher forcing along the f16 run.
    auto ids = prompt;
    ids.insert(ids.end(), g16.ids.begin(), g16.ids.end());
    const json a = score(*f16, ids), b = score(*q8, ids);
    double max_change = 0;
    for (size_t i = 1; i < ids.size(); ++i)
      max_change = std::max(max_change, std::fabs(a["token_logprobs"][i].get<double>() - b["token_logprobs"][i].get<double>()));
    int forced_same = 0;
    for (size_t i = 0; i < 64; ++i) {
      const size_t at = prompt.size() + i;
      // The step's f16 choice is ids[at]; q8_0's is its top token at the same position.
      std::string top8;
      double best8 = -1e30;
      for (auto& [tok, lp] : b["top_logprobs"][at].items())
        if (lp.get<double>() > best8) best8 = lp.get<double>(), top8 = tok;
      const bool same = b["token_logprobs"][at].get<double>() >= best8;
      forced_same += same;
      if (same) continue;
      std::vector<double> top16;
      for (auto& [tok, lp] : a["top_logprobs"][at].items()) top16.push_back(lp.get<double>());
      REQUIRE(top16.size() >= 2);
      std::sort(top16.rbegin(), top16.rend());
      INFO("step " << i << ": f16 top-2 gap " << top16[0] - top16[1] << ", largest logprob change " << max_change);
      CHECK(top16[0] - top16[1] < 2 * max_change);
    }
    WARN(prompt_text << ": q8_0 vs f16 KV: teacher-forced " << forced_same << "/64 same, free-running "
                     << free_same << "/64 same (" << common_prefix << " before the first difference), largest logprob change "
                     << max_change);
    CHECK(forced_same >= 56);
    CHECK(max_change < 0.5);
  }
}

TEST_CASE("stories260K with f16 K and q8_0 V keeps >= 56 of the f16 run's 64 greedy ids on every prompt", "[testdata]") {
  auto f16 = serve("f16"), mixed = serve("f16/q8_0");
  int fewest = 64, all_kept = 0;
  double largest_change = 0;
  for (const auto& c : expected()["cases"]) {
    const std::string prompt_text = c["prompt"].get<std::string>();
    INFO(prompt_text);
    const Generated g16 = generate(prompt_text, "f16"), gm = generate(prompt_text, "f16/q8_0");
    REQUIRE(g16.ids.size() == 64);
    REQUIRE(gm.ids.size() == 64);
    int same = 0;
    for (size_t i = 0; i < 64; ++i) same += g16.ids[i] == gm.ids[i];
    // The chosen tokens' logprob change along the f16 text (teacher forcing).
    auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), g16.ids.begin(), g16.ids.end());
    const json a = score(*f16, ids), b = score(*mixed, ids);
    double change = 0;
    for (size_t i = 1; i < ids.size(); ++i)
      change = std::max(change, std::fabs(a["token_logprobs"][i].get<double>() - b["token_logprobs"][i].get<double>()));
    WARN(prompt_text << ": f16 K + q8_0 V vs f16 KV: free-running " << same << "/64 same, largest logprob change "
                     << change);
    fewest = std::min(fewest, same);
    all_kept += same == 64;
    largest_change = std::max(largest_change, change);
    CHECK(same >= 56);
  }
  WARN("f16 K + q8_0 V: fewest ids kept " << fewest << "/64, prompts with all 64: " << all_kept
                                          << ", largest logprob change " << largest_change);
}
