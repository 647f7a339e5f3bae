// pagoda: one executable, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <exception>

#include "server/cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"serve", pagoda::cli::serve, "run the OpenAI-compatible HTTP server"},
    {"generate", pagoda::cli::generate, "run one prompt (or --parallel N) and print the text"},
    {"bench", pagoda::cli::bench, "load-test an OpenAI-compatible server"},
    {"make-model", pagoda::cli::make_model, "write a random-weight GGUF model"},
    {"quantize", pagoda::cli::quantize, "re-encode a GGUF model's weights to another type"},
    {"tokenize", pagoda::cli::tokenize, "print the token ids of stdin"},
    {"chat-template", pagoda::cli::chat_template, "render a chat template"},
    {"structured", pagoda::cli::structured, "compile a JSON Schema / grammar / regex, check a text"},
};

void usage() {
  std::fprintf(stderr, "usage: pagoda <command> [options]   (pagoda <command> --help)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-14s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) {
      try {
        return c.run(argc - 1, argv + 1);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "pagoda %s: error: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "pagoda: unknown command '%s'\n", argv[1]);
  usage();
  return 2;
}
