#include "server/bench/sharegpt.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pagoda::bench {

std::vector<BenchPrompt> parse_sharegpt(const std::string& text, const std::string& name) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array())
    throw std::runtime_error(name + ": not a ShareGPT file (expected a JSON list of conversations)");
  std::vector<BenchPrompt> out;
  for (const auto& entry : j) {
    if (!entry.is_object() || !entry.contains("conversations") || !entry["conversations"].is_array()) continue;
    const auto& turns = entry["conversations"];
    for (size_t i = 0; i + 1 < turns.size(); ++i) {
      const auto& q = turns[i];
      const auto& a = turns[i + 1];
      if (!q.is_object() || !a.is_object() || q.value("from", "") != "human" || !q.contains("value") ||
          !q["value"].is_string() || !a.contains("value") || !a["value"].is_string())
        continue;
      BenchPrompt p;
      p.user = q["value"].get<std::string>();
      if (p.user.empty()) break;
      p.max_tokens = std::max<int>(1, static_cast<int>(a["value"].get<std::string>().size() / 4));
      out.push_back(std::move(p));
      break;  // the first human turn only
    }
  }
  if (out.empty()) throw std::runtime_error(name + ": no conversation with a human turn and a reply");
  return out;
}

std::vector<BenchPrompt> read_sharegpt(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_sharegpt(ss.str(), path);
}

}  // namespace pagoda::bench
