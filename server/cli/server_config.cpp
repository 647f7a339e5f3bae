#include "server/cli/server_config.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace pagoda::server {

namespace {

using nlohmann::json;

enum class Kind { Str, Int, Int64, Num, Bool, List };

// One setting: its JSON key, the field it sets (exactly one member pointer is non-null).
struct Option {
  const char* name;  // JSON key; the flag is the same with '-' for '_'
  Kind kind;
  std::string ServerConfig::*str = nullptr;
  int ServerConfig::*i32 = nullptr;
  int64_t ServerConfig::*i64 = nullptr;
  double ServerConfig::*num = nullptr;
  bool ServerConfig::*boolean = nullptr;
  std::vector<std::string> ServerConfig::*list = nullptr;  // repeatable: each use adds an entry
  const char* help = "";
  const char* choices = nullptr;  // for strings: "a|b|c"
  // Other spellings of the flag, as vLLM and llama-server users type them ("-m|--max-model-len"):
  // flags only; config files use the one key.
  const char* aliases = nullptr;
  const char* note = nullptr;     // --help: where an alias means something else elsewhere
};

// The same option, with flag aliases (and a note on them for --help).
Option alias(Option o, const char* aliases, const char* note = nullptr) {
  o.aliases = aliases;
  o.note = note;
  return o;
}

Option make(const char* name, std::string ServerConfig::*f, const char* help,
            const char* choices = nullptr) {
  Option o{name, Kind::Str};
  o.str = f, o.help = help, o.choices = choices;
  return o;
}
Option make(const char* name, int ServerConfig::*f, const char* help) {
  Option o{name, Kind::Int};
  o.i32 = f, o.help = help;
  return o;
}
Option make(const char* name, int64_t ServerConfig::*f, const char* help) {
  Option o{name, Kind::Int64};
  o.i64 = f, o.help = help;
  return o;
}
Option make(const char* name, double ServerConfig::*f, const char* help) {
  Option o{name, Kind::Num};
  o.num = f, o.help = help;
  return o;
}
Option make(const char* name, bool ServerConfig::*f, const char* help) {
  Option o{name, Kind::Bool};
  o.boolean = f, o.help = help;
  return o;
}

Option make(const char* name, std::vector<std::string> ServerConfig::*f, const char* help) {
  Option o{name, Kind::List};
  o.list = f, o.help = help;
  return o;
}

// The kind of an option follows from its field's type (the make overloads above).
#define OPT(field, ...) make(#field, &ServerConfig::field, __VA_ARGS__)

const std::vector<Option>& options() {
  static const std::vector<Option> opts = {
      alias(OPT(model, "GGUF model file (also the first positional argument)"), "-m"),
      OPT(served_model_name,
          "model name(s) in the API, comma-separated aliases; others get 404 (empty: the file stem)"),
      OPT(device, "compute device", "cpu|cuda|auto"),
      OPT(cuda_graphs, "CUDA: replay decode and speculative verify steps as CUDA graphs (on|off)"),
      OPT(cuda_batch_invariant,
          "CUDA: a sequence's logits get the same bits whatever else shares its step and however its prompt "
          "is chunked (quantized and bf16 weights; on|off)"),
      OPT(cuda_weights,
          "CUDA: quantized weight matrices stay in their GGUF blocks on the device, decode matmuls on int8 "
          "activations (quantized) or f32 ones (quantized-f32), or are dequantized to bf16 at load (bf16: "
          "about 2-4x the memory); the last two for comparison",
          "quantized|quantized-f32|bf16"),
      OPT(cuda_quant_gemm,
          "CUDA: matmuls of quantized weights over more than 8 rows (prefill, large batches) on tensor cores "
          "from the blocks (mma), or by dequantizing each matrix into a bf16 scratch as large as the largest "
          "matrix for cuBLAS (cublas, for comparison)",
          "mma|cublas"),
      OPT(cuda_prefill_attention,
          "CUDA: attention of prefill chunks on tensor cores (mma: f16 operands, f32 softmax; head dims 64, 80, "
          "96, 128, 256) or by the exact f32 kernels (exact, for comparison)",
          "mma|exact"),
      alias(OPT(threads, "CPU threads (0 = all cores)"), "-t"),
      OPT(cpu_decode_pack,
          "CPU: hold the quantized matrices (AVX2 hosts: all; AVX-512 hosts: Q8_0, Q4_0, IQ4_NL, Q4_K, Q6_K, IQ4_XS) "
          "in a decode layout, 1.2-8x faster decode; the copy "
          "replaces the mapped file's pages in memory; auto: while the copies fit half of the available memory",
          "auto|on|off"),
      alias(OPT(max_seqs, "max sequences per step"), "--max-num-seqs|--parallel|-np"),
      alias(OPT(max_batch_tokens, "max tokens per step"), "--max-num-batched-tokens"),
      OPT(max_step_ms,
          "target time of a step that decodes beside a prefill: auto (1.75x the decodes' time), off, or ms"),
      OPT(max_tokens_limit, "largest max_tokens a request may ask for (0 = the context size)"),
      alias(OPT(ctx_size, "context size per sequence (0 = model's)"), "-c|--max-model-len",
            "per sequence, as vLLM's --max-model-len; llama-server's -c/--ctx-size is the total over its slots"),
      OPT(kv_cache_memory, "KV cache budget, e.g. 512MiB (empty: engine picks)"),
      alias(OPT(gpu_memory_fraction,
                "CUDA: share of device memory for weights + KV cache (KV gets what is left)"),
            "--gpu-memory-utilization"),
      OPT(pooling, "embeddings: pooling when the model's GGUF names none", "mean|cls|last"),
      OPT(block_size, "tokens per KV block"),
      OPT(kv_cache_type, "KV cache element type of K and V (q8_0: 8-bit, about half the bytes of f16)",
          "f16|f32|q8_0"),
      alias(OPT(kv_cache_type_k, "KV cache element type of K alone; unset: --kv-cache-type's",
                "f16|f32|q8_0"),
            "-ctk|--cache-type-k"),
      alias(OPT(kv_cache_type_v, "KV cache element type of V alone; unset: --kv-cache-type's",
                "f16|f32|q8_0"),
            "-ctv|--cache-type-v"),
      OPT(system_prompt_file, "text prefilled once at start and shared"),
      OPT(kv_cache_dir, "folder the prefix cache is saved to (clean stop, POST /v1/cache/save) and restored from (empty: off)"),
      OPT(kv_cache_dir_size, "most disk the saved prefix cache takes; least recently used blocks are left out"),
      OPT(kv_host_memory, "host memory for evicted prefix blocks, copied back instead of recomputed: auto, off or a size (auto: on CUDA half the device KV cache, at most 1/4 of free host RAM; off on CPU)"),
      OPT(kv_events, "publish the prefix cache's BlockStored/BlockRemoved events on a ZeroMQ PUB socket bound here, tcp://HOST:PORT, for prefix-aware routers (empty: off)"),
      OPT(kv_events_topic, "the KV events' topic (empty: kv@HOSTNAME@MODEL, the form llm-d's indexer reads)"),
      OPT(kv_events_hash_seed, "seed of the KV events' block hashes (the indexer's HashSeed, vLLM's PYTHONHASHSEED)"),
      OPT(context_shift, "shift the context when a sequence is full (on|off)"),
      OPT(speculative, "speculative decoding: draft with prompt lookup or a draft model", "none|ngram|draft"),
      OPT(spec_tokens, "speculative decoding: drafted tokens per sequence and step at most (1..63)"),
      OPT(spec_tree, "speculative decoding: branches at the draft tree's first two depths (1 = a chain)"),
      OPT(draft_model, "GGUF draft model for --speculative draft (same vocabulary as the model)"),
      OPT(spec_cost_gate, "speculative decoding: draft only as many tokens as the measured step cost says pay off (on|off)"),
      OPT(forced_tokens, "structured output: where the grammar allows one continuation, append its tokens without a decode step each (on|off)"),
      OPT(chat_template, "Jinja chat template file (empty: the model's)"),
      OPT(chat_special_tokens, "control-token text in chat messages becomes control tokens (on|off)"),
      OPT(tool_call_parser, "how chat output is read for tool calls (auto: from the template)",
          "auto|hermes|llama3|mistral|none"),
      OPT(reasoning_parser, "how chat output is read for a <think> block (auto: from the template)",
          "auto|deepseek_r1|qwen3|none"),
      OPT(responses_store, "Responses API: stored responses kept for previous_response_id (0 = off)"),
      OPT(responses_store_bytes, "Responses API: memory the stored responses may take, in bytes"),
      OPT(lora, "LoRA adapter NAME=PATH (GGUF, as llama.cpp's convert_lora_to_gguf.py writes it), loaded at start; "
                "requests pick it with \"model\": NAME (repeatable)"),
      OPT(max_loras, "LoRA adapters loaded at once; any of them may share a batch with the base model"),
      OPT(max_lora_rank, "largest LoRA rank accepted"),
      OPT(allow_runtime_lora,
          "serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (behind --api-key) (on|off)"),
      OPT(host, "listen address (loopback by default; 0.0.0.0 exposes the server)"),
      OPT(port, "listen port"),
      OPT(api_key, "require 'Authorization: Bearer KEY'"),
      OPT(api_key_file, "file whose first line is the API key"),
      OPT(max_queue, "waiting sequences allowed beyond max-seqs, then 429"),
      OPT(timeout, "per-request timeout in seconds (0 = none)"),
      OPT(cors_origins, "allowed CORS origins, comma-separated ('' = off)"),
      OPT(max_body_bytes, "largest request body; larger gets 413"),
      OPT(http_threads, "HTTP worker threads (0 = max-seqs + max-queue + 8)"),
      OPT(max_connections, "open client connections; beyond: the oldest idle closes, else 503"),
      OPT(header_timeout, "seconds to receive a request's headers, then 408"),
      OPT(body_min_rate, "bytes/s a request body must average after header-timeout, then 408 (0 = off)"),
      OPT(keep_alive_timeout, "seconds an idle keep-alive connection stays open"),
      OPT(max_buffered_body_bytes, "request body bytes held at once; more waits (0 = 4 x max-body-bytes)"),
      OPT(shutdown_grace, "seconds to finish requests on SIGINT/SIGTERM"),
      OPT(health_stall, "seconds without an engine step (with work) before /health is 503"),
      OPT(log_format, "log format", "text|json"),
      OPT(log_level, "log level", "trace|debug|info|warn|error"),
  };
  return opts;
}
#undef OPT

std::string flag_name(const Option& o) {
  std::string s = o.name;
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

// `flag` as typed, dashes included ("--max-model-len", "-m").
const Option* find_flag(const std::string& flag) {
  for (const Option& o : options()) {
    if ("--" + flag_name(o) == flag) return &o;
    if (!o.aliases) continue;
    std::string rest = std::string(o.aliases) + "|";
    for (size_t bar; (bar = rest.find('|')) != std::string::npos; rest.erase(0, bar + 1))
      if (rest.substr(0, bar) == flag) return &o;
  }
  return nullptr;
}

const Option* find_key(const std::string& key) {
  for (const Option& o : options())
    if (key == o.name) return &o;
  return nullptr;
}

bool parse_bool(const std::string& v, bool* out) {
  if (v == "on" || v == "true" || v == "1" || v == "yes") return *out = true, true;
  if (v == "off" || v == "false" || v == "0" || v == "no") return *out = false, true;
  return false;
}

// Sets an option from its text form (a flag value).
void set_from_text(ServerConfig& cfg, const Option& o, const std::string& v, const std::string& where) {
  auto fail = [&](const char* what) {
    throw ConfigError(where + ": " + what + ", got '" + v + "'");
  };
  switch (o.kind) {
    case Kind::Str: {
      if (o.choices) {
        std::string c = std::string("|") + o.choices + "|";
        if (c.find("|" + v + "|") == std::string::npos)
          throw ConfigError(where + ": expected one of " + o.choices + ", got '" + v + "'");
      }
      cfg.*o.str = v;
      break;
    }
    case Kind::Int:
    case Kind::Int64: {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || errno) fail("expected an integer");
      if (x < 0) fail("expected a non-negative integer");
      if (o.kind == Kind::Int) {
        if (x > INT32_MAX) fail("value too large");
        cfg.*o.i32 = (int)x;
      } else {
        cfg.*o.i64 = x;
      }
      break;
    }
    case Kind::Num: {
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !std::isfinite(x) || x < 0) fail("expected a non-negative number");
      cfg.*o.num = x;
      break;
    }
    case Kind::Bool: {
      bool b;
      if (!parse_bool(v, &b)) fail("expected on|off");
      cfg.*o.boolean = b;
      break;
    }
    case Kind::List:
      (cfg.*o.list).push_back(v);
      break;
  }
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError(std::string("cannot read ") + what + " '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

void apply_config_json(const std::string& text, const std::string& source, ServerConfig& cfg) {
  json j = json::parse(text, nullptr, false, /*ignore_comments=*/true);
  if (j.is_discarded()) throw ConfigError(source + ": not valid JSON");
  if (!j.is_object()) throw ConfigError(source + ": expected a JSON object of settings");
  for (const auto& [key, v] : j.items()) {
    const Option* o = find_key(key);
    if (!o) throw ConfigError(source + ": unknown setting '" + key + "'");
    std::string where = source + ": '" + key + "'";
    std::string as_text;
    if (o->kind == Kind::List) {  // a string or an array of strings
      if (!v.is_string() && !(v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })))
        throw ConfigError(where + ": expected a string or an array of strings");
      if (v.is_string()) set_from_text(cfg, *o, v.get<std::string>(), where);
      else
        for (const json& e : v) set_from_text(cfg, *o, e.get<std::string>(), where);
      continue;
    }
    if (v.is_string()) {
      as_text = v.get<std::string>();
    } else if (v.is_boolean() && o->kind == Kind::Bool) {
      as_text = v.get<bool>() ? "on" : "off";
    } else if (v.is_number() && o->kind != Kind::Str && o->kind != Kind::Bool) {
      as_text = v.is_number_float() ? std::to_string(v.get<double>()) : v.dump();
      if (v.is_number_float() && o->kind != Kind::Num) {
        double d = v.get<double>();
        if (d != std::floor(d)) throw ConfigError(where + ": expected an integer");
        as_text = std::to_string((long long)d);
      }
    } else if (v.is_number() && o->kind == Kind::Str &&
               (std::string(o->name) == "kv_cache_memory" || std::string(o->name) == "max_step_ms" ||
                std::string(o->name) == "kv_cache_dir_size" || std::string(o->name) == "kv_host_memory")) {
      as_text = v.dump();
    } else {
      throw ConfigError(where + ": wrong type " + std::string(v.type_name()));
    }
    set_from_text(cfg, *o, as_text, where);
  }
}

ServerConfig parse_server_config(int argc, char** argv, bool* help) {
  ServerConfig cfg;
  if (help) *help = false;
  bool model_positional = false;
  // Pass 1: the config file, so that flags (pass 2) override it wherever they appear.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config") {
      if (i + 1 >= argc) throw ConfigError("--config needs a file");
      apply_config_json(read_file(argv[i + 1], "config file"), argv[i + 1], cfg);
      ++i;
    } else if (a.rfind("--config=", 0) == 0) {
      std::string path = a.substr(9);
      apply_config_json(read_file(path, "config file"), path, cfg);
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      if (help) *help = true;
      continue;
    }
    if (a.empty() || a[0] != '-') {
      // `pagoda serve MODEL.gguf`, as vLLM and llama-server users type it.
      if (model_positional) throw ConfigError("unexpected argument '" + a + "'");
      cfg.model = a;
      model_positional = true;
      continue;
    }
    std::string name = a, value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "--config") {
      if (!has_value) ++i;
      continue;
    }
    const Option* o = find_flag(name);
    if (!o) throw ConfigError("unknown option '" + name + "' (see --help)");
    if (!has_value) {
      if (i + 1 >= argc) throw ConfigError(name + " needs a value");
      value = argv[++i];
    }
    set_from_text(cfg, *o, value, name);
  }
  if (cfg.port < 0 || cfg.port > 65535) throw ConfigError("--port must be in 0..65535");
  if (cfg.max_seqs < 1) throw ConfigError("--max-seqs must be at least 1");
  if (cfg.max_batch_tokens < 1) throw ConfigError("--max-batch-tokens must be at least 1");
  if (cfg.block_size < 1) throw ConfigError("--block-size must be at least 1");
  if (cfg.max_tokens_limit < 0) throw ConfigError("--max-tokens-limit must be at least 0");
  if (cfg.max_body_bytes < 1024) throw ConfigError("--max-body-bytes must be at least 1024");
  if (cfg.max_connections < 1) throw ConfigError("--max-connections must be at least 1");
  if (cfg.header_timeout <= 0) throw ConfigError("--header-timeout must be positive");
  if (cfg.keep_alive_timeout <= 0) throw ConfigError("--keep-alive-timeout must be positive");
  if (!(cfg.gpu_memory_fraction > 0 && cfg.gpu_memory_fraction <= 1))
    throw ConfigError("--gpu-memory-fraction must be in (0, 1]");
  if (cfg.responses_store < 0 || cfg.responses_store_bytes < 0)
    throw ConfigError("--responses-store and --responses-store-bytes must be >= 0");
  cfg.kv_cache_bytes();  // validates the size strings early
  cfg.kv_cache_dir_bytes();
  cfg.kv_host_bytes();
  if (cfg.spec_tokens < 1 || cfg.spec_tokens > 63) throw ConfigError("--spec-tokens must be in 1..63");
  if (cfg.spec_tree < 1 || cfg.spec_tree > 8) throw ConfigError("--spec-tree must be in 1..8");
  if (cfg.speculative == "draft" && cfg.draft_model.empty())
    throw ConfigError("--speculative draft needs --draft-model");
  cfg.step_ms_target();
  if (cfg.max_lora_rank < 1) throw ConfigError("--max-lora-rank must be at least 1");
  if (cfg.engine_max_loras() > 0 && cfg.max_loras < 1) throw ConfigError("--max-loras must be at least 1 with adapters");
  if (static_cast<int>(cfg.lora_adapters().size()) > cfg.max_loras)
    throw ConfigError("--lora gives " + std::to_string(cfg.lora.size()) + " adapters, above --max-loras " +
                      std::to_string(cfg.max_loras));
  return cfg;
}

std::vector<std::pair<std::string, std::string>> ServerConfig::lora_adapters() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& e : lora) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == e.size())
      throw ConfigError("--lora: expected NAME=PATH, got '" + e + "'");
    out.emplace_back(e.substr(0, eq), e.substr(eq + 1));
    for (size_t i = 0; i + 1 < out.size(); ++i)
      if (out[i].first == out.back().first) throw ConfigError("--lora: the name '" + out.back().first + "' is given twice");
  }
  return out;
}

std::string ServerConfig::resolve_api_key() const {
  if (!api_key.empty()) return api_key;
  if (api_key_file.empty()) return "";
  std::string text = read_file(api_key_file, "API key file");
  std::string key = text.substr(0, text.find('\n'));
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (key.empty()) throw ConfigError("API key file '" + api_key_file + "' is empty");
  return key;
}

double ServerConfig::step_ms_target() const {
  if (max_step_ms == "auto") return 0;
  if (max_step_ms == "off") return -1;
  char* end = nullptr;
  const double v = std::strtod(max_step_ms.c_str(), &end);
  if (end == max_step_ms.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
    throw ConfigError("--max-step-ms: expected auto, off or a positive number of milliseconds, got '" +
                      max_step_ms + "'");
  return v;
}

namespace {
// A size in bytes from "123", "512MiB", "2GB", "1.5G" (0 for ""); ConfigError naming `flag`.
int64_t parse_size(const std::string& text, const char* flag) {
  if (text.empty()) return 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end;
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB") mult = 1e3;
  else if (unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MB") mult = 1e6;
  else if (unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB") mult = 1e9;
  else if (unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else throw ConfigError(std::string(flag) + ": unknown unit in '" + text + "'");
  if (end == text.c_str() || !std::isfinite(v) || v <= 0 || v * mult >= 9.2e18)
    throw ConfigError(std::string(flag) + ": expected a positive size, got '" + text + "'");
  return (int64_t)(v * mult);
}
}  // namespace

int64_t ServerConfig::kv_cache_bytes() const { return parse_size(kv_cache_memory, "--kv-cache-memory"); }
int64_t ServerConfig::kv_cache_dir_bytes() const { return parse_size(kv_cache_dir_size, "--kv-cache-dir-size"); }
int64_t ServerConfig::kv_host_bytes() const {
  if (kv_host_memory == "auto") return -1;
  if (kv_host_memory == "off") return 0;
  return parse_size(kv_host_memory, "--kv-host-memory");
}

std::string server_usage() {
  ServerConfig d;
  std::string out =
      "usage: pagoda serve [MODEL.gguf] [--config FILE.json] [options]\n"
      "Every option can also be set in the config file as \"option_name\": value; flags win.\n\n";
  for (const Option& o : options()) {
    std::string def;
    switch (o.kind) {
      case Kind::Str: def = d.*o.str; break;
      case Kind::Int: def = std::to_string(d.*o.i32); break;
      case Kind::Int64: def = std::to_string(d.*o.i64); break;
      case Kind::Num: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", d.*o.num);
        def = buf;
        break;
      }
      case Kind::Bool: def = d.*o.boolean ? "on" : "off"; break;
      case Kind::List: def = ""; break;
    }
    char line[512];
    std::snprintf(line, sizeof line, "  --%-22s %s%s%s (default: %s)\n", flag_name(o).c_str(),
                  o.help, o.choices ? " " : "", o.choices ? o.choices : "",
                  def.empty() ? "none" : def.c_str());
    out += line;
    if (o.aliases) {
      std::string names = o.aliases;
      for (size_t bar; (bar = names.find('|')) != std::string::npos;) names.replace(bar, 1, ", ");
      out += std::string(27, ' ') + "also: " + names + (o.note ? std::string("; ") + o.note : "") + "\n";
    }
  }
  return out;
}

}  // namespace pagoda::server
