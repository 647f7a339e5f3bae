// LlmEngine: the engine thread (docs/architecture.md). It owns the model, the KV cache and the
// scheduler; other threads only submit requests, read their streams and abort them.
//
// Each step: take new requests and aborts from the inbox -> scheduler.schedule() -> StepPlan ->
// model.forward() -> sample one token per sample target -> scheduler.update() (token stops,
// frees finished sequences) -> detokenize, match stop strings, push Deltas. With nothing to do
// the thread sleeps on a condition variable (after 5 s of that, it trims the heap: HeapTrim).
// Each step's time feeds the StepCostModel the scheduler cuts prefill chunks by.
//
// Where tokens are sampled (decided per request at admission, so never by its batch mates):
// - On the backend, when model.backend().can_sample() (the CUDA backend). A speculated request
//   gets one draw per node of its token tree (the node's counter and penalties count the
//   drafted tokens above it as generated), and the acceptance walk follows the drawn ids: the
//   tokens it keeps are those the request would draw without speculation. Every sampling knob runs
//   there: grammar masks, logit_bias, repetition / presence / frequency penalties, top_k /
//   top_p / min_p, logprobs with up to kMaxDrawTopLogprobs alternatives. The host builds each
//   draw's token edits (token_edits in sampling.h: the host sampler's semantics) and mask, and
//   only token ids and logprobs come back. Masks go up with the draws in one transfer, issued
//   once the layers are (Model::forward's before_draws waits for them then, so they are
//   computed while the GPU runs the layers); a recorded (graph) step needs them before it
//   starts. The draw is the GPU rule (SampleRequest in backend.h) with seed = the choice's seed
//   and counter = tokens generated so far, so a seeded request's tokens depend only on its own
//   logits and seed: reproducible, but not the same tokens the CPU sampler would draw for that
//   seed (a different RNG and filter arithmetic). Greedy requests pick the argmax of the same
//   edited logits on either path, and logprobs are the same log-softmax.
// - Everything else (and every request on the CPU backend) on the host with sample_token and
//   the sequence's own Rng, exactly as sampling.h describes.
// A choice's seed is the request's seed (or a random one) plus its choice index.
//
// Embeddings (GenerationRequest::embed): a prefill-only sequence in the same batches; the
// scheduler names the prompt positions its pooling reads (Scheduler::hidden_rows), the forward
// pass hands back their final-norm states, they are pooled as they come (embedding_pool.h), and
// the request's one delta carries the L2-normalized vector once the prompt is computed.
//
// Structured output: each choice of a request with SamplingParams::grammar keeps a
// GrammarMatcher. The masks of a step's constrained rows are computed by StepMasks workers (while
// the forward pass runs when every such row is sampled on the host), applied to the row's logits
// before the sampler (so logprobs are those of the masked distribution), and the drawn token advances the
// matcher. The choice ends with "stop" once the grammar accepts an end-of-generation token.
#pragma once

#include <atomic>
#include <functional>
#include <stdexcept>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/engine_api.h"
#include "engine/sampling/grammar_masks.h"
#include "engine/loop/heap_trim.h"
#include "engine/kv/host_kv_tier.h"
#include "engine/kv/kv_cache_file.h"
#include "engine/kv/kv_cache_manager.h"
#include "engine/kv_events/kv_event_recorder.h"
#include "engine/kv_events/zmq_publisher.h"
#include "engine/lora/lora_registry.h"
#include "engine/sampling/sampling.h"
#include "engine/scheduler/scheduler.h"
#include "engine/model/model.h"

namespace pagoda {

class Tokenizer;
class ChannelStream;
class ConstraintCompiler;
class DraftModelDrafter;

struct EngineConfig {
  int block_size = 16;
  // KV cache budget (engine/loop/kv_budget.h): bytes when > 0; else, on a backend with device
  // memory, what keeps the process within device_memory_fraction of it; else this fraction of
  // the host memory available now, capped at max_seqs full contexts plus the system prompt,
  // twice over.
  size_t kv_cache_memory = 0;
  double kv_cache_fraction = 0.5;
  // KV cache elements of K and V, each F16, F32 or Q8_0 (--kv-cache-type sets both,
  // --kv-cache-type-k / --kv-cache-type-v one half; a GgmlType assigned here sets both).
  KvTypes kv_types;
  double device_memory_fraction = 0.9;  // weights + activations + KV cache, in (0, 1]
  int max_batch_tokens = 512;  // at most the model's max_batch_tokens
  // Stall-free prefill (SchedulerConfig): a step with decodes stays within this many ms;
  // 0: auto (1.75x the step's decode time), < 0: off.
  double max_step_ms = 0;
  int max_seqs = 16;
  // The admission bound, in sequences (a request counts its n choices): submit() answers
  // queue_full while max_seqs + max_queue sequences are in flight (submitted, not finished).
  int max_queue = 1024;
  // The largest max_tokens a request may ask for (MaxTokensRule); 0: the context size.
  int max_tokens_limit = 0;
  int ctx_size = 0;            // tokens per sequence; 0: the model's training context
  bool context_shift = true;
  int n_keep = -1;             // default tokens kept on a shift; -1: the system prompt's length
  std::vector<int32_t> system_prompt;  // prefilled once at start-up, its blocks pinned
  bool prefix_caching = true;  // off: only the pinned system prompt is shared (for comparisons)
  // When every layer has a sliding window (phi3 files that set one): release the blocks behind
  // the window as a sequence grows (KvCacheManager::release_behind_window). Off: for comparisons.
  bool release_behind_window = true;
  // The persistent prefix cache (kv_persist.h): loaded from kv_cache_dir at start (before the
  // system prompt, which then reuses it), saved there on a clean stop and by save_prefix_cache();
  // empty: off. The file stays within kv_cache_dir_max_bytes. model_identity keys the file
  // (gguf::file_identity); a file written for another identity, block size, KV type or RoPE
  // setting is ignored with a log line.
  std::string kv_cache_dir;
  uint64_t kv_cache_dir_max_bytes = 4ull << 30;
  std::string model_identity;
  // Bytes of host memory for evicted prefix blocks (host_kv_tier.h); 0: off, unless
  // kv_host_memory_auto, which sizes it by auto_host_tier_bytes (the server's default).
  size_t kv_host_memory = 0;
  bool kv_host_memory_auto = false;
  // Speculative decoding (speculative.h): the drafter, drafted tokens per step and sequence at
  // most, branches of the tree at its first depths (1: a chain), and for Draft the draft model
  // (same vocabulary; not owned, outlives the engine).
  SpeculativeMode speculative = SpeculativeMode::None;
  int spec_tokens = 4;
  int spec_tree = 1;
  Model* draft_model = nullptr;
  // Drafts only as many tokens as the step-cost model says pay off (spec_cost.h); off: the
  // fixed budgets alone.
  bool spec_cost_gate = true;
  // Structured output: where the grammar allows exactly one continuation, its tokens follow the
  // sampled token without a decode step each (forced_tokens.h); off: every token is sampled.
  bool forced_tokens = true;
  // LoRA adapters (engine_lora.cpp): how many may be loaded at once (model slots; 0: none) and
  // the largest rank a pair may have.
  int max_loras = 0;
  int max_lora_rank = 64;
  // KV cache events (engine_kv_events.cpp): the prefix cache's BlockStored / BlockRemoved /
  // AllBlocksCleared published on a ZeroMQ PUB socket bound here (tcp://HOST:PORT; empty: off)
  // under this topic, with hashes seeded by kv_events_seed (docs/kv-events.md).
  std::string kv_events_endpoint;
  std::string kv_events_topic;
  std::string kv_events_seed;
  // Benchmarks and tests: drafts with this instead of the built-in drafter (any mode but None).
  std::function<DraftTree(const Sequence&, int max_draft)> custom_drafter;
};

struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class LlmEngine final : public EngineApi {
 public:
  // `model` (and `tokenizer`, which may be null: then no text and no stop strings) must outlive
  // the engine. Sizes and initialises the KV cache and starts the engine thread; the system
  // prompt, if any, is prefilled before the first request runs. Throws EngineError for a bad
  // configuration (e.g. a cache too small for one block, a system prompt longer than the context).
  LlmEngine(Model& model, const Tokenizer* tokenizer, EngineConfig cfg);
  ~LlmEngine() override;  // stops the thread; unfinished requests end with finish "abort"

  std::shared_ptr<RequestStream> submit(GenerationRequest req, SubmitError* err) override;
  EngineStats stats() const override;
  int context_size() const override { return ctx_limit_; }
  std::optional<Pooling> model_pooling() const override { return model_pooling_; }
  int admission_limit() const override { return cfg_.max_seqs + cfg_.max_queue; }
  int inflight_seqs() const override;
  MaxTokensRule max_tokens_rule() const override {
    return MaxTokensRule{ctx_limit_, cfg_.max_tokens_limit, cfg_.context_shift};
  }
  // The vocabulary is the tokenizer's (engine_vocabulary.cpp); without one, nothing tokenizes.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                bool parse_special) const override;
  std::vector<int32_t> tokenize_marked(std::string_view text, bool add_special,
                                       const std::vector<std::pair<size_t, size_t>>& plain) const override;
  std::string detokenize(const std::vector<int32_t>& ids) const override;
  std::string token_piece(int32_t id, bool special) const override;
  int32_t vocab_size() const override;
  int32_t prompt_bos_id() const override;
  std::shared_ptr<const structured::CompiledGrammar> compile_constraint(
      const OutputConstraint& constraint) const override;
  // LoRA adapters (engine_lora.cpp). The file is read and checked on the caller's thread; the
  // slot is filled on the engine thread between steps.
  std::vector<LoraInfo> lora_adapters() const override;
  LoraOpResult load_lora(const std::string& name, const std::string& path) override;
  LoraOpResult unload_lora(const std::string& name) override;

  int num_kv_blocks() const { return num_blocks_; }
  // For tests: draft-model KV blocks in use (0 without a draft model). Engine thread only.
  int draft_blocks_in_use() const;
  int block_size() const { return cfg_.block_size; }
  // Blocks until the system prompt is prefilled (or failed); true when it is pinned.
  bool wait_system_prompt();
  PrefixCacheSaveResult save_prefix_cache() override;  // engine_persist.cpp
  std::optional<CachedBlocks> cached_blocks() override;  // engine_kv_events.cpp
  // The --kv-cache-dir file's path ("" when off).
  std::string kv_cache_file() const;

  // For tests: run `fn` on the engine thread between steps, with the model (e.g. to read KV
  // blocks) and the cache manager. Blocks until done.
  void run_on_engine_thread(const std::function<void(Model&, KvCacheManager&)>& fn);

 private:
  struct Choice;
  struct Active;

  void loop();
  void prefill_system_prompt();
  // engine_persist.cpp: raw block access and the host tier (constructor), the disk file
  // (engine thread: load before the system prompt, save on a clean stop).
  void setup_kv_tiers();
  // engine_kv_events.cpp: the observer and socket (constructor); the pending events as one
  // batch (engine thread, after each turn of the loop).
  void setup_kv_events();
  void publish_kv_events();
  void load_kv_file();
  PrefixCacheSaveResult save_kv_file();
  bool take_inbox();  // false when stopping
  void step();
  void emit_outputs(const std::vector<std::shared_ptr<Sequence>>& updated,
                    const std::vector<SampleResult>& results);
  // Structured output: starts the masks of the constrained targets (false when there are none);
  // after sampling, advances a target's grammar or ends its choice.
  bool start_grammar_masks(const std::vector<SampleTarget>& targets);
  void advance_grammar(const std::shared_ptr<Sequence>& seq, int32_t token, bool dead);
  // Appends to a plain target's sampled token the tokens its grammar forces after it, each with
  // the logprob 0 and no alternatives (the constraint left no choice).
  void append_forced(const Sequence& seq, std::vector<int32_t>& tokens, std::vector<SampleResult>& results) const;
  void report_finished();
  void choice_finished(Active& a);  // its last delta was pushed
  void fail_running(const std::string& message);
  void update_stats(bool stepped);
  // Speculative decoding (engine_spec.cpp): the scheduler's drafter for cfg_.speculative, and
  // the acceptance walk over a verified tree's logit rows (speculative.h).
  std::function<DraftTree(const Sequence&, int)> make_drafter();
  // At the end of the engine thread: drafted / accepted totals, one log line.
  void log_spec_summary() const;
  // first_draw >= 0: the tree's nodes were drawn on the backend (draws first_draw + node), else
  // the walk samples their logits rows on the host.
  std::vector<SampleResult> verify_tree(const SampleTarget& target, int first_draw);
  // Draw `draw` of the step as the sampler's result (token, and logprobs when seq asks).
  SampleResult drawn_result(size_t draw, const Sequence& seq) const;
  void forget_draft(uint64_t seq_id);  // a finished sequence's draft-model cache
  // engine_lora.cpp: frees the model slots of adapters whose last user ended (engine thread).
  void reclaim_lora_slots();
  // The queue as the stats show it, always published together so the gauges read at one
  // scrape agree: running and waiting sequences, and the adapters of running and of waiting
  // requests (vllm:lora_requests_info). Engine thread, under stats_mu_.
  void queue_stats(EngineStats& s) const;

  Model& model_;
  const Tokenizer* tokenizer_;
  EngineConfig cfg_;
  int num_blocks_ = 0;
  int ctx_limit_ = 0;
  int vocab_ = 0;
  std::optional<Pooling> model_pooling_;  // the model's own (GGUF pooling_type), when it names one
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<HostKvTier> host_tier_;  // --kv-host-memory
  std::unique_ptr<kv_events::KvEventRecorder> kv_events_;  // --kv-events
  std::unique_ptr<kv_events::ZmqPublisher> kv_events_pub_;
  KvCacheLayout kv_layout_;                // what the --kv-cache-dir file must match
  uint64_t kv_disk_loaded_ = 0, kv_disk_saved_ = 0, kv_disk_saves_ = 0;  // engine thread
  std::unique_ptr<Scheduler> scheduler_;
  StepCostModel step_cost_;  // fitted from timed steps; the scheduler reads it
  HeapTrim heap_trim_;

  // Inbox, guarded by mu_ (shared with streams through a shared_ptr to wake the thread).
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::shared_ptr<Active>> pending;
    std::vector<std::function<void(Model&, KvCacheManager&)>*> calls;
    bool stop = false;
    bool closed = false;  // the thread has run its last calls: run_on_engine_thread refuses
    bool aborts = false;
  };
  std::shared_ptr<Inbox> inbox_;
  int queued_ = 0;  // submitted, not yet in the scheduler's queue (guarded by stats_mu_)
  std::map<std::string, int> queued_loras_;  // their adapters, by name (guarded by stats_mu_)
  int inflight_seqs_ = 0;  // choices submitted and not yet finished (guarded by stats_mu_)

  // Engine-thread state.
  std::unordered_map<uint64_t, std::shared_ptr<Active>> active_;  // by request id
  std::unordered_map<uint64_t, std::shared_ptr<Active>> by_seq_;  // sequence id -> request
  uint64_t next_id_ = 1;
  std::shared_ptr<Sequence> system_seq_;
  StepLogits logits_;                 // the last step's drawn ids and host logits
  std::vector<SampleRequest> draws_;  // the device-sampled targets of the step
  double step_s_ = 0, forward_s_ = 0;
  std::unique_ptr<StepMasks> masks_;  // made at the first constrained step
  std::unique_ptr<DraftModelDrafter> draft_;  // --speculative draft
  std::unique_ptr<LoraRegistry> loras_;       // the loaded adapters (cfg_.max_loras slots)

  // Structured output: the vocabulary's token bytes and the compiled-grammar cache, built on
  // the first compile_constraint (from HTTP threads; the compiler itself is thread-safe).
  mutable std::once_flag constraints_once_;
  mutable std::unique_ptr<ConstraintCompiler> constraints_;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::mutex sys_mu_;
  std::condition_variable sys_cv_;
  bool sys_done_ = false;
  bool sys_ok_ = false;

  std::thread thread_;
};

}  // namespace pagoda
