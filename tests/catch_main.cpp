// The main of every test binary: Catch2's session, plus the skips of tests/support/skip.h (missing
// testdata, no CUDA device, an instruction set or validator this machine lacks) reported to CTest
// as exit code 77 (SKIP_RETURN_CODE in tests/CMakeLists.txt), so such a test shows "Skipped", not
// "Passed" or "Failed".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>

#include "tests/support/testdata.h"

namespace {

constexpr int kSkipped = 77;

bool only_lists(const Catch::ConfigData& c) {
  return c.listTests || c.listTestNamesOnly || c.listTags || c.listReporters || c.showHelp;
}

}  // namespace

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;

  if (!only_lists(session.configData())) {
    const auto missing = pagoda::testing::first_missing(pagoda::testing::required_testdata());
    if (!missing.empty()) {
      std::printf("skipped: every test case of %s: %s\n",
                  std::filesystem::path(argv[0]).filename().c_str(),
                  pagoda::testing::testdata_missing_message(missing).c_str());
      return kSkipped;
    }
  }

  const int rc = session.run();
  const auto& skips = pagoda::testing::skipped_cases();
  if (rc != 0 || skips.empty()) return rc;
  std::printf("%zu test case(s) skipped:\n", skips.size());
  for (const auto& s : skips) std::printf("  %s\n", s.c_str());
  return kSkipped;
}
