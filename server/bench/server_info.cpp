#include "server/bench/server_info.h"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

namespace pagoda::bench {

nlohmann::json describe_server(const ClientTarget& target, const std::string& model) {
  nlohmann::json out = nlohmann::json::object();
  const nlohmann::json models = get_json(target, "/v1/models");
  if (models.is_object() && models.contains("data") && models["data"].is_array())
    for (const auto& m : models["data"])
      if (m.is_object() && m.value("id", "") == model) out["/v1/models entry"] = m;
  const nlohmann::json v = get_json(target, "/version");
  if (v.is_object()) {
    for (const char* k : {"name", "version", "flags"})
      if (v.contains(k)) out[std::string("server ") + k] = v[k].is_string() ? v[k] : nlohmann::json(v[k].dump());
  }
  return out;
}

nlohmann::json describe_client_host() {
  nlohmann::json out = nlohmann::json::object();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) out["client CPU"] = line.substr(line.find_first_not_of(' ', colon + 1));
    break;
  }
  out["client cores"] = std::thread::hardware_concurrency();
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) out["client host"] = std::string(host);
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace pagoda::bench
