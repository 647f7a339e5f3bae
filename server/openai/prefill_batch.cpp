// Handlers::run_prefill_batch: the requests of one API call that each end after their prompt
// (embeddings, rerank and score: nothing or one token generated), submitted together so that
// the engine's scheduler batches them with each other and with generation traffic, and awaited
// in order.
#include <chrono>

#include "server/http/connection_probe.h"
#include "server/http/metrics.h"
#include "server/openai/handlers.h"

namespace pagoda::server {

ApiError Handlers::context_exceeded(int context, const std::string& param, size_t tokens) {
  return ApiError(400,
                  "This model's maximum context length is " + std::to_string(context) + " tokens. However, " +
                      param + " has " + std::to_string(tokens) + " tokens. Please reduce its length.",
                  "invalid_request_error", param, "context_length_exceeded");
}

std::vector<Handlers::PrefillResult> Handlers::run_prefill_batch(const httplib::Request& req,
                                                                 std::vector<GenerationRequest> reqs,
                                                                 const std::string& param) {
  // Requests are submitted before any is awaited, so they share the engine's batches; when the
  // engine's admission bound is reached, the rest wait for this call's earlier requests to
  // finish (a client's batch of thousands never needs the whole queue at once).
  std::vector<std::shared_ptr<RequestStream>> streams;
  struct Untrack {
    Handlers* h;
    std::vector<std::shared_ptr<RequestStream>>* streams;
    ~Untrack() {
      for (auto& s : *streams) {
        if (!s->done()) s->abort();
        h->untrack(s);
      }
    }
  } untrack_all{this, &streams};
  const ConnectionProbe probe(req);
  const auto start = std::chrono::steady_clock::now();
  std::vector<PrefillResult> out(reqs.size());
  for (size_t done = 0; done < reqs.size(); ++done) {
    while (streams.size() < reqs.size()) {
      GenerationRequest gr = reqs[streams.size()];  // a copy: a refused submit is retried
      SubmitError err;
      std::shared_ptr<RequestStream> st = engine_.submit(std::move(gr), &err);
      if (!st && err.code == "queue_full" && streams.size() > done)
        break;  // retried once an earlier request of this call has finished
      if (!st) throw submit_error(err, param);
      track(st);
      streams.push_back(std::move(st));
      last_submit_unix_s_ = unix_now();
    }
    PrefillResult& r = out[done];
    for (;;) {
      if (opts_.timeout_s > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > opts_.timeout_s) {
        metrics_.record_aborted();
        throw ApiError(408, "The request timed out.", "timeout_error", "", "timeout");
      }
      if (probe.closed()) {  // nobody will read the answer; ~Untrack aborts the rest
        metrics_.record_aborted();
        throw ApiError(499, "Client closed the connection.");
      }
      std::optional<Delta> d = streams[done]->next(std::chrono::milliseconds(100));
      if (!d) continue;
      r.logprobs.insert(r.logprobs.end(), d->logprobs.begin(), d->logprobs.end());
      const bool last = d->finish != FinishReason::None;
      r.last = std::move(*d);
      if (last) break;
    }
    if (r.last.finish == FinishReason::Abort || r.last.finish == FinishReason::Error)
      throw ApiError(500, "The request could not be computed" +
                              (r.last.error.empty() ? std::string(".") : ": " + r.last.error),
                     "server_error", "", "computation_failed");
    r.usage = streams[done]->usage();
    metrics_.record_finished(r.usage);
  }
  return out;
}

}  // namespace pagoda::server
