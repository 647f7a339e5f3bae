// File helpers shared by the tests.
#pragma once

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace pagoda::testing {

// The whole file as bytes; throws (failing the test) when it cannot be opened.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory under the system's temp directory, named for `what` and this process,
// removed with everything in it when this object goes. Declare it before whatever writes into
// it (an engine that saves at shutdown, a server process) so that those go first.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& what)
      : path_(std::filesystem::temp_directory_path() / ("pagoda-" + what + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;  // never throws from a destructor; a leftover directory is harmless
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& str() const { return path_.native(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

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
