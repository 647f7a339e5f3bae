// Skipping a test case whose requirement this machine lacks (the shared testdata, a CUDA device,
// an instruction set, the JSON-schema validator, a browser): the case records why and returns at once, and
// tests/catch_main.cpp then exits with code 77, CTest's "Skipped" (SKIP_RETURN_CODE in
// tests/CMakeLists.txt), after printing each reason on a "skipped: " line that scripts/test.sh
// lists after CTest's summary. A skipped case never counts as passed.
//
// A case that may skip carries its requirement's tag: [testdata], [cuda_device], [avx2], [avx512], [amx],
// [jsonschema] or [browser] (one each). tests/CMakeLists.txt runs a file's tagged cases as their own CTest
// entry <binary>_<tag>, so a skip never hides the passes of the file's other cases.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace pagoda::testing {

// Why each skip happened, in order; tests/catch_main.cpp turns a non-empty list into exit code 77.
inline std::vector<std::string>& skipped_cases() {
  static std::vector<std::string> skips;
  return skips;
}

// True when `met`; otherwise records and prints the skip of the current test case (`why` names
// what is missing), which should then return at once.
inline bool requirement_met(bool met, const std::string& why) {
  if (met) return true;
  std::string line = "skipped: \"" + Catch::getResultCapture().getCurrentTestName() + "\": " + why;
  std::printf("%s\n", line.c_str());
  skipped_cases().push_back(std::move(line));
  return false;
}

}  // namespace pagoda::testing
