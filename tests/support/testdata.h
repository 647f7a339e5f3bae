// Skipping tests whose data is missing: ../shared/testdata lives beside the repo, not in it, so a
// clone alone lacks it. Such tests skip (tests/support/skip.h: CTest's "Skipped", exit code 77
// from tests/catch_main.cpp) with a message naming the missing path, instead of failing or passing
// silently.
//
// Two forms:
// - a test case that needs data starts with `if (!testdata_available("vocab/x.gguf")) return;`
//   and carries the tag [testdata], so CTest runs it as its own entry `<binary>_testdata`
//   (tests/CMakeLists.txt) and the file's other cases still count as passed;
// - a file whose every case needs data declares it once at namespace scope:
//   `const pagoda::testing::RequiredTestdata needs{"vocab/x.gguf"};` and the whole binary skips.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "tests/support/skip.h"

namespace pagoda::testing {

// Data files the whole binary needs (RequiredTestdata); checked by the main before any case runs.
inline std::vector<std::filesystem::path>& required_testdata() {
  static std::vector<std::filesystem::path> paths;
  return paths;
}

inline std::string testdata_missing_message(const std::filesystem::path& path) {
  return path.string() + " missing (clone ../shared beside the repo to run it)";
}

// The first path of `paths` that does not exist, or an empty path when all do.
inline std::filesystem::path first_missing(const std::vector<std::filesystem::path>& paths) {
  for (const auto& p : paths)
    if (!std::filesystem::exists(p)) return p;
  return {};
}

#ifdef PAGODA_TESTDATA_DIR
// `relative` inside ../shared/testdata, as an absolute path without "..". The environment
// variable PAGODA_TESTDATA, when set, replaces the directory compiled in: binaries built on one
// machine and run on another (scripts/gpu-check.sh lease) find their data there.
inline std::filesystem::path testdata_path(const std::string& relative = "") {
  const char* dir = std::getenv("PAGODA_TESTDATA");
  const std::filesystem::path root = dir != nullptr && *dir != '\0' ? std::filesystem::path(dir)
                                                                     : std::filesystem::path(PAGODA_TESTDATA_DIR);
  return (std::filesystem::absolute(root) / relative).lexically_normal();
}

// True when `relative` exists in the testdata; otherwise records and prints the skip of the
// current test case, which should then return at once.
inline bool testdata_available(const std::string& relative = "") {
  const auto path = testdata_path(relative);
  return requirement_met(std::filesystem::exists(path), testdata_missing_message(path));
}

// Declared at namespace scope by a test file whose every case needs these testdata files.
struct RequiredTestdata {
  RequiredTestdata(std::initializer_list<const char*> relatives) {
    for (const char* r : relatives) required_testdata().push_back(testdata_path(r));
  }
};
#endif

}  // namespace pagoda::testing
