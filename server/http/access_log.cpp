#include "server/http/access_log.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <stdexcept>

#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

namespace pagoda::server {

namespace {

bool g_json = false;  // set once at start-up, before any thread logs

std::string iso_time(std::chrono::system_clock::time_point now) {
  auto t = std::chrono::system_clock::to_time_t(now);
  int ms = (int)(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch())
                     .count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

void emit(spdlog::level::level_enum lvl, const std::string& msg, const nlohmann::ordered_json& fields) {
  if (!spdlog::default_logger()->should_log(lvl)) return;
  if (g_json) {
    nlohmann::ordered_json line = {{"time", iso_time(std::chrono::system_clock::now())},
                           {"level", spdlog::level::to_string_view(lvl).data()},
                           {"msg", msg}};
    for (const auto& [k, v] : fields.items()) line[k] = v;
    spdlog::log(lvl, "{}", line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    return;
  }
  std::string text = msg;
  for (const auto& [k, v] : fields.items())
    text += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  spdlog::log(lvl, "{}", text);
}

// JSON mode: every line is one JSON object. Our own structured lines arrive already encoded;
// plain messages from other components are wrapped, so the stream stays machine-readable.
class JsonLineFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& m, spdlog::memory_buf_t& dest) override {
    std::string payload(m.payload.data(), m.payload.size());
    std::string line;
    if (payload.rfind("{\"time\":", 0) == 0) {
      line = std::move(payload);
    } else {
      nlohmann::ordered_json j = {{"time", iso_time(m.time)},
                                  {"level", spdlog::level::to_string_view(m.level).data()},
                                  {"msg", payload}};
      line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLineFormatter>();
  }
};

}  // namespace

void setup_logging(const std::string& format, const std::string& level) {
  if (format != "text" && format != "json")
    throw std::invalid_argument("log format must be text or json, got '" + format + "'");
  g_json = format == "json";
  // spdlog's default logger writes to stdout; JSON lines carry their own timestamp.
  if (g_json)
    spdlog::set_formatter(std::make_unique<JsonLineFormatter>());
  else
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    throw std::invalid_argument("unknown log level '" + level + "'");
  spdlog::set_level(lvl);
  spdlog::flush_on(spdlog::level::info);
}

void log_info(const std::string& msg, const nlohmann::ordered_json& fields) {
  emit(spdlog::level::info, msg, fields);
}
void log_warn(const std::string& msg, const nlohmann::ordered_json& fields) {
  emit(spdlog::level::warn, msg, fields);
}

void log_access(const std::string& method, const std::string& path, int status,
                const AccessRecord& rec, double total_ms) {
  nlohmann::ordered_json f = {{"id", rec.request_id.empty() ? "-" : rec.request_id},
                      {"method", method},
                      {"path", path},
                      {"status", rec.status_override ? rec.status_override : status},
                      {"prompt_tokens", rec.prompt_tokens},
                      {"completion_tokens", rec.completion_tokens},
                      {"ttft_ms", rec.ttft_ms < 0 ? nlohmann::ordered_json(nullptr)
                                                  : nlohmann::ordered_json(std::round(rec.ttft_ms * 10) / 10)},
                      {"total_ms", std::round(total_ms * 10) / 10}};
  emit(spdlog::level::info, "access", f);
}

}  // namespace pagoda::server
