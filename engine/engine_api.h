// The engine as the HTTP layer sees it: submit a tokenized request, read its deltas from a
// channel, abort it; and the model's vocabulary, to tokenize prompts and show tokens as text.
// Implemented by LlmEngine (engine/engine.*) and by test doubles.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace pagoda {

// How an embedding request reduces its prompt's final-norm hidden states to one vector: the
// mean over every token, the first token's (CLS), or the last token's (decoder embedders such
// as Qwen3-Embedding). The result is L2-normalized.
enum class Pooling { Mean, Cls, Last };

struct GenerationRequest {
  std::vector<int32_t> prompt;   // already tokenized, BOS included when the model wants it
  SamplingParams sampling;
  StopParams stop;
  int n = 1;                     // choices; siblings share the prompt's KV blocks
  int n_keep = -1;               // tokens kept on context shift; -1 = server default
  // Prompt logprobs (OpenAI legacy `echo` + `logprobs`): -1 = none; N >= 0 = the logprob of
  // every prompt token from the second on (log-softmax of the raw logits at the position before
  // it, no bias or penalties) plus the top N alternatives there. Costs one LM-head row per
  // prompt token, and the prompt is computed in full (no prefix-cache reuse for it).
  int prompt_logprobs = -1;
  // An embedding request: the prompt is prefilled (sharing the prefix cache where the pooling
  // allows), nothing is sampled, and the one finish delta carries Delta::embedding. The
  // pooling is the model's (GGUF `<arch>.pooling_type`) when it names one, else this.
  bool embed = false;
  Pooling pooling = Pooling::Mean;
  // Speculative decoding allowed (the engine's --speculative decides whether it happens); false
  // opts the request out. Either way its output is the same.
  bool speculative = true;
  // An encoder reranker's pair input (EngineApi::rank_pair_prompt): the index of the prompt's
  // first token of the second text (token type 1 where the model has two types), and the
  // finish delta's embedding holds the classification head's raw scores. -1: not a pair.
  int segment_b = -1;
  // The LoRA adapter to compute under, by the name it was loaded as (EngineApi::load_lora);
  // empty: the base model. An unknown name is refused at submit ("model_not_found").
  std::string lora;
};

enum class FinishReason { None, Stop, Length, Abort, Error };

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<TopLogprob> top;  // most likely first
};

// One piece of output for one choice. Text is UTF-8-complete and never contains (a prefix of)
// a stop string that may still match; tokens are the ids that produced it.
struct Delta {
  int index = 0;                 // choice index (0..n-1)
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // one per token when logprobs were requested
  // With GenerationRequest::prompt_logprobs >= 0, the first delta of each choice carries the
  // prompt's logprobs: entry i is for prompt token i + 1 (the first prompt token has none), so
  // there are prompt.size() - 1 entries. Empty on every other delta.
  std::vector<TokenLogprob> prompt_logprobs;
  // An embedding request's pooled, L2-normalized vector (model dim floats), on its finish delta.
  std::vector<float> embedding;
  FinishReason finish = FinishReason::None;
  std::string error;             // set when finish == Error
  // On a "stop" finish delta: the stop string (StopParams::stop) that ended the choice; ""
  // when an end-of-generation token, a stop token or a completed grammar ended it.
  std::string stop_string;
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;      // over all choices
  int cached_prompt_tokens = 0;   // served from the prefix cache
  // Where the request's time went, in seconds, as the engine saw it (final once done(); -1
  // when a phase never happened): submit -> first scheduled, -> first token (embeddings: the
  // prompt computed), -> last token.
  double queue_seconds = -1;
  double prefill_seconds = -1;
  double decode_seconds = -1;
  // Speculative decoding: tokens drafted for the request's choices and verified, and of those
  // the accepted (the rest were rejected).
  int spec_drafted_tokens = 0;
  int spec_accepted_tokens = 0;
};

// A submitted request. Thread-safe; owned jointly by the caller and the engine.
class RequestStream {
 public:
  virtual ~RequestStream() = default;
  // Next delta, waiting up to `timeout`; nullopt on timeout. After every choice has finished,
  // returns nullopt immediately and done() is true.
  virtual std::optional<Delta> next(std::chrono::milliseconds timeout) = 0;
  virtual bool done() const = 0;
  virtual Usage usage() const = 0;  // final once done()
  // Stops generation and frees the request's KV blocks on the engine's next step.
  virtual void abort() = 0;
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int kv_blocks_total = 0;
  int kv_blocks_used = 0;
  int kv_blocks_cached = 0;       // free but holding reusable prefix data
  int kv_block_size = 0;          // tokens per KV block
  uint64_t preemptions = 0;
  uint64_t prompt_tokens = 0;     // total prompt tokens processed (computed + cached)
  uint64_t prompt_tokens_cached = 0;
  uint64_t generation_tokens = 0;
  uint64_t steps = 0;             // forward passes done; the step loop's heartbeat
  double last_step_unix_s = 0;
  bool alive = false;             // the engine thread is running
  uint64_t prefill_tokens_computed = 0;  // prompt tokens actually run through the model (incl. recompute)
  uint64_t context_shifts = 0;
  double step_seconds = 0;     // time spent in steps (schedule + forward + sampling + outputs)
  double forward_seconds = 0;  // of which in model.forward
  // The persistent prefix cache (--kv-cache-dir) and its host-memory tier (--kv-host-memory).
  uint64_t kv_host_blocks = 0;           // blocks in the host tier now
  uint64_t kv_host_bytes = 0;            // ... and the bytes they take
  uint64_t kv_host_spilled = 0;          // evicted blocks copied to the host tier
  uint64_t kv_host_restored = 0;         // blocks copied back from it instead of recomputed
  uint64_t kv_disk_blocks_loaded = 0;    // blocks restored from the disk file at start
  uint64_t kv_disk_hits = 0;             // prefix hits on those blocks
  uint64_t kv_disk_blocks_saved = 0;     // blocks written by saves, summed over saves
  uint64_t kv_disk_saves = 0;            // successful saves
  uint64_t spec_drafted = 0;   // speculative decoding: drafted tokens verified
  uint64_t spec_accepted = 0;  // of those, accepted
  uint64_t spec_verifications = 0;  // decode steps of a sequence that verified a draft tree
  uint64_t spec_cost_skips = 0;     // speculating decodes the step-cost gate kept from drafting
  // Structured output: tokens the grammar forced after a sampled one, computed without a decode
  // step each (the decode steps saved).
  uint64_t forced_tokens = 0;
  const char* speculative = "none"; // the drafter (--speculative): none, ngram or draft
  int spec_draft_blocks_used = 0;   // --speculative draft: blocks of the draft model's own KV cache held
  // LoRA adapters: how many may be loaded at once (and so share a batch), those of running
  // requests and those of requests still waiting (names, each once).
  int max_loras = 0;
  std::vector<std::string> running_lora_adapters;
  std::vector<std::string> waiting_lora_adapters;
};

// A loaded LoRA adapter (EngineApi::lora_adapters).
struct LoraInfo {
  std::string name;
  std::string path;
  int max_rank = 0;
  float alpha = 0;
};

// What load_lora / unload_lora answer. code: "lora_unsupported" (the engine cannot serve
// adapters, or runtime loading is off), "lora_invalid" (the file is refused: error names the
// key or tensor), "lora_exists", "lora_slots_full", "lora_not_found".
struct LoraOpResult {
  bool ok = false;
  std::string error;
  std::string code;
};

// What POST /v1/cache/save reports (EngineApi::save_prefix_cache).
struct PrefixCacheSaveResult {
  bool ok = false;
  std::string error;        // when !ok
  bool not_configured = false;  // no --kv-cache-dir (an error of the request, not the server)
  std::string path;
  int blocks = 0;           // written
  int tokens = 0;           // blocks x block size
  int left_out = 0;         // over the size budget, or whose prefix was incomplete
  uint64_t bytes = 0;       // the file's size
  double seconds = 0;
};

// Structured output: what every token a request generates must spell, as the server reads it
// from response_format, tool_choice or the peers' extensions. Plain data; compile_constraint
// turns it into the grammar SamplingParams::grammar carries.
struct OutputConstraint {
  enum class Kind { JsonObject, JsonSchema, Gbnf, Regex, Choice };
  Kind kind = Kind::JsonObject;
  std::string source;                // JsonSchema: the schema's JSON text (key order kept);
                                     // Gbnf: llama.cpp GBNF; Regex: ECMA subset, whole output
  std::vector<std::string> choices;  // Choice: the output is exactly one of these
  bool flexible_whitespace = false;  // JSON kinds: bounded whitespace between tokens allowed
  std::string prefix, suffix;        // literal text around the constrained part (tool-call markers)
  // Reasoning models: free text first, up to and including the first `reasoning_end` ("</think>",
  // then up to 4 whitespace characters), and only then the constrained part. With
  // `reasoning_start` too, that block is optional and opens with it (the model may not think).
  // ASCII literals.
  std::string reasoning_start, reasoning_end;
};

// A constraint that cannot be compiled: a malformed schema, grammar or regex, a schema keyword
// pagoda does not enforce, or one over the size limits. what() names the problem.
struct ConstraintError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How many tokens a request generates at most: the one rule, owned by the engine (its context,
// --max-tokens-limit and context shift) and read by every caller through EngineApi.
struct MaxTokensRule {
  int context = 0;            // tokens per sequence
  int limit = 0;              // the largest max_tokens a request may ask for; 0: the context
  bool context_shift = true;  // off: generation also ends at the context

  // The largest max_tokens a request may ask for (a larger one is the client's error); with
  // context shift on, it is what bounds a generation that asked.
  int64_t cap() const { return limit > 0 ? limit : context; }
  // The max_tokens a request of `prompt_len` tokens runs with: `asked` when given (at most
  // cap()), else `unset_default` (<= 0: up to the context). Never past the context when context
  // shift is off or the request did not ask; at least 1 (a prompt-only answer drops that token).
  int resolve(std::optional<int64_t> asked, int unset_default, int prompt_len) const {
    const int room = context - prompt_len;
    int64_t n = asked ? *asked : unset_default > 0 ? unset_default : room;
    if (!context_shift || !asked) n = std::min<int64_t>(n, room);
    return static_cast<int>(std::max<int64_t>(1, n));
  }
};

struct SubmitError {
  std::string message;
  std::string code;  // e.g. "context_length_exceeded", "queue_full"
};

class EngineApi {
 public:
  virtual ~EngineApi() = default;
  // Returns the stream, or an error when the request can never run (too long) or the queue is
  // full. Never blocks on generation.
  virtual std::shared_ptr<RequestStream> submit(GenerationRequest req, SubmitError* err) = 0;
  virtual EngineStats stats() const = 0;
  virtual int context_size() const = 0;
  // The admission bound, in sequences (a request counts its n choices): submit answers
  // queue_full while this many are in flight. 0: no bound.
  virtual int admission_limit() const = 0;
  // Sequences submitted and not yet finished (shutdown waits for them; the HTTP layer compares
  // them with admission_limit to answer 429 before a request waits for a worker).
  virtual int inflight_seqs() const = 0;
  // The max_tokens rule requests are submitted under.
  virtual MaxTokensRule max_tokens_rule() const = 0;

  // ---- the model's vocabulary: what the server needs to make prompts of text and text of
  // tokens (it never sees the tokenizer itself) ----
  // Text -> token ids. `add_special`: BOS/EOS as the model wants them; `parse_special`:
  // control-token text ("<|im_start|>") becomes that token. Throws std::exception on failure.
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                        bool parse_special) const = 0;
  // tokenize(text, add_special, parse_special = true), except that control-token text inside
  // the byte ranges `plain` (sorted, disjoint [begin, end)) stays plain text: the client's text
  // inside a rendered chat prompt (Tokenizer::encode_marked).
  virtual std::vector<int32_t> tokenize_marked(std::string_view text, bool add_special,
                                               const std::vector<std::pair<size_t, size_t>>& plain) const = 0;
  // Token ids -> text, control tokens left out.
  virtual std::string detokenize(const std::vector<int32_t>& ids) const = 0;
  // One token's text; `special`: control tokens spelled out (otherwise they read as "").
  virtual std::string token_piece(int32_t id, bool special) const = 0;
  virtual int32_t vocab_size() const = 0;
  // The BOS id that tokenize(add_special = true) puts first; -1 when the model wants none.
  virtual int32_t prompt_bos_id() const = 0;
  // The pooling the model's GGUF names (`<arch>.pooling_type`): set for embedding models,
  // which the server scores by their embeddings; unset for generative ones (the default).
  virtual std::optional<Pooling> model_pooling() const { return std::nullopt; }
  // A cross-encoder reranker (an encoder whose GGUF has rank pooling and a classification head):
  // the prompt that scores texts `a` and `b` together, as its tokenizer joins a pair, and
  // where b's tokens start (for GenerationRequest::segment_b). nullopt for every other model.
  struct PairPrompt {
    std::vector<int32_t> ids;
    int segment_b = 0;
  };
  virtual std::optional<PairPrompt> rank_pair_prompt(std::string_view /*a*/, std::string_view /*b*/) const {
    return std::nullopt;
  }

  // Writes the prefix cache's blocks to the --kv-cache-dir file now (atomically), waiting for
  // it. An engine without one says so (the default).
  virtual PrefixCacheSaveResult save_prefix_cache() {
    PrefixCacheSaveResult r;
    r.not_configured = true;
    r.error = "the prefix cache is not persisted: the server runs without --kv-cache-dir";
    return r;
  }

  // The prefix cache as the KV event stream (--kv-events) names it: the event hash of every
  // block it holds now, and how many blocks it holds (the two differ only if the stream lost
  // one). Unset when the engine publishes no events (the default).
  struct CachedBlocks {
    std::vector<uint64_t> hashes;
    int blocks = 0;
  };
  virtual std::optional<CachedBlocks> cached_blocks() { return std::nullopt; }

  // ---- LoRA adapters (the defaults: none served) ----
  virtual std::vector<LoraInfo> lora_adapters() const { return {}; }
  // Loads the adapter file at `path` as `name`; requests name it in GenerationRequest::lora.
  virtual LoraOpResult load_lora(const std::string& name, const std::string& path) {
    (void)name, (void)path;
    return {false, "this engine does not serve LoRA adapters", "lora_unsupported"};
  }
  // Unloads `name`: new requests no longer find it; those running finish under it.
  virtual LoraOpResult unload_lora(const std::string& name) {
    (void)name;
    return {false, "this engine does not serve LoRA adapters", "lora_unsupported"};
  }

  // Compiles a constraint over the model's vocabulary for SamplingParams::grammar, on the
  // caller's thread (never the engine's); repeated constraints come from a cache. Throws
  // ConstraintError. An engine without a vocabulary cannot constrain (the default).
  virtual std::shared_ptr<const structured::CompiledGrammar> compile_constraint(
      const OutputConstraint& constraint) const {
    (void)constraint;
    throw ConstraintError("structured output is not available: the engine has no vocabulary");
  }
};

}  // namespace pagoda
