#include "server/bench/bench_options.h"

#include "server/bench/slo.h"

#include <cstdio>
#include <stdexcept>
#include <string>

namespace pagoda::bench {
namespace {

const char* kHelp = R"(usage: pagoda bench [options]
Load-tests an OpenAI-compatible server (pagoda, vLLM, llama.cpp server) over streaming HTTP.

target:
  --url URL               server base URL (default http://127.0.0.1:8080)
  --compare URL           a second server (B) run with the same workload; the load points
                          alternate A, B, A, B and the report shows both with B/A ratios
  --api-key KEY           Bearer key
  --model NAME            model name (default: first of GET /v1/models)
  --endpoint chat|completions   (default chat)
load (closed loop unless --rate):
  --users N               simulated users, each waits for its reply (default 1)
  --think-time S          mean pause between a user's requests, exponential (default 0)
  --rate R                open loop: Poisson arrivals, R requests/s
  --max-concurrency N     open loop: cap on requests in flight (default 512)
  --requests N            total requests (default 100 unless --duration)
  --duration S            stop issuing new requests after S seconds
  --timeout S             per-request timeout (default 600)
  --sweep KEY=V1,V2,...   one run per value; KEY is users or rate
  --warmup N              N requests to each server first, not counted (default 0)
goodput:
  --slo LIST              objectives METRIC[:pNN]=LIMIT, comma-separated; METRIC is ttft, itl,
                          tpot or e2e, pNN the percentile (default p90), LIMIT a time with a
                          unit (us, ms, s), e.g. --slo ttft=500ms,itl:p99=50ms. Reports the
                          share of requests and the output tokens/s within every limit, per
                          point, and the highest load whose percentiles all met them
workload:
  --input-len N           prompt words (default 128)
  --output-len N          max_tokens (default 128)
  --len-spread F          lengths uniform in [len*(1-F), len*(1+F)] (default 0)
  --system-prompt-len N   shared system prompt words (default 0)
  --no-ignore-eos         let the model stop early (default: ignore_eos=true)
  --prompts FILE.jsonl    prompts from a file: {"prompt": ...} or {"messages": [...]}; other
                          fields of a line (max_tokens, response_format, ...) go into its request
  --sharegpt FILE.json    prompts from a ShareGPT-format file: each conversation's first
                          human turn, with max_tokens from the length of its reply
                          (characters / 4)
  --seed N                workload seed (default 1)
output:
  --json FILE             machine-readable report with every request's timings ("-" for
                          stdout); `pagoda bench report A.json B.json` draws two side by side
  --html FILE             self-contained HTML report with plots
  --no-progress           no live progress line
)";

double to_double(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    double d = std::stod(v, &pos);
    if (pos != v.size()) throw std::invalid_argument("");
    return d;
  } catch (const std::exception&) {
    throw std::invalid_argument(flag + " expects a number, got '" + v + "'");
  }
}

int to_int(const std::string& flag, const std::string& v) {
  double d = to_double(flag, v);
  if (d != static_cast<int>(d)) throw std::invalid_argument(flag + " expects an integer, got '" + v + "'");
  return static_cast<int>(d);
}

}  // namespace

bool parse_bench_options(int argc, char** argv, BenchOptions& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kHelp, stdout);
      return false;
    } else if (a == "--url") {
      o.url = value();
      while (!o.url.empty() && o.url.back() == '/') o.url.pop_back();
    } else if (a == "--api-key") o.api_key = value();
    else if (a == "--model") o.model = value();
    else if (a == "--compare") {
      o.compare_url = value();
      while (!o.compare_url.empty() && o.compare_url.back() == '/') o.compare_url.pop_back();
    } else if (a == "--warmup") o.warmup = to_int(a, value());
    else if (a == "--slo") {
      o.slo_spec = value();
      parse_slo(o.slo_spec);  // throws with the reason
    }
    else if (a == "--endpoint") {
      const std::string v = value();
      if (v == "chat") o.endpoint = Endpoint::Chat;
      else if (v == "completions") o.endpoint = Endpoint::Completions;
      else throw std::invalid_argument("--endpoint must be chat or completions");
    } else if (a == "--users") o.users = to_int(a, value());
    else if (a == "--think-time") o.think_time_s = to_double(a, value());
    else if (a == "--rate") o.rate = to_double(a, value());
    else if (a == "--max-concurrency") o.max_concurrency = to_int(a, value());
    else if (a == "--requests") o.requests = to_int(a, value());
    else if (a == "--duration") o.duration_s = to_double(a, value());
    else if (a == "--timeout") o.request_timeout_s = to_double(a, value());
    else if (a == "--input-len") o.input_len = to_int(a, value());
    else if (a == "--output-len") o.output_len = to_int(a, value());
    else if (a == "--len-spread") o.len_spread = to_double(a, value());
    else if (a == "--system-prompt-len") o.system_prompt_len = to_int(a, value());
    else if (a == "--no-ignore-eos") o.ignore_eos = false;
    else if (a == "--prompts") o.prompts_file = value();
    else if (a == "--sharegpt") o.sharegpt_file = value();
    else if (a == "--seed") o.seed = static_cast<uint64_t>(to_double(a, value()));
    else if (a == "--json") o.json_path = value();
    else if (a == "--html") o.html_path = value();
    else if (a == "--no-progress") o.progress = false;
    else if (a == "--sweep") {
      const std::string v = value();
      const auto eq = v.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("--sweep expects KEY=V1,V2,...");
      o.sweep_key = v.substr(0, eq);
      if (o.sweep_key != "users" && o.sweep_key != "rate")
        throw std::invalid_argument("--sweep key must be users or rate");
      std::string list = v.substr(eq + 1);
      for (size_t start = 0; start <= list.size();) {
        size_t end = list.find(',', start);
        if (end == std::string::npos) end = list.size();
        o.sweep_values.push_back(to_double("--sweep", list.substr(start, end - start)));
        start = end + 1;
      }
    } else {
      throw std::invalid_argument("unknown option " + a + " (see pagoda bench --help)");
    }
  }
  if (o.users < 1) throw std::invalid_argument("--users must be at least 1");
  if (o.rate < 0) throw std::invalid_argument("--rate must be positive");
  if (o.requests < 0 || o.duration_s < 0) throw std::invalid_argument("--requests/--duration must be positive");
  if (o.input_len < 1 || o.output_len < 1) throw std::invalid_argument("--input-len/--output-len must be at least 1");
  if (o.len_spread < 0 || o.len_spread >= 1) throw std::invalid_argument("--len-spread must be in [0, 1)");
  if (!o.prompts_file.empty() && !o.sharegpt_file.empty())
    throw std::invalid_argument("--prompts and --sharegpt are two sources of prompts: pass one");
  if (o.warmup < 0) throw std::invalid_argument("--warmup must be 0 or more");
  if (!o.compare_url.empty() && o.compare_url == o.url)
    throw std::invalid_argument("--compare names the same server as --url");
  if (o.max_concurrency < 1) throw std::invalid_argument("--max-concurrency must be at least 1");
  for (double v : o.sweep_values)
    if (v <= 0) throw std::invalid_argument("--sweep values must be positive");
  return true;
}

}  // namespace pagoda::bench
