// LlmEngine's part in speculative decoding (engine.h, speculative.h): the drafter the
// scheduler calls, and the acceptance walk over a verified tree's logit rows.
#include <spdlog/spdlog.h>

#include "engine/speculative/draft_model.h"
#include "engine/loop/engine.h"

namespace pagoda {

std::function<DraftTree(const Sequence&, int)> LlmEngine::make_drafter() {
  if (cfg_.custom_drafter) return cfg_.custom_drafter;
  if (cfg_.speculative == SpeculativeMode::Ngram) {
    NgramDraftConfig ng;
    ng.branches = cfg_.spec_tree;
    return [ng](const Sequence& seq, int max_draft) { return ngram_draft(seq.tokens, max_draft, ng); };
  }
  if (!cfg_.draft_model) throw EngineError("--speculative draft needs a draft model (--draft-model)");
  if (cfg_.draft_model->config().vocab_size != vocab_)
    throw EngineError("the draft model's vocabulary (" + std::to_string(cfg_.draft_model->config().vocab_size) +
                      " tokens) differs from the model's (" + std::to_string(vocab_) + ")");
  draft_ = std::make_unique<DraftModelDrafter>(*cfg_.draft_model, cfg_.block_size, cfg_.max_seqs, ctx_limit_,
                                               cfg_.spec_tree);
  spdlog::info("engine: draft model with {} KV blocks of its own", draft_->num_blocks());
  return [d = draft_.get()](const Sequence& seq, int max_draft) {
    return d->draft(seq.id, seq.tokens, seq.n_shifts, max_draft);
  };
}

SampleResult LlmEngine::drawn_result(size_t draw, const Sequence& seq) const {
  SampleResult r;
  r.token = logits_.drawn()[draw];
  if (seq.request->sampling.logprobs >= 0) {
    const DrawLogprobs& lp = logits_.drawn_logprobs()[draw];
    r.logprob = lp.logprob;
    for (int k = 0; k < lp.n_top; ++k) r.top.push_back({lp.top_id[k], lp.top_logprob[k]});
  }
  return r;
}

std::vector<SampleResult> LlmEngine::verify_tree(const SampleTarget& target, int first_draw) {
  Sequence& seq = *target.seq;
  if (first_draw >= 0)  // drawn on the backend, node j by draw first_draw + j
    return walk_tree(*target.tree, [&](int node) { return drawn_result(static_cast<size_t>(first_draw + node), seq); });
  std::vector<int32_t> history = seq.output;  // the penalties see the tokens drawn before
  return walk_tree(*target.tree, [&](int node) {
    const std::span<const float> row = logits_.host_row(target.logit_row + node);
    SampleResult r = sample_token(row.data(), vocab_, seq.request->sampling, seq.request->prompt, history, seq.rng);
    history.push_back(r.token);
    return r;
  });
}

void LlmEngine::log_spec_summary() const {
  if (cfg_.speculative == SpeculativeMode::None) return;
  const SchedulerCounters& c = scheduler_->counters();
  spdlog::info("engine: speculative decoding ({}): {} tokens drafted, {} accepted ({:.0f}%), {} verify steps, "
               "{} decodes not drafted for cost",
               speculative_mode_name(cfg_.speculative), c.spec_drafted, c.spec_accepted,
               c.spec_drafted ? 100.0 * static_cast<double>(c.spec_accepted) / static_cast<double>(c.spec_drafted) : 0.0,
               c.spec_verifications, c.spec_cost_skips);
}

int LlmEngine::draft_blocks_in_use() const { return draft_ ? draft_->blocks_in_use() : 0; }

void LlmEngine::forget_draft(uint64_t seq_id) {
  if (draft_) draft_->forget(seq_id);
}

}  // namespace pagoda
