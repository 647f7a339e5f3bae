#include <sys/wait.h>
#include <unistd.h>
// `pagoda tokenize`: the CLI over a real vocabulary, its output formats and its errors.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/support/testdata.h"

namespace {

// Every case tokenizes with the real vocabularies.
const pagoda::testing::RequiredTestdata needs_testdata{"vocab"};

struct Result {
  int status;
  std::string out;
};

// Runs `pagoda tokenize <args>` with `input` on stdin; returns the exit status and stdout.
Result run_tokenize(const std::string& args, const std::string& input) {
  const std::string in_path = "/tmp/pagoda_tokenize_cli_test_" + std::to_string(::getpid());
  {
    std::ofstream f(in_path, std::ios::binary);
    f << input;
  }
  const std::string cmd =
      std::string(PAGODA_BINARY) + " tokenize " + args + " < " + in_path + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  std::remove(in_path.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

const std::string kVocab = std::string(PAGODA_TESTDATA_DIR) + "/vocab/";

}  // namespace

TEST_CASE("pagoda tokenize prints ids and pieces", "[cli][tokenize]") {
  const std::string spm = "--model " + kVocab + "ggml-vocab-llama-spm.gguf";
  // The same ids as the test vectors give for " Hello world" / "Hello world", plus BOS.
  CHECK(run_tokenize(spm + " --ids-only", "Hello world").out == "1 15043 3186\n");
  CHECK(run_tokenize(spm + " --ids-only --no-bos", "Hello world").out == "15043 3186\n");
  CHECK(run_tokenize(spm + " --no-bos", "Hello world\n").out == "15043\t Hello\n3186\t world\n13\t\\n\n");

  const std::string phi = "--model " + kVocab + "ggml-vocab-phi-3.gguf --no-bos --ids-only";
  CHECK(run_tokenize(phi + " --special", "<|user|>").out == "32010\n");
  CHECK(run_tokenize(phi, "<|user|>").out != "32010\n");
}

TEST_CASE("pagoda tokenize errors", "[cli][tokenize]") {
  CHECK(run_tokenize("", "x").status == 2);                         // no --model
  CHECK(run_tokenize("--model", "x").status == 2);                  // no path
  CHECK(run_tokenize("--model /nonexistent.gguf", "x").status == 1);
  CHECK(run_tokenize("--model " + kVocab + "ggml-vocab-gpt-2.gguf --bogus", "x").status == 2);
}
