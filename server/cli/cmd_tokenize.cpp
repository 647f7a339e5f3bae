// `pagoda tokenize --model M [--special] [--no-bos] [--ids-only]`: tokenizes stdin (all of it,
// byte for byte; a trailing newline is text too) and prints the ids.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/commands.h"

namespace pagoda::cli {
namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: pagoda tokenize --model M.gguf [--special] [--no-bos] [--ids-only] < text\n"
               "  Tokenizes all of stdin (a trailing newline is part of the text) and prints\n"
               "  one \"id<TAB>piece\" line per token; pieces are shown with C escapes (\\n, \\t,\n"
               "  \\\\, \\xNN for bytes that are not valid UTF-8).\n"
               "  --special   match control-token text (e.g. <|im_start|>) as control tokens\n"
               "  --no-bos    do not add BOS/EOS even when the vocabulary asks for them\n"
               "  --ids-only  print only the ids, space-separated, on one line\n");
}

// The piece with control characters, backslashes and invalid UTF-8 bytes escaped so that each
// token stays on one line.
std::string escape_piece(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    char buf[8];
    switch (c) {
      case '\n': out += "\\n"; continue;
      case '\t': out += "\\t"; continue;
      case '\r': out += "\\r"; continue;
      case '\\': out += "\\\\"; continue;
      default: break;
    }
    // Keep complete multi-byte characters; escape everything else below 0x20, DEL, and bytes
    // of broken sequences.
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (!ok || c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      continue;
    }
    out.append(s, i, n);
    i += n - 1;
  }
  return out;
}

}  // namespace

int tokenize(int argc, char** argv) {
  std::string model;
  bool special = false, no_bos = false, ids_only = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--model") || !std::strcmp(a, "-m")) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "pagoda tokenize: --model needs a path\n");
        return 2;
      }
      model = argv[++i];
    } else if (!std::strcmp(a, "--special")) {
      special = true;
    } else if (!std::strcmp(a, "--no-bos")) {
      no_bos = true;
    } else if (!std::strcmp(a, "--ids-only")) {
      ids_only = true;
    } else if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
      print_usage();
      return 0;
    } else {
      std::fprintf(stderr, "pagoda tokenize: unknown option '%s'\n", a);
      print_usage();
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "pagoda tokenize: --model is required\n");
    print_usage();
    return 2;
  }

  const gguf::GgufFile file = gguf::GgufFile::open(model);
  const auto tok = Tokenizer::from_gguf(file);
  std::cin >> std::noskipws;
  const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::vector<int32_t> ids = tok->encode(text, !no_bos, special);

  std::string out;
  if (ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
    out += '\n';
  } else {
    for (int32_t id : ids)
      out += std::to_string(id) + '\t' + escape_piece(tok->token_to_piece(id, true)) + '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace pagoda::cli
