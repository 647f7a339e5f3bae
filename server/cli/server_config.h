// Every `pagoda serve` setting, from a JSON config file (--config) and command-line flags; flags
// win. Each option has one flag `--some-name` and the same JSON key with underscores
// (`some_name`), so the two can never drift apart.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pagoda::server {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ServerConfig {
  // model and engine
  std::string model = "models/demo.gguf";
  std::string served_model_name;     // comma-separated names (the first is the main one);
                                     // empty: the model file's stem
  std::string device = "auto";       // cpu | cuda | auto
  std::string cpu_decode_pack = "auto";  // auto | on | off (CpuBackend's DecodePack)
  std::string cuda_weights = "quantized";  // CUDA: quantized matrices kept quantized | bf16
  std::string cuda_quant_gemm = "mma";     // CUDA: quantized GEMMs of 9+ rows: mma | cublas
  std::string cuda_prefill_attention = "mma";  // CUDA: prefill chunks' attention: mma | exact
  bool cuda_graphs = true;           // CUDA: replay decode steps as CUDA graphs (off: every
                                     // step launches its kernels one by one)
  bool cuda_batch_invariant = false; // CUDA: a sequence's logits do not depend on its batch
  int threads = 0;                   // CPU threads; 0 = all cores
  int max_seqs = 64;                 // sequences per step
  int max_batch_tokens = 2048;       // tokens per step
  std::string max_step_ms = "auto";  // step-time target beside decodes: auto | off | ms
  int max_tokens_limit = 0;          // largest max_tokens accepted; 0 = the context size
  int ctx_size = 0;                  // per-sequence context; 0 = the model's training context
  std::string kv_cache_memory;       // e.g. "512MiB", "2GB", bytes; empty = engine default
  double gpu_memory_fraction = 0.9;  // CUDA: weights + activations + KV cache stay within this
                                     // share of the device's memory (ignored with kv_cache_memory)
  int block_size = 16;               // tokens per KV block
  std::string kv_cache_type = "f16"; // KV cache elements, K and V: f16 | f32 | q8_0
  std::string kv_cache_type_k;       // K's alone, overriding kv_cache_type (empty: kv_cache_type)
  std::string kv_cache_type_v;       // V's alone, likewise
  std::string system_prompt_file;    // prefilled once at start and pinned
  std::string kv_cache_dir;          // the prefix cache's disk file lives here; empty = off
  std::string kv_cache_dir_size = "4GiB";  // the most that file may take
  std::string kv_host_memory = "auto";  // host memory for evicted prefix blocks: auto | off | a size, e.g. "2GiB"
  bool context_shift = true;         // on | off
  std::string kv_events;             // tcp://HOST:PORT: publish prefix-cache events there (ZeroMQ); empty = off
  std::string kv_events_topic;       // their topic; empty = kv@HOSTNAME@MODEL, as llm-d's indexer expects
  std::string kv_events_hash_seed;   // the indexer's hash seed (vLLM's PYTHONHASHSEED), "" by default
  std::string speculative = "none";  // speculative decoding drafter: none | ngram | draft
  int spec_tokens = 4;               // drafted tokens per sequence and step at most
  int spec_tree = 1;                 // branches at the draft tree's first two depths (1: a chain)
  std::string draft_model;           // GGUF draft model for speculative = draft
  bool spec_cost_gate = true;        // draft only what the step-cost model says pays (on | off)
  bool forced_tokens = true;         // structured output: append grammar-forced tokens without decode steps (on | off)
  std::string chat_template;         // a Jinja template file overriding the model's own
  bool chat_special_tokens = false;  // message text may spell control tokens (off: plain text)
  std::string tool_call_parser = "auto";  // auto | hermes | llama3 | mistral | none
  std::string pooling = "mean";      // embeddings when the GGUF names no pooling: mean | cls | last
  std::string reasoning_parser = "auto";  // auto | deepseek_r1 | qwen3 | none
  int responses_store = 1000;        // Responses API: responses kept (LRU); 0 = none
  int64_t responses_store_bytes = 64 << 20;  // ... and the bytes they may take
  // LoRA adapters
  std::vector<std::string> lora;     // NAME=PATH, loaded at start (repeatable)
  int max_loras = 4;                 // adapters loaded at once (they all may share a batch)
  int max_lora_rank = 64;            // largest rank an adapter may have
  bool allow_runtime_lora = false;   // POST /v1/load_lora_adapter and /v1/unload_lora_adapter
  // HTTP
  std::string host = "127.0.0.1";    // loopback by default: exposing the port is a choice
  int port = 8080;
  std::string api_key;
  std::string api_key_file;          // first line is the key
  int max_queue = 256;               // sequences allowed to wait beyond max_seqs; then 429
  double timeout = 600;              // seconds per request; 0 = none
  std::string cors_origins = "*";    // comma-separated origins; empty = no CORS headers
  int64_t max_body_bytes = 8 << 20;  // larger bodies get 413
  int http_threads = 0;              // HTTP worker threads; 0 = max_seqs + max_queue + 8
  int max_connections = 4096;        // open client connections; beyond: idle ones closed, else 503
  double header_timeout = 10;        // seconds to receive a request's headers (then 408)
  double body_min_rate = 1024;       // bytes/s a request body must average (then 408); 0 = none
  double keep_alive_timeout = 60;    // seconds an idle keep-alive connection stays open
  int64_t max_buffered_body_bytes = 0;  // body bytes held at once (more waits); 0 = 4 x max_body
  double shutdown_grace = 10;        // seconds to finish in-flight requests on SIGINT/SIGTERM
  double health_stall = 60;          // /health turns 503 when a step with work takes longer
  // logging
  std::string log_format = "text";   // text | json
  std::string log_level = "info";    // trace | debug | info | warn | error

  // The key the server checks: api_key, or the first line of api_key_file. Empty = no auth.
  std::string resolve_api_key() const;
  // max_step_ms for EngineConfig: 0 = auto, -1 = off, else the milliseconds.
  double step_ms_target() const;
  // kv_cache_memory in bytes (0 = unset). Accepts 123, "123", "512MiB", "2GB", "1.5G".
  int64_t kv_cache_bytes() const;
  // kv_cache_dir_size in bytes, the same way (0 = unset).
  int64_t kv_cache_dir_bytes() const;
  // kv_host_memory in bytes: -1 for auto (the engine sizes it, host_kv_tier.h), 0 for off or "".
  int64_t kv_host_bytes() const;
  // The element type names K and V get: kv_cache_type_k / _v where set, else kv_cache_type.
  const std::string& kv_type_k_name() const { return kv_cache_type_k.empty() ? kv_cache_type : kv_cache_type_k; }
  // The --lora entries as (name, path); throws ConfigError for one not of the form NAME=PATH.
  std::vector<std::pair<std::string, std::string>> lora_adapters() const;
  // Model slots the engine keeps for adapters: 0 when none is given and runtime loading is off.
  int engine_max_loras() const { return lora.empty() && !allow_runtime_lora ? 0 : max_loras; }
  const std::string& kv_type_v_name() const { return kv_cache_type_v.empty() ? kv_cache_type : kv_cache_type_v; }
};

// Parses argv (argv[0] is the subcommand). Reads --config first, then applies every flag.
// Throws ConfigError naming the flag or key at fault. Sets `help` when --help was given.
ServerConfig parse_server_config(int argc, char** argv, bool* help);

// Applies a JSON object of settings to `cfg` (unknown keys are errors: a typo must not be
// silently ignored).
void apply_config_json(const std::string& json_text, const std::string& source, ServerConfig& cfg);

// The --help text listing every option with its default.
std::string server_usage();

}  // namespace pagoda::server
