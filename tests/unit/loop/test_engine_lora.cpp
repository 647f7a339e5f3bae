// LoRA adapters through the engine: a request under an adapter decodes exactly what the merged
// model decodes; the prefix cache never hands a request blocks computed under another adapter
// (or the base model) but does reuse its own adapter's; base and adapter requests running
// together give each its output alone; an adapter unloaded while a request uses it lets that
// request finish, refuses new ones, and its slot serves the next load once the request is
// gone; reloading gives the same outputs; refusals carry their codes; the stats (the gateway's
// vllm:lora_requests_info) name the adapters with running and with waiting requests.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/lora/lora_writer.h"
#include "tests/unit/loop/engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pagoda_test_engine_lora_" + name)).string();
}

struct Files {
  std::vector<std::string> adapters, merged;
  explicit Files(const gguf::GgufFile& base, int n) {
    for (int i = 0; i < n; ++i) {
      LoraSpec spec;
      spec.rank = 8 * (i + 1);
      spec.seed = 100 + uint64_t(i);
      spec.projections = parse_lora_projections("q,k,v,o,gate,up,down,output");
      adapters.push_back(temp_path("ad" + std::to_string(i) + ".gguf"));
      merged.push_back(temp_path("merged" + std::to_string(i) + ".gguf"));
      write_random_lora(base, spec, adapters.back(), merged.back());
    }
  }
  ~Files() {
    std::error_code ec;
    for (const auto& p : adapters) std::filesystem::remove(p, ec);
    for (const auto& p : merged) std::filesystem::remove(p, ec);
  }
};

GenerationRequest greedy(const std::vector<int32_t>& prompt, const std::string& lora, int max_tokens = 8) {
  GenerationRequest r;
  r.prompt = prompt;
  r.lora = lora;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

RequestResult run_one(LlmEngine& e, const GenerationRequest& r) { return collect(*submit_or_throw(e, r)); }

EngineConfig lora_config(int max_loras) {
  EngineConfig c = tiny_engine_config(64);
  c.kv_types = GgmlType::F32;
  c.kv_cache_memory = 64 * load_model(tiny_model(), 8)->kv_block_bytes(16, GgmlType::F32);
  c.max_loras = max_loras;
  return c;
}

}  // namespace

TEST_CASE("an adapter's request decodes the merged model's tokens; its cached blocks are its own") {
  Files files(tiny_model(), 1);
  auto model = load_model(tiny_model());
  LlmEngine engine(*model, nullptr, lora_config(2));
  REQUIRE(engine.load_lora("a", files.adapters[0]).ok);
  const std::vector<int32_t> prompt = random_tokens(40, 3);

  const RequestResult base = run_one(engine, greedy(prompt, ""));
  const RequestResult first = run_one(engine, greedy(prompt, "a"));
  CHECK(first.usage.cached_prompt_tokens == 0);  // the base model's two full blocks are not its
  const RequestResult again = run_one(engine, greedy(prompt, "a"));
  CHECK(again.usage.cached_prompt_tokens == 32);  // its own are
  CHECK(again.choices[0].tokens == first.choices[0].tokens);
  const RequestResult base_again = run_one(engine, greedy(prompt, ""));
  CHECK(base_again.usage.cached_prompt_tokens == 32);
  CHECK(base_again.choices[0].tokens == base.choices[0].tokens);

  const gguf::GgufFile mf = gguf::GgufFile::open(files.merged[0]);
  auto merged_model = load_model(mf);
  LlmEngine merged(*merged_model, nullptr, lora_config(0));
  const RequestResult want = run_one(merged, greedy(prompt, ""));
  CHECK(first.choices[0].tokens == want.choices[0].tokens);
  CHECK(base.choices[0].tokens != want.choices[0].tokens);
}

TEST_CASE("base and adapter requests in one batch each get their output alone") {
  Files files(tiny_model(), 3);
  auto model = load_model(tiny_model());
  LlmEngine engine(*model, nullptr, lora_config(3));
  const std::vector<std::string> names = {"", "a", "b", "c"};
  for (int i = 0; i < 3; ++i) REQUIRE(engine.load_lora(names[size_t(i) + 1], files.adapters[size_t(i)]).ok);
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < names.size(); ++i) {
    reqs.push_back(greedy(random_tokens(20 + 5 * int(i), 10 + i), names[i], 12));
    reqs.back().sampling.logprobs = 2;
  }
  std::vector<RequestResult> alone;
  for (const auto& r : reqs) alone.push_back(run_one(engine, r));
  // Different prompts, so nothing comes from the prefix cache that alone did not also compute.
  auto streams = submit_all(engine, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i << " (adapter '" << names[i] << "')");
    const RequestResult together = collect(*streams[i]);
    CHECK(together.choices[0] == alone[i].choices[0]);  // tokens and logprob bits
  }
}

TEST_CASE("unloading under traffic: running requests finish, new ones are refused, the slot comes back") {
  Files files(tiny_model(), 2);
  auto model = load_model(tiny_model());
  LlmEngine engine(*model, nullptr, lora_config(1));
  REQUIRE(engine.load_lora("a", files.adapters[0]).ok);
  const std::vector<int32_t> prompt = random_tokens(24, 5);
  const RequestResult reference = run_one(engine, greedy(prompt, "a", 48));

  auto running = submit_or_throw(engine, greedy(prompt, "a", 48));
  REQUIRE(engine.unload_lora("a").ok);
  CHECK(engine.lora_adapters().empty());
  SubmitError err;
  CHECK(engine.submit(greedy(prompt, "a"), &err) == nullptr);
  CHECK(err.code == "model_not_found");
  const RequestResult finished = collect(*running);
  CHECK(finished.choices[0].finish == FinishReason::Length);
  CHECK(finished.choices[0].tokens == reference.choices[0].tokens);
  running.reset();
  CHECK(engine.unload_lora("a").code == "lora_not_found");

  // The one slot is free again once the request is gone: another adapter, then "a" reloaded.
  LoraOpResult r = engine.load_lora("b", files.adapters[1]);
  for (int i = 0; i < 100 && !r.ok; ++i) {  // the stream's last reference may still be in flight
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = engine.load_lora("b", files.adapters[1]);
  }
  REQUIRE(r.ok);
  CHECK(engine.load_lora("a", files.adapters[0]).code == "lora_slots_full");
  REQUIRE(engine.unload_lora("b").ok);
  r = engine.load_lora("a", files.adapters[0]);
  for (int i = 0; i < 100 && !r.ok; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = engine.load_lora("a", files.adapters[0]);
  }
  REQUIRE(r.ok);
  CHECK(run_one(engine, greedy(prompt, "a", 48)).choices[0].tokens == reference.choices[0].tokens);
}

TEST_CASE("load refusals carry their codes; an engine without slots serves no adapters") {
  Files files(tiny_model(), 1);
  auto model = load_model(tiny_model());
  {
    LlmEngine engine(*model, nullptr, lora_config(1));
    const std::string not_adapter = temp_path("not_adapter.gguf");
    write_model(ModelSpec{}, not_adapter, {}, 1);
    const LoraOpResult bad = engine.load_lora("x", not_adapter);
    std::filesystem::remove(not_adapter);
    CHECK(bad.code == "lora_invalid");
    CHECK_THAT(bad.error, Catch::Contains("general.type"));
    REQUIRE(engine.load_lora("a", files.adapters[0]).ok);
    CHECK(engine.load_lora("a", files.adapters[0]).code == "lora_exists");
    CHECK(engine.load_lora("b", files.adapters[0]).code == "lora_slots_full");
    REQUIRE(engine.lora_adapters().size() == 1);
    CHECK(engine.lora_adapters()[0].path == files.adapters[0]);
    CHECK(engine.stats().max_loras == 1);
  }
  LlmEngine off(*model, nullptr, lora_config(0));
  CHECK(off.load_lora("a", files.adapters[0]).code == "lora_unsupported");
}

TEST_CASE("the stats name the adapters whose requests run and those whose requests wait") {
  Files files(tiny_model(), 2);
  auto model = load_model(tiny_model());
  EngineConfig c = lora_config(2);
  c.max_seqs = 1;  // one runs, the other waits
  LlmEngine engine(*model, nullptr, c);
  REQUIRE(engine.load_lora("a", files.adapters[0]).ok);
  REQUIRE(engine.load_lora("b", files.adapters[1]).ok);
  auto streams = submit_all(engine, {greedy(random_tokens(20, 1), "a", 300), greedy(random_tokens(20, 2), "b", 300)});
  // Until the first is running and the second waits (bounded: 10 s).
  EngineStats st;
  for (int i = 0; i < 100000; ++i) {
    st = engine.stats();
    if (st.running == 1 && st.waiting == 1) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  REQUIRE(st.running == 1);
  REQUIRE(st.waiting == 1);
  CHECK(st.max_loras == 2);
  REQUIRE(st.running_lora_adapters.size() == 1);
  REQUIRE(st.waiting_lora_adapters.size() == 1);
  // Each adapter in the list its request's state puts it in (the scheduler picks the order).
  CHECK(st.running_lora_adapters[0] != st.waiting_lora_adapters[0]);
  for (const auto& n : {st.running_lora_adapters[0], st.waiting_lora_adapters[0]}) CHECK((n == "a" || n == "b"));
  for (auto& s : streams) collect(*s);
  for (int i = 0; i < 1000 && engine.stats().running; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  st = engine.stats();
  CHECK(st.running_lora_adapters.empty());
  CHECK(st.waiting_lora_adapters.empty());
}
