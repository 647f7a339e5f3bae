// The prefix cache's admin routes; like every route they sit behind the API key.
// POST /v1/cache/save writes the prefix cache to the --kv-cache-dir file now (README,
// "Persistent prefix cache"): 200 with what was saved; 400 when the server has no
// --kv-cache-dir; 500 when the write failed (the previous file, if any, is left as it was).
// GET /v1/cache/blocks lists the event hash of every block the prefix cache holds, as the
// --kv-events stream names them (a subscriber checks its view against it); 400 without
// --kv-events.
#include "server/http/api_error.h"
#include "server/openai/handlers.h"

namespace pagoda::server {

void Handlers::save_cache(const httplib::Request&, httplib::Response& res) {
  try {
    const PrefixCacheSaveResult r = engine_.save_prefix_cache();
    if (r.not_configured) throw ApiError(400, r.error, "invalid_request_error", "", "kv_cache_dir_not_set");
    if (!r.ok) throw ApiError(500, "Saving the prefix cache failed: " + r.error, "server_error", "", "kv_cache_save_failed");
    send_json(res, {{"object", "kv_cache.save"},
                    {"path", r.path},
                    {"blocks", r.blocks},
                    {"tokens", r.tokens},
                    {"left_out", r.left_out},
                    {"bytes", r.bytes},
                    {"seconds", r.seconds}});
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void Handlers::cache_blocks(const httplib::Request&, httplib::Response& res) {
  try {
    const auto blocks = engine_.cached_blocks();
    if (!blocks)
      throw ApiError(400, "the server publishes no KV events: start it with --kv-events", "invalid_request_error",
                     "", "kv_events_not_set");
    send_json(res, {{"object", "kv_cache.blocks"}, {"blocks", blocks->blocks}, {"block_hashes", blocks->hashes}});
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

}  // namespace pagoda::server
