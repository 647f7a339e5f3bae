// Reading the tokenizer cases of ../shared/testdata (`.inp` texts and `.out` ids separated by a
// marker line): splitting, id lists, and the ids printed back for a failure message.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace pagoda::testing {

// Splits on every occurrence of `sep` (so a trailing separator gives a final empty item).
inline std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos; (pos = s.find(sep, start)) != std::string::npos; start = pos + sep.size())
    out.push_back(s.substr(start, pos - start));
  out.push_back(s.substr(start));
  return out;
}

inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t v; in >> v;) ids.push_back(v);
  return ids;
}

inline std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

}  // namespace pagoda::testing
