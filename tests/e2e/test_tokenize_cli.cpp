#include <unistd.h>
// `pagoda tokenize`: the CLI over a real vocabulary, its output formats and its errors.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/support/run_command.h"
#include "tests/support/testdata.h"

namespace {

// Every case tokenizes with the real vocabularies.
const pagoda::testing::RequiredTestdata needs_testdata{"vocab"};

// Runs `pagoda tokenize <args>` with `input` on stdin; returns the exit status and stdout.
pagoda::testing::CommandResult run_tokenize(const std::string& args, const std::string& input) {
  const std::string in_path = "/tmp/pagoda_tokenize_cli_test_" + std::to_string(::getpid());
  {
    std::ofstream f(in_path, std::ios::binary);
    f << input;
  }
  auto r = pagoda::testing::run_command(std::string(PAGODA_BINARY) + " tokenize " + args + " < " +
                                        in_path + " 2>/dev/null");
  std::remove(in_path.c_str());
  return r;
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
