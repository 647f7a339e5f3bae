// What a report says about where it was made: the server's own account of itself (its
// /v1/models entry for the model under test; version and flags from GET /version, which pagoda
// serves) and the client host (CPU model, cores, hostname).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/bench/sse_client.h"

namespace pagoda::bench {

// {"/v1/models entry": {...}, "version": "0.1.0", "flags": "..."}; fields the server does not
// offer are left out.
nlohmann::json describe_server(const ClientTarget& target, const std::string& model);

// {"client CPU": "AMD EPYC ...", "client cores": 2, "client host": "name"}, from /proc/cpuinfo
// (the model name lscpu shows) and the number of hardware threads.
nlohmann::json describe_client_host();

// The UTC time now as "2026-11-28 17:05:00 UTC".
std::string utc_now();

}  // namespace pagoda::bench
