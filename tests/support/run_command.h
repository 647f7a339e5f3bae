// Runs a shell command and captures its standard output and exit status, for the tests of the
// `pagoda` subcommands (the command line decides where stderr goes).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace pagoda::testing {

struct CommandResult {
  int status = -1;  // exit code; -1 when the command did not exit normally
  std::string out;
};

inline CommandResult run_command(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("cannot run: " + cmd);
  CommandResult r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace pagoda::testing
