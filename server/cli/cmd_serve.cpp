// `pagoda serve`: loads the model, starts the engine thread and the OpenAI-compatible HTTP
// server, and shuts down gracefully on SIGINT/SIGTERM (stop taking requests, let the ones in
// flight finish for --shutdown-grace seconds, cancel the rest, exit 0).
//
// The listener opens before the model loads, so /health can say 503 "loading" meanwhile.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/backend/backend_select.h"
#include "engine/chat_template/chat_template.h"
#include "engine/loop/engine.h"
#include "engine/loop/heap_trim.h"
#include "engine/speculative/speculative.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_identity.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/kv_layout.h"
#include "server/http/access_log.h"
#include "server/cli/commands.h"
#include "server/cli/engine_factory.h"
#include "server/openai/handlers.h"
#include "server/http/http_server.h"
#include "server/http/metrics.h"
#include "server/cli/server_config.h"

namespace pagoda::cli {

namespace {

// After the grace, the requests cancelled then get this long to write their answers.
constexpr double kAbortWaitSeconds = 5;

using server::log_info;
using server::log_warn;
using Clock = std::chrono::steady_clock;

std::string read_text(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(std::string("cannot read ") + what + " '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A comma-separated list (CORS origins, served model names), empty items dropped.
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Waits for SIGINT/SIGTERM on its own thread (the signals are blocked everywhere else, so no
// async-signal-safety concerns). The first signal asks for a graceful stop; a second one while
// the model is still loading (which cannot be interrupted) quits at once.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // inherited by every thread started later
    thread_ = std::thread([this] { run(); });
  }
  ~SignalWatcher() {
    done_ = true;
    thread_.join();
  }
  // Blocks until a stop is requested.
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return signals_ > 0; });
  }
  bool wait_for(double seconds) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return signals_ > 1; });
  }
  bool stop_requested() {
    std::lock_guard<std::mutex> lk(mu_);
    return signals_ > 0;
  }
  void set_loaded() { loaded_ = true; }

 private:
  void run() {
    timespec tick{0, 200 * 1000 * 1000};
    while (!done_) {
      int sig = sigtimedwait(&set_, nullptr, &tick);
      if (sig <= 0) continue;
      int n;
      {
        std::lock_guard<std::mutex> lk(mu_);
        n = ++signals_;
      }
      cv_.notify_all();
      log_info("signal received", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
      if (n > 1 && !loaded_) {
        std::fprintf(stderr, "second signal while loading: quitting now\n");
        std::_Exit(1);
      }
    }
  }

  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  int signals_ = 0;
  std::atomic<bool> done_{false}, loaded_{false};
  std::thread thread_;
};

// Everything that exists once the model is loaded, torn down in reverse order.
struct LoadedModel {
  std::unique_ptr<LoadedEngine> engine;  // the file, tokenizer, model(s) and engine (engine_factory.h)
  std::unique_ptr<ChatTemplate> chat_template;
  server::ToolCallFormat tool_call_format = server::ToolCallFormat::None;  // from --tool-call-parser
  server::ReasoningFormat reasoning_format = server::ReasoningFormat::None;  // from --reasoning-parser
};

// Models smaller than this load in well under a second: no progress lines for them.
constexpr size_t kProgressMinBytes = size_t{256} << 20;

// Reads a large model file through once, logging a percentage, so that the page cache holds
// it before the weights are mapped or uploaded: loading is mostly this I/O. Small files are
// skipped. The buffer is 1 MiB and page-aligned: on the 2-vCPU AMD VM the kernel copied a file
// already in the page cache into a 16-byte-aligned buffer at 1.5-2 GB/s, into a page-aligned
// one at 7.7-8.3 GB/s.
// The KV events' default topic, kv@POD@MODEL as llm-d's indexer splits it: the pod is the host
// name (a Kubernetes pod's own name), the model the first served name.
std::string kv_events_topic(const server::ServerConfig& cfg) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "pagoda");
  std::vector<std::string> names = split_list(cfg.served_model_name);
  const std::string model = names.empty() ? std::filesystem::path(cfg.model).stem().string() : names.front();
  return std::string("kv@") + host + "@" + model;
}

void warm_page_cache(const std::string& path, int start_pct, int end_pct) {
  constexpr size_t kMin = kProgressMinBytes, kChunk = 1u << 20, kPage = 4096;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st{};
  const size_t total = ::fstat(fd, &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
  std::unique_ptr<char, decltype(&std::free)> buf(
      total >= kMin ? static_cast<char*>(std::aligned_alloc(kPage, kChunk)) : nullptr, &std::free);
  size_t done = 0;
  int last_decile = -1;
  auto t0 = Clock::now();
  while (buf && done < total) {
    const ssize_t n = ::read(fd, buf.get(), kChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
    int decile = (int)(done * 10 / total);
    if (decile != last_decile) {
      last_decile = decile;
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      log_info("loading " + std::to_string(start_pct + (end_pct - start_pct) * decile / 10) +
                   "%: reading weights",
               {{"read_mib", done >> 20}, {"total_mib", total >> 20},
                {"mib_per_s", s > 0 ? (int)((done >> 20) / s) : 0}});
    }
  }
  ::close(fd);
}

std::unique_ptr<LoadedModel> load(const server::ServerConfig& cfg) {
  auto t0 = Clock::now();
  auto progress = [&](int pct, const std::string& what) {
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    log_info("loading " + std::to_string(pct) + "%: " + what, {{"elapsed_s", std::round(s * 10) / 10}});
  };
  auto lm = std::make_unique<LoadedModel>();
  ModelLoad ml;
  ml.path = cfg.model;
  ml.backend = BackendChoice{cfg.device, cfg.threads, cfg.cuda_graphs, cfg.cpu_decode_pack, cfg.cuda_weights,
                             cfg.cuda_quant_gemm, cfg.cuda_prefill_attention, cfg.cuda_batch_invariant};
  ml.max_batch_tokens = cfg.max_batch_tokens;
  ml.progress = progress;
  size_t bytes = 0;
  ml.before_weights = [&](const LoadedEngine& le) {
    for (const std::string& w : le.tokenizer->warnings()) log_warn("tokenizer: " + w);
    std::string tmpl;
    if (!cfg.chat_template.empty()) {
      tmpl = read_text(cfg.chat_template, "chat template");
    } else if (auto t = le.file.get_string("tokenizer.chat_template")) {
      tmpl = *t;
    } else {
      log_warn("the model has no chat template; using ChatML");
      tmpl = ChatTemplate::chatml_source();
    }
    lm->chat_template = std::make_unique<ChatTemplate>(tmpl);
    lm->tool_call_format = server::resolve_tool_call_format(cfg.tool_call_parser, tmpl);
    lm->reasoning_format = server::resolve_reasoning_format(cfg.reasoning_parser, tmpl);
    bytes = le.weight_bytes;
    warm_page_cache(cfg.model, 20, 60);
  };
  // Uploading (and on CPU packing) a large model takes a while: a line per tenth of its layers,
  // as warm_page_cache does for the reading (small models load at once and say nothing more).
  int last_tenth = 0;
  ml.on_layer = [&](int done, int n_layers) {
    const int tenth = n_layers > 0 ? done * 10 / n_layers : 10;
    if (bytes < kProgressMinBytes || tenth == last_tenth || tenth >= 10) return;  // 80% comes next
    last_tenth = tenth;
    progress(60 + 2 * tenth, "weights to the backend, " + std::to_string(done) + " of " + std::to_string(n_layers) +
                                 " layers");
  };
  lm->engine = load_model(ml);
  LoadedEngine& le = *lm->engine;
  if (!le.fallback_reason.empty()) log_info("no usable CUDA device, using the CPU", {{"why", le.fallback_reason}});
  EngineConfig ec;
  ec.block_size = cfg.block_size;
  ec.kv_cache_memory = (size_t)cfg.kv_cache_bytes();
  // The option table checked the names.
  kv_type_from_name(cfg.kv_type_k_name().c_str(), &ec.kv_types.k);
  kv_type_from_name(cfg.kv_type_v_name().c_str(), &ec.kv_types.v);
  ec.device_memory_fraction = cfg.gpu_memory_fraction;  // the engine sizes the cache (kv_budget.h)
  ec.max_batch_tokens = cfg.max_batch_tokens;
  ec.max_step_ms = cfg.step_ms_target();
  ec.max_seqs = cfg.max_seqs;
  ec.max_queue = cfg.max_queue;  // the engine's admission bound: max_seqs + max_queue sequences
  ec.max_tokens_limit = cfg.max_tokens_limit;
  ec.ctx_size = cfg.ctx_size;
  if (le.model && cfg.ctx_size > le.model->config().ctx_train && le.model->config().ctx_train > 0)
    log_warn("ctx_size exceeds the context the model was trained on; quality past it is not assured",
             {{"ctx_size", cfg.ctx_size}, {"model_context", le.model->config().ctx_train}});
  ec.context_shift = cfg.context_shift;
  ec.kv_cache_dir = cfg.kv_cache_dir;
  ec.kv_cache_dir_max_bytes = (uint64_t)cfg.kv_cache_dir_bytes();
  const int64_t host_tier = cfg.kv_host_bytes();
  ec.kv_host_memory_auto = host_tier < 0;
  ec.kv_host_memory = host_tier > 0 ? (size_t)host_tier : 0;
  ec.kv_events_endpoint = cfg.kv_events;
  ec.kv_events_topic = cfg.kv_events_topic.empty() ? kv_events_topic(cfg) : cfg.kv_events_topic;
  ec.kv_events_seed = cfg.kv_events_hash_seed;
  if (!ec.kv_cache_dir.empty()) ec.model_identity = gguf::file_identity(le.file);
  if (!cfg.system_prompt_file.empty())
    ec.system_prompt = le.tokenizer->encode(read_text(cfg.system_prompt_file, "system prompt"),
                                            /*add_special=*/true, /*parse_special=*/true);
  if (!parse_speculative_mode(cfg.speculative, ec.speculative))
    throw std::runtime_error("--speculative: expected none, ngram or draft");
  ec.spec_tokens = cfg.spec_tokens;
  ec.spec_tree = cfg.spec_tree;
  ec.spec_cost_gate = cfg.spec_cost_gate;
  ec.forced_tokens = cfg.forced_tokens;
  ec.max_loras = cfg.engine_max_loras();
  ec.max_lora_rank = cfg.max_lora_rank;
  const size_t system_prompt_tokens = ec.system_prompt.size();
  start_engine(le, std::move(ec), ml, cfg.draft_model);
  if (system_prompt_tokens > 0 && le.is_encoder())
    throw std::runtime_error("--system-prompt-file does not apply to an encoder model");
  if (!cfg.kv_events.empty() && le.is_encoder())
    throw std::runtime_error("--kv-events does not apply to an encoder model (it has no prefix cache)");
  if (!cfg.lora_adapters().empty() && le.is_encoder())
    throw std::runtime_error("--lora does not apply to an encoder model");
  for (const auto& [name, path] : cfg.lora_adapters()) {
    const LoraOpResult r = le.engine->load_lora(name, path);
    if (!r.ok) throw std::runtime_error("--lora " + name + ": " + r.error);
    log_info("LoRA adapter loaded", {{"name", name}, {"path", path}});
  }
  if (system_prompt_tokens > 0) {
    progress(90, "prefilling the system prompt (" + std::to_string(system_prompt_tokens) + " tokens)");
    if (!le.engine->wait_system_prompt()) throw std::runtime_error("system prompt prefill failed");
  }
  progress(100, "ready");
  return lm;
}

// What GET /version answers: name, version and the flags it was started with (a key's value
// left out), so a benchmark report can say what it measured.
std::string version_json(int argc, char** argv) {
  std::string flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (std::string(argv[i - 1]) == "--api-key") a = "***";
    else if (a.rfind("--api-key=", 0) == 0) a = "--api-key=***";
    flags += (flags.empty() ? "" : " ") + a;
  }
  return nlohmann::json{{"name", "pagoda"}, {"version", PAGODA_VERSION}, {"flags", flags}}.dump();
}

}  // namespace

int serve(int argc, char** argv) {
  bool help = false;
  server::ServerConfig cfg = server::parse_server_config(argc, argv, &help);
  if (help) {
    std::fputs(server::server_usage().c_str(), stdout);
    return 0;
  }
  bound_heap_growth();  // before any thread starts
  server::setup_logging(cfg.log_format, cfg.log_level);
  const std::string api_key = cfg.resolve_api_key();
  SignalWatcher signals;

  server::Metrics metrics;
  std::vector<std::string> names = split_list(cfg.served_model_name);
  if (names.empty()) names.push_back(std::filesystem::path(cfg.model).stem().string());
  metrics.set_model_name(names.front());
  server::HttpServer::Options ho;
  ho.api_key = api_key;
  ho.cors_origins = split_list(cfg.cors_origins);
  ho.max_body_bytes = (size_t)cfg.max_body_bytes;
  ho.worker_threads = cfg.http_threads > 0 ? cfg.http_threads : cfg.max_seqs + cfg.max_queue + 8;
  ho.max_connections = cfg.max_connections;
  ho.header_timeout_s = cfg.header_timeout;
  ho.body_min_rate = cfg.body_min_rate;
  ho.keep_alive_timeout_s = cfg.keep_alive_timeout;
  ho.max_buffered_body_bytes = (size_t)cfg.max_buffered_body_bytes;
  ho.version_json = version_json(argc, argv);
  server::HttpServer http(ho, metrics, server::Handlers::routes());
  int port = http.bind(cfg.host, cfg.port);
  std::thread http_thread([&] { http.run(); });
  log_info("listening while the model loads", {{"address", "http://" + cfg.host + ":" + std::to_string(port)}});

  std::unique_ptr<LoadedModel> lm;
  std::shared_ptr<server::Handlers> handlers;
  try {
    lm = load(cfg);
    std::mutex tmpl_mu;  // rendering is cheap; one at a time keeps the interpreter simple to trust
    const Tokenizer& tok = *lm->engine->tokenizer;
    ChatTemplate& tmpl = *lm->chat_template;
    std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
    std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
    // The ordered inputs keep the client's key order (tool schemas, tool-call arguments) for
    // `tojson`, as Python renders it.
    auto render = [&tmpl, &tmpl_mu, bos, eos](const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& tools, bool add_gen,
                                               const nlohmann::ordered_json& variables) {
      ChatTemplate::Inputs in;
      if (variables.is_object()) in.variables = variables;
      in.messages_ordered = messages;
      in.tools_ordered = tools;
      in.add_generation_prompt = add_gen;
      in.bos_token = bos;
      in.eos_token = eos;
      std::lock_guard<std::mutex> lk(tmpl_mu);
      return tmpl.render(in);
    };
    server::Handlers::Options opts;
    opts.model_name = names.front();
    opts.model_aliases.assign(names.begin() + 1, names.end());
    opts.pooling = cfg.pooling == "cls" ? Pooling::Cls : cfg.pooling == "last" ? Pooling::Last : Pooling::Mean;
    opts.timeout_s = cfg.timeout;
    opts.health_stall_s = cfg.health_stall;
    opts.chat_special_tokens = cfg.chat_special_tokens;
    opts.tool_call_format = lm->tool_call_format;
    opts.reasoning_format = lm->reasoning_format;
    opts.allow_runtime_lora = cfg.allow_runtime_lora;
    opts.responses_store_count = (size_t)std::max(0, cfg.responses_store);
    opts.responses_store_bytes = (size_t)std::max<int64_t>(0, cfg.responses_store_bytes);
    handlers = std::make_shared<server::Handlers>(lm->engine->api(), render, metrics, opts);
    http.set_service(handlers);
    signals.set_loaded();
    const LlmEngine* engine = lm->engine->engine.get();  // null for an encoder model
    const int kv_blocks = engine ? engine->num_kv_blocks() : 0;
    const int kv_tokens = engine ? kv_blocks * engine->block_size() : 0;
    log_info("pagoda serving",
             {{"address", "http://" + cfg.host + ":" + std::to_string(port)},
              {"model", cfg.model},
              {"name", opts.model_name},
              {"backend", lm->engine->backend_name},
              {"kv_capacity_tokens", kv_tokens},
              {"kv_blocks", kv_blocks},
              {"context", lm->engine->api().context_size()},
              {"encoder", lm->engine->is_encoder()},
              {"max_seqs", cfg.max_seqs},
              {"tool_call_parser", server::tool_call_format_name(opts.tool_call_format)},
              {"reasoning_parser", server::reasoning_format_name(opts.reasoning_format)},
              {"auth", api_key.empty() ? "off" : "on"}});

    signals.wait();
    // Graceful shutdown: refuse new work, let every request already accepted finish and its
    // response be written (not merely its engine sequences end), then cancel the rest.
    log_info("shutting down", {{"in_flight", handlers->inflight_seqs()}, {"grace_s", cfg.shutdown_grace}});
    http.drain_and_stop(cfg.shutdown_grace, kAbortWaitSeconds,
                        [&signals](double s) { return signals.wait_for(s); });
  } catch (...) {
    http.stop();
    http_thread.join();
    throw;
  }
  http_thread.join();
  handlers.reset();
  lm.reset();
  log_info("stopped");
  return 0;
}

}  // namespace pagoda::cli
