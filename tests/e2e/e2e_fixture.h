// Shared set-up of the end-to-end tests: a small random-weight model carrying a real vocabulary
// (Phi-3's SentencePiece vocabulary) and its real chat template, and `pagoda serve` processes
// started on free loopback ports.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/http_test_util.h"
#include "tests/support/test_files.h"
#include "tests/support/testdata.h"

namespace pagoda::testing {

// Every e2e binary built on this fixture serves the model below: without these files it skips.
inline const RequiredTestdata e2e_testdata{"vocab/ggml-vocab-phi-3.gguf",
                                          "chat-templates/templates/microsoft-Phi-3-mini-gguf.jinja"};

// A scratch directory for this test process, removed when the process exits.
inline std::string e2e_dir() {
  static const ScratchDir dir("e2e");
  return dir.str();
}

// Writes the test model once per process and returns its path.
inline const std::string& e2e_model() {
  static const std::string path = [] {
    std::string p = e2e_dir() + "/model.gguf";
    std::string cmd = std::string(PAGODA_BINARY) + " make-model --output " + p +
                      " --vocab-from " PAGODA_TESTDATA_DIR "/vocab/ggml-vocab-phi-3.gguf"
                      " --layers 2 --dim 64 --ff 128 --heads 4 --kv-heads 2 --ctx 512"
                      " --name e2e-phi3-random --seed 7 --quiet";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make-model failed: " + cmd);
    return p;
  }();
  return path;
}

inline std::string e2e_template() {
  return PAGODA_TESTDATA_DIR "/chat-templates/templates/microsoft-Phi-3-mini-gguf.jinja";
}

// Starts `pagoda serve` on the test model with `extra` flags; throws if it does not get ready.
inline std::unique_ptr<ServerProcess> start_server(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--model", e2e_model(), "--chat-template", e2e_template(),
                                   "--threads", "1", "--max-seqs", "32", "--ctx-size", "512",
                                   "--kv-cache-memory", "32MiB",
                                   // Some tests generate "forever" (context shift on, max_tokens
                                   // 1000000) until they hang up or stop the server.
                                   "--max-tokens-limit", "1000000"};
  args.insert(args.end(), extra.begin(), extra.end());
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto s = std::make_unique<ServerProcess>(PAGODA_BINARY, args, free_port());
    if (s->wait_ready(60)) return s;
    std::string log = s->log();
    if (log.find("cannot listen") == std::string::npos)
      throw std::runtime_error("pagoda serve did not become ready:\n" + log);
  }
  throw std::runtime_error("pagoda serve: no free port");
}

// One start_server() with no extra flags, started on first use and shared by the test cases of
// a binary (starting a server per case would cost seconds each); stopped when the process exits.
inline ServerProcess& shared_server() {
  static std::unique_ptr<ServerProcess> s = start_server();
  return *s;
}

}  // namespace pagoda::testing
