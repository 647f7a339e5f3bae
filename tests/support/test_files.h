// File helpers shared by the tests.
#pragma once

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace pagoda::testing {

// The whole file as bytes; throws (failing the test) when it cannot be opened.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The clock the chat-template testdata was rendered with: strftime_now at 2026-07-26 12:00:00
// (../shared/testdata/README.md).
inline std::tm chat_testdata_now() {
  std::tm now{};
  now.tm_year = 2026 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 26;
  now.tm_hour = 12;
  return now;
}

}  // namespace pagoda::testing
