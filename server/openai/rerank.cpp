// Handlers::rerank and Handlers::score, and the scoring both share (score_pairs): a
// cross-encoder reranker (an encoder with a classification head) scores each pair as one input,
// the relevance being its head's first output; an embedding model (its GGUF names a pooling
// type) scores a pair by the cosine similarity of the two texts' pooled embeddings; any other model is read as a generative reranker (Qwen3-Reranker's
// way): the pair goes into a judging prompt through the chat template, and the score is the
// probability of "yes" against "no" as the next token. Every text or prompt of a call is one
// prefill request, batched by the engine's scheduler with other traffic.
#include <limits>

#include "server/openai/handlers.h"
#include "server/openai/request_parse.h"
#include "server/openai/rerank.h"

namespace pagoda::server {

namespace {

constexpr const char* kJudgeSystem =
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    "Note that the answer can only be \"yes\" or \"no\".";
constexpr const char* kJudgeInstruct = "Given a web search query, retrieve relevant passages that answer the query";
// Added to both answer tokens' logits: they become the two most likely tokens, so both are in
// the top logprobs, and their difference (all the score reads) is unchanged.
constexpr float kAnswerBias = 100.0f;

}  // namespace

std::vector<double> Handlers::score_pairs(const httplib::Request& req, const ScorePairs& pairs, int* tokens) {
  const int ctx = engine_.context_size();
  std::vector<GenerationRequest> reqs;
  if (pairs.size() > 0 && engine_.rank_pair_prompt("", "")) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      std::optional<EngineApi::PairPrompt> p;
      try {
        p = engine_.rank_pair_prompt(pairs.left_of(i), pairs.right[i]);
      } catch (const std::exception& e) {
        throw ApiError(400, "Invalid value for '" + pairs.right_name(i) + "': " + e.what(), "invalid_request_error",
                       pairs.right_name(i));
      }
      if (static_cast<int>(p->ids.size()) > ctx) throw context_exceeded(ctx, pairs.right_name(i), p->ids.size());
      GenerationRequest gr;
      gr.prompt = std::move(p->ids);
      gr.segment_b = p->segment_b;
      gr.embed = true;
      reqs.push_back(std::move(gr));
    }
    std::vector<PrefillResult> done = run_prefill_batch(req, std::move(reqs), pairs.right_param);
    std::vector<double> scores;
    for (const PrefillResult& r : done) {
      if (r.last.embedding.empty())
        throw ApiError(500, "The score could not be computed.", "server_error", "", "score_failed");
      scores.push_back(r.last.embedding[0]);
      *tokens += r.usage.prompt_tokens;
    }
    return scores;
  }
  if (const std::optional<Pooling> pooling = engine_.model_pooling()) {
    // Left texts first, then right ones: each embedded once.
    auto add = [&](const std::string& text, const std::string& param) {
      GenerationRequest gr;
      try {
        gr.prompt = encode_prompt(text);
      } catch (const std::exception& e) {
        throw ApiError(400, "Invalid value for '" + param + "': " + e.what(), "invalid_request_error", param);
      }
      if (gr.prompt.empty())
        throw ApiError(400, "Invalid value for '" + param + "': it has no tokens.", "invalid_request_error", param);
      if (static_cast<int>(gr.prompt.size()) > ctx) throw context_exceeded(ctx, param, gr.prompt.size());
      gr.embed = true;
      gr.pooling = *pooling;
      reqs.push_back(std::move(gr));
    };
    for (size_t i = 0; i < pairs.left.size(); ++i) add(pairs.left[i], pairs.left_name(i));
    for (size_t i = 0; i < pairs.right.size(); ++i) add(pairs.right[i], pairs.right_name(i));
    std::vector<PrefillResult> done = run_prefill_batch(req, std::move(reqs), pairs.right_param);
    for (const PrefillResult& r : done) {
      if (r.last.embedding.empty())
        throw ApiError(500, "The embedding could not be computed.", "server_error", "", "embedding_failed");
      *tokens += r.usage.prompt_tokens;
    }
    const size_t nl = pairs.left.size();
    std::vector<double> scores(pairs.size());
    for (size_t i = 0; i < scores.size(); ++i)
      scores[i] = cosine_similarity(done[nl == 1 ? 0 : i].last.embedding, done[nl + i].last.embedding);
    return scores;
  }

  // A generative reranker: the answer tokens are the first tokens of "yes" and "no".
  const std::vector<int32_t> yes = engine_.tokenize("yes", /*add_special=*/false, /*parse_special=*/false);
  const std::vector<int32_t> no = engine_.tokenize("no", /*add_special=*/false, /*parse_special=*/false);
  if (yes.empty() || no.empty() || yes[0] == no[0])
    throw ApiError(400, "This model cannot score texts: its vocabulary does not tell 'yes' from 'no'.",
                   "invalid_request_error", "model", "model_not_supported");
  for (size_t i = 0; i < pairs.size(); ++i) {
    ChatRequest cr;
    cr.messages = RequestJson::array();
    cr.messages.push_back({{"role", "system"}, {"content", kJudgeSystem}});
    cr.messages.push_back({{"role", "user"},
                           {"content", std::string("<Instruct>: ") + kJudgeInstruct + "\n<Query>: " +
                                           pairs.left_of(i) + "\n<Document>: " + pairs.right[i]}});
    cr.template_variables = {{"enable_thinking", false}};
    GenerationRequest gr;
    gr.prompt = chat_prompt(cr).ids;
    // One token is generated after the prompt: the prompt must leave room for it.
    if (static_cast<int>(gr.prompt.size()) >= ctx) throw context_exceeded(ctx, pairs.right_name(i), gr.prompt.size());
    gr.sampling.temperature = 0;
    gr.sampling.logprobs = 2;
    gr.sampling.logit_bias = {{yes[0], kAnswerBias}, {no[0], kAnswerBias}};
    gr.stop.max_tokens = 1;
    gr.stop.ignore_eos = true;
    gr.speculative = false;
    reqs.push_back(std::move(gr));
  }
  std::vector<PrefillResult> done = run_prefill_batch(req, std::move(reqs), pairs.right_param);
  std::vector<double> scores;
  for (const PrefillResult& r : done) {
    if (r.logprobs.empty())
      throw ApiError(500, "The score could not be computed.", "server_error", "", "score_failed");
    double lp_yes = -std::numeric_limits<double>::infinity(), lp_no = lp_yes;
    for (const TopLogprob& t : r.logprobs[0].top) {
      if (t.token == yes[0]) lp_yes = t.logprob;
      if (t.token == no[0]) lp_no = t.logprob;
    }
    scores.push_back(yes_no_score(lp_yes, lp_no));
    *tokens += r.usage.prompt_tokens;
  }
  return scores;
}

void Handlers::rerank(const httplib::Request& req, httplib::Response& res,
                      const std::shared_ptr<AccessRecord>& record) {
  try {
    RerankRequest rr = parse_rerank_request(parse_json_body(req.body));
    const std::string model = served_model(rr.model);
    record->request_id = new_id("rerank-");
    res.set_header("X-Request-Id", record->request_id);
    int tokens = 0;
    const std::vector<double> scores = score_pairs(req, rr.pairs, &tokens);
    record->prompt_tokens = tokens;
    send_json(res, rerank_response(rr, record->request_id, model, scores, tokens));
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void Handlers::score(const httplib::Request& req, httplib::Response& res,
                     const std::shared_ptr<AccessRecord>& record) {
  try {
    ScoreRequest sr = parse_score_request(parse_json_body(req.body));
    const std::string model = served_model(sr.model);
    record->request_id = new_id("score-");
    res.set_header("X-Request-Id", record->request_id);
    int tokens = 0;
    const std::vector<double> scores = score_pairs(req, sr.pairs, &tokens);
    record->prompt_tokens = tokens;
    send_json(res, score_response(record->request_id, model, static_cast<int64_t>(unix_now()), scores, tokens));
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

}  // namespace pagoda::server
