#include "engine/loop/engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <random>

#include <spdlog/spdlog.h>

#include "engine/kv/block_math.h"
#include "engine/loop/choice_text.h"
#include "engine/loop/forced_tokens.h"
#include "engine/speculative/draft_model.h"
#include "engine/sampling/embedding_pool.h"
#include "engine/loop/kv_budget.h"
#include "engine/model/model.h"
#include "engine/sampling/output_constraint.h"
#include "engine/loop/prompt_logprobs.h"
#include "engine/loop/request_stream.h"
#include "engine/sampling/sampling.h"
#include "engine/tokenizer/tokenizer.h"

namespace pagoda {

struct LlmEngine::Choice {
  std::optional<ChoiceText> text;  // set at admission
  bool reported = false;
  bool prompt_logprobs_sent = false;  // on its first delta
};

struct LlmEngine::Active {
  std::shared_ptr<const GenerationRequest> req;
  std::shared_ptr<ChannelStream> stream;
  std::shared_ptr<const LoraHandle> lora;       // the adapter it runs under (null: the base model)
  std::vector<std::shared_ptr<Sequence>> seqs;  // by choice index
  std::vector<Choice> choices;
  int unreported = 0;
  bool cached_reported = false;
  std::vector<TokenLogprob> prompt_logprobs;  // prompt tokens 1.. so far (prompt_logprobs >= 0)
  PooledEmbedding pool;                       // an embedding request's pooled rows so far
  // Phase times for Usage (queue, prefill, decode); unset time points are default-constructed.
  std::chrono::steady_clock::time_point submitted, admitted, first_token;
};

namespace {

// The widest window when every layer has one (phi3 with a sliding window), else 0: a global
// layer (gemma2/gemma3 alternate them with local ones) reads every position, so no block can go.
int all_layers_window(const ModelConfig& c) {
  int w = 0;
  for (int lw : c.layer_window) {
    if (lw <= 0) return 0;
    w = std::max(w, lw);
  }
  return w;
}

// True when the backend's sampler gives this request everything it asks for (see engine.h):
// masks, bias, penalties and filters all run there, and logprobs up to the alternatives a
// draw carries.
bool device_samplable(const SamplingParams& p) { return p.logprobs <= kMaxDrawTopLogprobs; }

// Target `seq`'s draw on the backend (see engine.h): the request's knobs, its bias and
// penalties as `edits` (token_edits of its output), the choice's seed, and counter = the tokens
// it generated so far, plus `depth`: the drafted tokens above a token tree's node
// (speculative.h), which count as generated (their edits are in `edits` too).
// (A constrained sequence's mask is added once the step's masks are ready.)
SampleRequest device_draw(const Sequence& seq, int logit_row, std::vector<TokenEdit> edits, size_t depth = 0) {
  const SamplingParams& sp = seq.request->sampling;
  SampleRequest d;
  d.row = logit_row;
  d.temperature = sp.temperature;
  d.top_k = sp.top_k;
  d.top_p = sp.top_p;
  d.min_p = sp.min_p;
  d.seed = seq.seed;
  d.counter = seq.output.size() + depth;
  d.repetition_penalty = sp.repetition_penalty;
  d.presence_penalty = sp.presence_penalty;
  d.frequency_penalty = sp.frequency_penalty;
  d.logprobs = sp.logprobs;
  d.token_edits = std::move(edits);
  return d;
}

// token_edits of seq's output: its request's bias and penalties so far.
std::vector<TokenEdit> output_edits(const Sequence& seq, int vocab) {
  return token_edits(seq.request->sampling, vocab, seq.request->prompt, seq.output);
}

// One draw per node of a verified token tree: node j's row with the path's drafted tokens
// above it (each an earlier draw of the walk, when the walk gets there). The output's edits are
// computed once; each node adds its path's few tokens.
void append_tree_draws(const Sequence& seq, const SampleTarget& target, int vocab, std::vector<SampleRequest>& draws) {
  const DraftTree& tree = *target.tree;
  const std::vector<TokenEdit> base = output_edits(seq, vocab);
  for (int node = 0; node < tree.size(); ++node) {
    std::vector<int32_t> path;
    for (int j = node; tree.parent[static_cast<size_t>(j)] >= 0; j = tree.parent[static_cast<size_t>(j)])
      path.push_back(tree.tokens[static_cast<size_t>(j)]);
    std::reverse(path.begin(), path.end());
    std::vector<TokenEdit> edits = base;
    add_output_tokens(edits, seq.request->sampling, vocab, path);
    draws.push_back(device_draw(seq, target.logit_row + node, std::move(edits), path.size()));
  }
}

double now_unix_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

LlmEngine::LlmEngine(Model& model, const Tokenizer* tokenizer, EngineConfig cfg)
    : model_(model), tokenizer_(tokenizer), cfg_(std::move(cfg)), inbox_(std::make_shared<Inbox>()) {
  const int B = cfg_.block_size;
  if (B <= 0 || B > 1024) throw EngineError("block size must be in 1..1024");
  if (cfg_.max_seqs <= 0) throw EngineError("max_seqs must be positive");
  if (cfg_.max_batch_tokens <= 0) throw EngineError("max_batch_tokens must be positive");
  vocab_ = model_.config().vocab_size;
  if (Pooling p; pooling_from_gguf(model_.config().pooling_type, p)) model_pooling_ = p;
  int ctx = cfg_.ctx_size > 0 ? cfg_.ctx_size : model_.config().ctx_train;
  if (ctx <= 0) ctx = 4096;
  model_.set_context_length(ctx);  // phi3's LongRoPE picks its factors from it

  size_t block_bytes = 0;
  try {
    block_bytes = model_.kv_block_bytes(B, cfg_.kv_types);  // K row + V row, each by its type
  } catch (const std::invalid_argument& e) {
    throw EngineError(e.what());
  }
  const int sys_blocks = ceil_div(static_cast<int>(cfg_.system_prompt.size()), B);
  KvBudget budget;
  try {
    budget = kv_budget(cfg_, model_.backend().memory_info(), block_bytes, ctx);
  } catch (const std::invalid_argument& e) {
    throw EngineError(e.what());
  }
  // The model's own blocks (padded steps' inert rows) come out of the budget too.
  const size_t reserved = static_cast<size_t>(model_.kv_reserved_blocks());
  const size_t n_blocks = budget.blocks > reserved ? budget.blocks - reserved : 0;
  if (n_blocks < static_cast<size_t>(sys_blocks) + 2)
    throw EngineError("the KV cache budget (" + budget.basis + ") holds " + std::to_string(n_blocks) +
                      " blocks of " + std::to_string(block_bytes) + " bytes; at least " +
                      std::to_string(sys_blocks + 2) + " are needed");
  num_blocks_ = static_cast<int>(std::min<size_t>(n_blocks, 1u << 30));
  ctx_limit_ = std::min(ctx, (num_blocks_ - sys_blocks) * B);
  if (ctx_limit_ <= B) throw EngineError("the context (" + std::to_string(ctx_limit_) + " tokens) must exceed one block");
  if (static_cast<int>(cfg_.system_prompt.size()) >= ctx_limit_)
    throw EngineError("the system prompt (" + std::to_string(cfg_.system_prompt.size()) +
                      " tokens) does not fit the context of " + std::to_string(ctx_limit_) + " tokens");
  for (int32_t t : cfg_.system_prompt)
    if (t < 0 || t >= vocab_) throw EngineError("system prompt token id out of range: " + std::to_string(t));

  if (cfg_.max_loras < 0) throw EngineError("max_loras must be >= 0");
  if (cfg_.max_loras > 0 && !model_.backend().supports_lora())
    throw EngineError("the " + model_.backend().name() +
                      " backend does not serve LoRA adapters (--lora, --max-loras, --allow-runtime-lora); "
                      "run with --device cpu, or without adapters");
  if (cfg_.max_lora_rank <= 0) throw EngineError("max_lora_rank must be positive");
  loras_ = std::make_unique<LoraRegistry>(cfg_.max_loras);
  model_.init_kv_cache(num_blocks_, B, cfg_.kv_types);
  kv_ = std::make_unique<KvCacheManager>(num_blocks_, B);
  kv_->set_prefix_caching(cfg_.prefix_caching);
  if (cfg_.release_behind_window) kv_->set_window(all_layers_window(model_.config()));
  setup_kv_events();
  setup_kv_tiers();
  SchedulerConfig sc;
  sc.max_batch_tokens = std::min(cfg_.max_batch_tokens, model_.max_batch_tokens());
  sc.max_seqs = cfg_.max_seqs;
  sc.ctx_limit = ctx_limit_;
  sc.context_shift = cfg_.context_shift;
  sc.max_step_ms = cfg_.max_step_ms;
  sc.step_cost = &step_cost_;
  if (tokenizer_) sc.is_eog = [tok = tokenizer_](int32_t t) { return tok->is_eog(t); };
  if (cfg_.speculative != SpeculativeMode::None) {
    sc.spec_tokens = std::clamp(cfg_.spec_tokens, 0, StepPlan::kMaxTreeTokens - 1);
    sc.draft = make_drafter();
    sc.spec_cost_gate = cfg_.spec_cost_gate;
  }
  scheduler_ = std::make_unique<Scheduler>(sc, *kv_);
  spdlog::info("engine: {} KV blocks of {} tokens{} ({} {:.1f} MiB; {}), context {} tokens, batch {} tokens, {} seqs",
               num_blocks_, B, reserved ? fmt::format(" and {} the model reserves", reserved) : std::string(),
               kv_types_name(cfg_.kv_types),
               (static_cast<size_t>(num_blocks_) + reserved) * static_cast<double>(block_bytes) / (1 << 20),
               budget.basis, ctx_limit_,
               sc.max_batch_tokens, sc.max_seqs);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.alive = true;
    stats_.kv_blocks_total = num_blocks_;
    stats_.kv_block_size = B;
    stats_.max_loras = cfg_.max_loras;
  }
  thread_ = std::thread([this] { loop(); });
}

LlmEngine::~LlmEngine() {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->stop = true;
  }
  inbox_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> LlmEngine::submit(GenerationRequest req, SubmitError* err) {
  auto fail = [&](std::string msg, std::string code) -> std::shared_ptr<RequestStream> {
    if (err) *err = {std::move(msg), std::move(code)};
    return nullptr;
  };
  if (req.prompt.empty()) return fail("the prompt is empty", "invalid_prompt");
  if (req.n < 1) return fail("n must be at least 1", "invalid_value");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= vocab_) return fail("token id " + std::to_string(t) + " is out of range", "invalid_prompt");
  if (req.embed) {
    // Nothing is generated: the prompt may fill the context, and there is one vector.
    if (req.n != 1) return fail("an embedding request has one choice", "invalid_value");
    if (static_cast<int>(req.prompt.size()) > ctx_limit_)
      return fail("the input has " + std::to_string(req.prompt.size()) + " tokens; this model's context is " +
                      std::to_string(ctx_limit_) + " tokens",
                  "context_length_exceeded");
    if (model_pooling_) req.pooling = *model_pooling_;
  } else if (static_cast<int>(req.prompt.size()) >= ctx_limit_)
    return fail("the prompt has " + std::to_string(req.prompt.size()) + " tokens; this model's context is " +
                    std::to_string(ctx_limit_) + " tokens, and at least one must remain for the completion",
                "context_length_exceeded");
  std::shared_ptr<const LoraHandle> lora;
  if (!req.lora.empty()) {
    lora = loras_->find(req.lora);
    if (!lora) return fail("The model `" + req.lora + "` does not exist.", "model_not_found");
  }
  // No limit asked for: up to the context (a shifting context would otherwise never end).
  if (req.stop.max_tokens <= 0)
    req.stop.max_tokens = max_tokens_rule().resolve(std::nullopt, 0, static_cast<int>(req.prompt.size()));
  // The one admission bound, in sequences: those in flight (submitted, some choice not yet
  // finished) stay within max_seqs running plus max_queue waiting.
  const int max_inflight = admission_limit();
  if (req.n > max_inflight)
    return fail("the request asks for " + std::to_string(req.n) + " sequences; this engine runs at most " +
                    std::to_string(max_inflight) + " at a time",
                "too_many_sequences");
  {
    // Check and count under one lock, so concurrent submits cannot overshoot the limit.
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (inflight_seqs_ + req.n > max_inflight) return fail("the request queue is full", "queue_full");
    inflight_seqs_ += req.n;
    ++queued_;
    if (lora) ++queued_loras_[lora->name];
  }

  auto a = std::make_shared<Active>();
  a->submitted = std::chrono::steady_clock::now();
  const std::string lora_name = lora ? lora->name : "";
  a->lora = std::move(lora);
  const int n = req.n;
  const int prompt_tokens = static_cast<int>(req.prompt.size());
  a->req = std::make_shared<const GenerationRequest>(std::move(req));
  std::weak_ptr<Inbox> weak = inbox_;
  a->stream = std::make_shared<ChannelStream>(n, prompt_tokens, [weak] {
    if (auto inbox = weak.lock()) {
      {
        std::lock_guard<std::mutex> lock(inbox->mu);
        inbox->aborts = true;
      }
      inbox->cv.notify_all();
    }
  });
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    stopping = inbox_->stop;
    if (!stopping) inbox_->pending.push_back(a);
  }
  if (stopping) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    --queued_;
    if (!lora_name.empty() && --queued_loras_[lora_name] == 0) queued_loras_.erase(lora_name);
    inflight_seqs_ -= n;
    return fail("the engine is shutting down", "engine_unavailable");
  }
  inbox_->cv.notify_all();
  return a->stream;
}

int LlmEngine::inflight_seqs() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return inflight_seqs_;
}

EngineStats LlmEngine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EngineStats s = stats_;
  s.waiting += queued_;
  // Requests not yet taken in wait too, and so do their adapters.
  for (const auto& [name, n] : queued_loras_) {
    auto listed = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), name) != v.end(); };
    if (!listed(s.running_lora_adapters) && !listed(s.waiting_lora_adapters)) s.waiting_lora_adapters.push_back(name);
  }
  return s;
}

bool LlmEngine::wait_system_prompt() {
  std::unique_lock<std::mutex> lock(sys_mu_);
  sys_cv_.wait(lock, [&] { return sys_done_; });
  return sys_ok_;
}

void LlmEngine::run_on_engine_thread(const std::function<void(Model&, KvCacheManager&)>& fn) {
  std::promise<void> done;
  std::function<void(Model&, KvCacheManager&)> call = [&](Model& m, KvCacheManager& kv) {
    try {
      fn(m, kv);
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  };
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (inbox_->closed) throw EngineError("the engine thread has stopped");
    inbox_->calls.push_back(&call);
  }
  inbox_->cv.notify_all();
  done.get_future().get();
}

void LlmEngine::prefill_system_prompt() {
  bool ok = false;
  if (!cfg_.system_prompt.empty()) {
    auto req = std::make_shared<GenerationRequest>();
    req->prompt = cfg_.system_prompt;
    system_seq_ = std::make_shared<Sequence>();
    system_seq_->id = next_id_++;
    system_seq_->request = req;
    system_seq_->tokens = req->prompt;
    system_seq_->sample = false;
    scheduler_->add(system_seq_);
    while (!system_seq_->finished()) step();
    ok = kv_->pinned_tokens() == static_cast<int>(cfg_.system_prompt.size());
    if (ok) spdlog::info("engine: system prompt of {} tokens prefilled and pinned", cfg_.system_prompt.size());
    else spdlog::error("engine: the system prompt could not be prefilled: {}", system_seq_->error);
  }
  std::lock_guard<std::mutex> lock(sys_mu_);
  sys_done_ = true;
  sys_ok_ = ok;
  sys_cv_.notify_all();
}

void LlmEngine::loop() {
  try {
    load_kv_file();
    prefill_system_prompt();
    publish_kv_events();
    while (take_inbox()) {
      if (scheduler_->has_work()) {
        step();
        heap_trim_.tick(/*idle=*/false);
      }
      publish_kv_events();
    }
    if (!cfg_.kv_cache_dir.empty()) save_kv_file();  // a clean stop: the cache outlives us
    log_spec_summary();
  } catch (const std::exception& e) {
    spdlog::critical("engine thread stopped: {}", e.what());
  }
  // Whatever is left ends now, so no reader waits forever.
  std::vector<std::shared_ptr<Active>> left;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->stop = true;
    inbox_->closed = true;
    left = std::move(inbox_->pending);
    for (auto* call : inbox_->calls) (*call)(model_, *kv_);
    inbox_->calls.clear();
  }
  for (auto& [id, a] : active_) left.push_back(a);
  for (auto& a : left) {
    for (int i = 0; i < a->req->n; ++i) {
      if (!a->choices.empty() && a->choices[i].reported) continue;
      Delta d;
      d.index = i;
      d.finish = FinishReason::Abort;
      a->stream->push(std::move(d));
    }
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.alive = false;
}

bool LlmEngine::take_inbox() {
  std::vector<std::shared_ptr<Active>> pending;
  std::vector<std::function<void(Model&, KvCacheManager&)>*> calls;
  bool aborts = false;
  {
    std::unique_lock<std::mutex> lock(inbox_->mu);
    if (!scheduler_->has_work()) {
      auto ready = [&] {
        return inbox_->stop || !inbox_->pending.empty() || inbox_->aborts || !inbox_->calls.empty();
      };
      // Rested a while with nothing to do: give the memory of past requests back first.
      if (!inbox_->cv.wait_for(lock, HeapTrim::kIdleGap, ready)) {
        lock.unlock();
        heap_trim_.tick(/*idle=*/true);
        lock.lock();
        inbox_->cv.wait(lock, ready);
      }
    }
    if (inbox_->stop) return false;
    pending.swap(inbox_->pending);
    calls.swap(inbox_->calls);
    aborts = inbox_->aborts;
    inbox_->aborts = false;
  }
  reclaim_lora_slots();  // before the calls: a load may want a slot just released
  for (auto* call : calls) (*call)(model_, *kv_);

  for (auto& a : pending) {
    const GenerationRequest& req = *a->req;
    const uint64_t base_seed = req.sampling.seed ? *req.sampling.seed : std::random_device{}();
    const int sys_len = static_cast<int>(cfg_.system_prompt.size());
    const bool starts_with_sys = sys_len > 0 && static_cast<int>(req.prompt.size()) > sys_len &&
                                 std::equal(cfg_.system_prompt.begin(), cfg_.system_prompt.end(), req.prompt.begin());
    const int n_keep = req.n_keep >= 0 ? req.n_keep : cfg_.n_keep >= 0 ? cfg_.n_keep : starts_with_sys ? sys_len : 0;
    // On the backend when it can sample; a speculating sequence too (a draw per tree node).
    const bool speculate = cfg_.speculative != SpeculativeMode::None && req.speculative && !req.embed &&
                           !req.sampling.grammar;
    const bool on_device = model_.backend().can_sample() && device_samplable(req.sampling);
    a->choices.resize(req.n);
    for (int i = 0; i < req.n; ++i) {
      auto seq = std::make_shared<Sequence>();
      seq->id = next_id_++;
      seq->index = i;
      seq->request = a->req;
      seq->n_keep = n_keep;
      seq->seed = base_seed + static_cast<uint64_t>(i);
      seq->rng.reseed(seq->seed);
      seq->speculate = speculate;
      seq->device_sampling = on_device;
      if (a->lora) {
        seq->lora_slot = a->lora->slot;
        seq->lora_key = a->lora->adapter->content_key();
      }
      seq->sample = !req.embed;
      if (req.sampling.grammar) seq->grammar.emplace(req.sampling.grammar);
      if (i == 0) {
        seq->tokens = req.prompt;
      } else {
        seq->status = SeqStatus::PendingFork;
        a->seqs[0]->siblings.push_back(seq);
      }
      a->seqs.push_back(seq);
      by_seq_[seq->id] = a;
      a->choices[i].text.emplace(tokenizer_, req.prompt, req.stop.stop);
    }
    a->unreported = req.n;
    active_[a->seqs[0]->id] = a;
    scheduler_->add(a->seqs[0]);
    if (a->stream->abort_requested()) aborts = true;
  }
  if (!pending.empty()) {
    // Moved from the inbox to the scheduler's queue in one go, as submit() counts them.
    std::lock_guard<std::mutex> lock(stats_mu_);
    queued_ -= static_cast<int>(pending.size());
    for (const auto& a : pending)
      if (a->lora && --queued_loras_[a->lora->name] == 0) queued_loras_.erase(a->lora->name);
    queue_stats(stats_);
  }
  if (aborts) {
    for (auto& [id, a] : active_)
      if (a->stream->abort_requested())
        for (auto& seq : a->seqs) scheduler_->finish(seq, FinishReason::Abort);
    report_finished();
    update_stats(false);
  }
  return true;
}

void LlmEngine::step() {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const ScheduledStep step = scheduler_->next_step();
  const StepPlan& plan = step.plan;
  {
    // Admission changed the queue: publish it before any output can prompt a new submit.
    std::lock_guard<std::mutex> lock(stats_mu_);
    queue_stats(stats_);
  }
  if (plan.n_tokens() > 0) {
    for (const SeqInStep& s : plan.seqs)  // a request's first step ends its time in the queue
      if (auto it = by_seq_.find(s.seq_id); it != by_seq_.end() && it->second->admitted == clock::time_point{})
        it->second->admitted = t0;
    const std::vector<SampleTarget>& targets = step.targets;
    // Targets sampled on the device become draws; draw_of[j] is target j's draw or -1.
    draws_.clear();
    std::vector<int> draw_of(targets.size(), -1);
    for (size_t j = 0; j < targets.size(); ++j) {
      const Sequence& seq = *targets[j].seq;
      if (!seq.device_sampling) continue;
      draw_of[j] = static_cast<int>(draws_.size());
      if (targets[j].tree) append_tree_draws(seq, targets[j], vocab_, draws_);
      else draws_.push_back(device_draw(seq, targets[j].logit_row, output_edits(seq, vocab_)));
    }
    // Structured output: the constrained rows' token masks are computed while the model runs.
    // A device-drawn row's mask goes up with the step's draws: the draw points at it now, and
    // the model waits for the masks (before_draws) only once the layers are issued.
    const bool constrained = start_grammar_masks(targets);
    bool device_masks = false;
    if (constrained)
      for (size_t j = 0; j < targets.size(); ++j) {
        if (draw_of[j] < 0 || !targets[j].seq->grammar) continue;
        SampleRequest& d = draws_[static_cast<size_t>(draw_of[j])];
        d.mask = masks_->mask(j);
        d.mask_words = masks_->words();
        device_masks = true;
      }
    try {
      const auto tf = clock::now();
      model_.forward(plan, draws_, logits_, device_masks ? std::function<void()>([this] { masks_->wait(); }) : nullptr);
      forward_s_ += std::chrono::duration<double>(clock::now() - tf).count();
    } catch (const std::exception& e) {
      if (constrained) masks_->wait();  // the workers read the matchers
      spdlog::error("engine: forward pass failed: {}", e.what());
      fail_running(std::string("forward pass failed: ") + e.what());
      report_finished();
      update_stats(false);
      return;
    }
    // Prompt logprobs come from logit rows no draw reads.
    for (const PromptLogprobRows& r : step.prompt_rows)
      if (auto it = by_seq_.find(r.seq->id); it != by_seq_.end())
        append_prompt_logprobs(r, logits_, it->second->prompt_logprobs);
    // Embedding requests pool the hidden rows of their prompt positions.
    for (const HiddenRows& r : step.hidden_rows)
      if (auto it = by_seq_.find(r.seq->id); it != by_seq_.end())
        for (int k = 0; k < r.n; ++k) it->second->pool.add(logits_.hidden_row(r.first_row + k));
    std::vector<std::vector<int32_t>> sampled(targets.size());
    std::vector<std::vector<SampleResult>> results(targets.size(), std::vector<SampleResult>(1));
    std::vector<char> grammar_dead(targets.size(), 0);  // the grammar allowed no token
    if (constrained) masks_->wait();
    // Structured output: the mask went with the draw, or the host sampler applies it to the
    // row itself (sampling.h, step 0). A mask that allows nothing ends its sequence below.
    std::vector<size_t> host_sampled;  // targets the host samples
    for (size_t j = 0; j < targets.size(); ++j) {
      if (targets[j].tree) continue;
      const uint32_t* mask = constrained ? masks_->mask(j) : nullptr;
      if (mask && allowed_tokens(mask, vocab_) == 0) grammar_dead[j] = 1;
      else if (draw_of[j] < 0) host_sampled.push_back(j);
    }
    // A host draw reads only its logits row, its request and its own sequence's generator, so
    // the rows are sampled at once on the backend's threads (idle now).
    model_.backend().run_host_tasks(static_cast<int64_t>(host_sampled.size()), [&](int64_t i) {
      const size_t j = host_sampled[static_cast<size_t>(i)];
      Sequence& seq = *targets[j].seq;
      const std::span<const float> row = logits_.host_row(targets[j].logit_row);
      results[j][0] = sample_token(row.data(), vocab_, seq.request->sampling, seq.request->prompt, seq.output,
                                   seq.rng, constrained ? masks_->mask(j) : nullptr);
    });
    for (size_t j = 0; j < targets.size(); ++j) {
      Sequence& seq = *targets[j].seq;
      if (targets[j].tree) {
        results[j] = verify_tree(targets[j], draw_of[j]);
        for (const SampleResult& r : results[j]) sampled[j].push_back(r.token);
        continue;
      }
      SampleResult& result = results[j][0];
      if (grammar_dead[j]) {
        result.token = tokenizer_ && tokenizer_->eos_id() >= 0 ? tokenizer_->eos_id() : 0;  // a placeholder
      } else if (draw_of[j] >= 0) {
        result = drawn_result(static_cast<size_t>(draw_of[j]), seq);
      }
      sampled[j] = {result.token};
      if (cfg_.forced_tokens && seq.grammar && !grammar_dead[j] && tokenizer_) append_forced(seq, sampled[j], results[j]);
    }
    // Each target's sequence took the first taken[j] of its tokens (the results of the same
    // index): one output per token taken, in target order.
    const std::vector<int> taken = scheduler_->take_emitted(sampled);
    std::vector<std::shared_ptr<Sequence>> updated;
    std::vector<SampleResult> ordered;
    for (size_t j = 0; j < targets.size(); ++j)
      for (int k = 0; k < taken[j]; ++k) {
        const std::shared_ptr<Sequence>& seq = targets[j].seq;
        if (seq->grammar) advance_grammar(seq, results[j][static_cast<size_t>(k)].token, grammar_dead[j] != 0);
        updated.push_back(seq);
        ordered.push_back(std::move(results[j][static_cast<size_t>(k)]));
      }
    emit_outputs(updated, ordered);
  }
  report_finished();
  const double took_s = std::chrono::duration<double>(clock::now() - t0).count();
  step_s_ += took_s;
  if (plan.n_tokens() > 0) {
    const bool prefill = std::any_of(plan.seqs.begin(), plan.seqs.end(), [](const SeqInStep& s) { return s.n_tokens > 1; });
    const StepFeatures f = StepFeatures::of(plan);
    const double predicted = step_cost_.predict_ms(f);
    step_cost_.observe(f, took_s * 1e3, prefill);
    const auto& c = step_cost_.coefficients();
    spdlog::debug("engine: step of {} tokens ({} rows, {:.0f} pairs) took {:.2f} ms, predicted {:.2f}; "
                  "cost model {:.3f} + {:.4f}/token + {:.4f}/row + {:.4f}/Mpair ms, x {:.2f} with prompt tokens",
                  f.tokens, f.logit_rows, f.attention_pairs, took_s * 1e3, predicted, c[0], c[1], c[2], c[3],
                  step_cost_.prompt_correction());
  }
  update_stats(plan.n_tokens() > 0);
}

bool LlmEngine::start_grammar_masks(const std::vector<SampleTarget>& targets) {
  std::vector<const structured::GrammarMatcher*> matchers(targets.size(), nullptr);
  size_t words = (static_cast<size_t>(vocab_) + 31) / 32;
  bool any = false;
  for (size_t j = 0; j < targets.size(); ++j) {
    const Sequence& seq = *targets[j].seq;
    if (!seq.grammar) continue;
    matchers[j] = &*seq.grammar;
    words = std::max(words, seq.grammar->grammar()->vocabulary()->mask_words());
    any = true;
  }
  if (!any) return false;
  if (!masks_) {
    // Mask workers run beside the forward pass's own threads: a couple is enough to hide a
    // batch's masks behind the model, and they sleep between constrained steps.
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    masks_ = std::make_unique<StepMasks>(static_cast<int>(std::min(4u, std::max(1u, hw / 2))));
  }
  masks_->start(std::move(matchers), words);
  return true;
}

// Forced tokens one step appends at most (a longer forced text continues at the next step).
constexpr int kMaxForcedTokens = 32;

void LlmEngine::append_forced(const Sequence& seq, std::vector<int32_t>& tokens,
                              std::vector<SampleResult>& results) const {
  structured::GrammarMatcher after = *seq.grammar;
  if (!after.accept_token(tokens[0])) return;
  // Room: the context (the chunk and the token sampled after it must fit) and max_tokens.
  int room = std::min(kMaxForcedTokens, ctx_limit_ - seq.num_tokens() - 2);
  if (seq.request->stop.max_tokens > 0)
    room = std::min(room, seq.request->stop.max_tokens - static_cast<int>(seq.output.size()) - 1);
  for (int32_t id : forced_tokens(after, *tokenizer_, tokens[0], room)) {
    tokens.push_back(id);
    SampleResult r;
    r.token = id;
    r.logprob = 0;
    results.push_back(std::move(r));
  }
}

void LlmEngine::advance_grammar(const std::shared_ptr<Sequence>& seq, int32_t token, bool dead) {
  if (dead) {
    scheduler_->finish(seq, FinishReason::Error,
                       "structured output: no token of the vocabulary can continue the grammar here");
    return;
  }
  structured::GrammarMatcher& g = *seq->grammar;
  if (!g.accept_token(token)) {
    scheduler_->finish(seq, FinishReason::Error, "structured output: the sampled token left the grammar");
    return;
  }
  // Once the grammar is complete and nothing may follow, the choice ends as if it had drawn
  // the end-of-generation token it would be left with.
  if ((g.is_terminated() || g.is_finished()) && !seq->finished()) scheduler_->finish(seq, FinishReason::Stop);
}

void LlmEngine::emit_outputs(const std::vector<std::shared_ptr<Sequence>>& updated,
                             const std::vector<SampleResult>& results) {
  for (size_t k = 0; k < updated.size(); ++k) {
    const std::shared_ptr<Sequence>& seq = updated[k];
    auto it = by_seq_.find(seq->id);
    if (it == by_seq_.end()) continue;
    Active& a = *it->second;
    Choice& c = a.choices[seq->index];
    if (c.reported) continue;
    const int32_t tok = results[k].token;
    // A sequence that took several tokens this step (speculation) ends with its last one.
    const bool ends_here = seq->finished() && (k + 1 == updated.size() || updated[k + 1] != seq);
    if (a.first_token == std::chrono::steady_clock::time_point{}) a.first_token = std::chrono::steady_clock::now();
    if (!a.cached_reported && seq->cached_prompt_tokens >= 0) {
      a.stream->set_cached_prompt_tokens(seq->cached_prompt_tokens);
      a.cached_reported = true;
    }

    Delta d;
    d.index = seq->index;
    d.tokens = {tok};
    if (seq->request->sampling.logprobs >= 0)
      d.logprobs.push_back({tok, results[k].logprob, results[k].top});
    if (seq->request->prompt_logprobs >= 0 && !c.prompt_logprobs_sent) {
      d.prompt_logprobs = a.prompt_logprobs;
      c.prompt_logprobs_sent = true;
    }
    // A stop token (EOS/EOG or stop_token_ids) ends the text without appearing in it.
    // (A grammar that completed ends its choice with "stop" on its last real token, which is
    // text: advance_grammar.)
    const bool grammar_completed = seq->grammar && seq->grammar->is_finished() && !seq->grammar->is_terminated();
    const bool stop_token = ends_here && seq->finish == FinishReason::Stop && !grammar_completed;
    std::string text = c.text->push(tok, stop_token);
    if (c.text->stopped()) scheduler_->finish(seq, FinishReason::Stop);
    if (ends_here || c.text->stopped()) {
      text += c.text->finish();
      if (c.text->stopped()) {
        seq->finish = FinishReason::Stop;
        d.stop_string = c.text->stop_string();
      }
      d.finish = seq->finish;
      d.error = seq->error;
      c.reported = true;
      choice_finished(a);
    }
    d.text = std::move(text);
    a.stream->push(std::move(d));
  }
}

void LlmEngine::report_finished() {
  for (const auto& seq : scheduler_->take_finished()) {
    forget_draft(seq->id);
    auto it = by_seq_.find(seq->id);
    if (it == by_seq_.end()) continue;  // the system prompt
    Active& a = *it->second;
    Choice& c = a.choices[seq->index];
    if (!c.reported) {
      Delta d;
      d.index = seq->index;
      d.finish = seq->finish;
      d.error = seq->error;
      if (a.req->embed && seq->finish == FinishReason::Stop) {
        a.stream->set_cached_prompt_tokens(std::max(0, seq->cached_prompt_tokens));
        d.embedding = a.pool.finish();
      }
      c.reported = true;
      choice_finished(a);
      a.stream->push(std::move(d));
    }
  }
  // Forget requests whose every choice has been reported.
  for (auto it = active_.begin(); it != active_.end();) {
    if (it->second->unreported == 0) {
      for (const auto& seq : it->second->seqs) by_seq_.erase(seq->id);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
}

void LlmEngine::choice_finished(Active& a) {
  if (--a.unreported == 0) {
    using clock = std::chrono::steady_clock;
    const clock::time_point now = clock::now(), none{};
    auto secs = [](clock::time_point from, clock::time_point to) {
      return std::chrono::duration<double>(to - from).count();
    };
    // An embedding's prompt ends its prefill; it has no decode.
    const clock::time_point prefilled = a.first_token != none ? a.first_token : a.req->embed ? now : none;
    a.stream->set_timings(a.admitted != none ? secs(a.submitted, a.admitted) : -1,
                          a.admitted != none && prefilled != none ? secs(a.admitted, prefilled) : -1,
                          a.first_token != none ? secs(a.first_token, now) : -1);
    int drafted = 0, accepted = 0;
    for (const auto& seq : a.seqs) drafted += seq->spec.drafted_total, accepted += seq->spec.accepted_total;
    a.stream->set_speculation(drafted, accepted);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  --inflight_seqs_;
}

void LlmEngine::fail_running(const std::string& message) {
  std::vector<std::shared_ptr<Sequence>> running;
  for (auto& [id, a] : active_)
    for (auto& seq : a->seqs)
      if (seq->status == SeqStatus::Running) running.push_back(seq);
  if (system_seq_ && system_seq_->status == SeqStatus::Running) running.push_back(system_seq_);
  for (auto& seq : running) scheduler_->finish(seq, FinishReason::Error, message);
}

void LlmEngine::update_stats(bool stepped) {
  const BlockPoolStats ps = kv_->pool().stats();
  const SchedulerCounters& c = scheduler_->counters();
  std::lock_guard<std::mutex> lock(stats_mu_);
  queue_stats(stats_);
  stats_.kv_blocks_total = ps.total;
  stats_.kv_blocks_used = ps.used;
  stats_.kv_blocks_cached = ps.cached;
  stats_.preemptions = c.preemptions;
  stats_.prompt_tokens = c.prompt_tokens;
  stats_.prompt_tokens_cached = c.prompt_tokens_cached;
  stats_.generation_tokens = c.generation_tokens;
  stats_.prefill_tokens_computed = c.prefill_tokens_computed;
  stats_.context_shifts = c.context_shifts;
  stats_.step_seconds = step_s_;
  stats_.forward_seconds = forward_s_;
  const KvCacheManager::TierCounters& tc = kv_->tier_counters();
  stats_.kv_host_blocks = host_tier_ ? host_tier_->size() : 0;
  stats_.kv_host_bytes = host_tier_ ? host_tier_->bytes() : 0;
  stats_.kv_host_spilled = tc.spilled;
  stats_.kv_host_restored = tc.restored;
  stats_.kv_disk_hits = tc.disk_hits;
  stats_.kv_disk_blocks_loaded = kv_disk_loaded_;
  stats_.kv_disk_blocks_saved = kv_disk_saved_;
  stats_.kv_disk_saves = kv_disk_saves_;
  stats_.spec_drafted = c.spec_drafted;
  stats_.spec_accepted = c.spec_accepted;
  stats_.spec_verifications = c.spec_verifications;
  stats_.spec_cost_skips = c.spec_cost_skips;
  stats_.forced_tokens = c.forced_tokens;
  stats_.speculative = speculative_mode_name(cfg_.speculative);
  stats_.spec_draft_blocks_used = draft_blocks_in_use();
  if (stepped) {
    ++stats_.steps;
    stats_.last_step_unix_s = now_unix_s();
  }
}

void LlmEngine::queue_stats(EngineStats& s) const {
  s.running = scheduler_->num_running();
  s.waiting = scheduler_->num_waiting();
  s.max_loras = cfg_.max_loras;
  s.running_lora_adapters.clear();
  s.waiting_lora_adapters.clear();
  auto add = [](std::vector<std::string>& names, const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  for (const auto& [id, a] : active_) {
    if (!a->lora) continue;
    const bool running = std::any_of(a->seqs.begin(), a->seqs.end(),
                                     [](const auto& q) { return q->status == SeqStatus::Running; });
    add(running ? s.running_lora_adapters : s.waiting_lora_adapters, a->lora->name);
  }
}

}  // namespace pagoda
