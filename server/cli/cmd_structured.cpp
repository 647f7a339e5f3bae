// `pagoda structured`: compiles a JSON Schema, GBNF grammar or regex against a model's
// vocabulary (a vocabulary-only GGUF is enough), exactly as the server would, and optionally
// walks a text through the matcher token by token, checking that every token is allowed by the
// mask at its step and that the grammar may end after the last one. For people writing schemas,
// and for tests; --bench times the compile and every mask of the walk.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling/output_constraint.h"
#include "engine/gguf/gguf.h"
#include "engine/structured/structured.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/commands.h"

namespace pagoda::cli {
namespace {

using Clock = std::chrono::steady_clock;

void print_usage() {
  std::fprintf(stderr,
               "usage: pagoda structured --model M.gguf (--schema S.json | --grammar G.gbnf | --regex R)\n"
               "                         [--input FILE] [--bench] [--json] [--flexible-whitespace]\n"
               "  Compiles the constraint over the model's vocabulary (exit 0; exit 2 with the reason\n"
               "  when it does not compile). With --input, tokenizes the file with the model's\n"
               "  vocabulary and walks it through the matcher: prints 'accepted' (exit 0) or\n"
               "  'rejected at byte N' (exit 1). --bench: compile time and per-token mask time\n"
               "  (p50/p90/p99/max, microseconds) over that walk. --json: one JSON object on stdout.\n");
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Walk {
  bool accepted = false;
  size_t rejected_at = 0;       // byte offset of the first byte the grammar refused
  std::string reason;
  size_t tokens = 0;
  std::vector<double> mask_us;  // one per mask computed
};

// The byte, within `bytes` fed after `m`'s state, at which the grammar stops accepting.
size_t first_rejected_byte(structured::GrammarMatcher m, const std::string& bytes) {
  for (size_t i = 0; i < bytes.size(); ++i)
    if (!m.accept_bytes(std::string_view(bytes).substr(i, 1))) return i;
  return bytes.size();
}

Walk walk_text(const Tokenizer& tok, std::shared_ptr<const structured::CompiledGrammar> grammar,
               const std::string& text) {
  Walk w;
  structured::GrammarMatcher m(grammar);
  const auto& vocab = *grammar->vocabulary();
  std::vector<uint32_t> bits(vocab.mask_words());
  const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
  size_t offset = 0;  // bytes of `text` consumed
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    std::string piece = tok.token_to_piece(id, false);
    // SentencePiece adds a space before the text; the first token carries it, the text does not.
    if (i == 0 && offset == 0 && !piece.empty() && piece[0] == ' ' && (text.empty() || text[0] != ' ')) {
      piece.erase(0, 1);
      if (!m.accept_bytes(piece)) {
        w.rejected_at = first_rejected_byte(m, piece);
        w.reason = "the first token (without the space the tokenizer adds) is not allowed";
        return w;
      }
      offset += piece.size();
      ++w.tokens;
      continue;
    }
    const auto t0 = Clock::now();
    m.fill_mask(bits.data());
    w.mask_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    const bool allowed = (bits[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
    if (!allowed || !m.accept_token(id)) {
      w.rejected_at = offset + first_rejected_byte(m, piece);
      w.reason = "token " + std::to_string(id) + " is not allowed here";
      return w;
    }
    offset += piece.size();
    ++w.tokens;
  }
  const auto t0 = Clock::now();
  m.fill_mask(bits.data());
  w.mask_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  if (!m.can_end()) {
    w.rejected_at = offset;
    w.reason = "the text ends where the grammar cannot";
    return w;
  }
  w.accepted = true;
  return w;
}

}  // namespace

int structured(int argc, char** argv) {
  std::string model, input;
  OutputConstraint c;
  int sources = 0;
  bool bench = false, as_json = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    auto value = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "pagoda structured: %s needs a value\n", what);
        return nullptr;
      }
      return argv[++i];
    };
    if (!std::strcmp(a, "--model") || !std::strcmp(a, "-m")) {
      const char* v = value(a);
      if (!v) return 2;
      model = v;
    } else if (!std::strcmp(a, "--schema") || !std::strcmp(a, "--grammar")) {
      const char* v = value(a);
      if (!v) return 2;
      if (!read_file(v, c.source)) {
        std::fprintf(stderr, "pagoda structured: cannot read %s\n", v);
        return 2;
      }
      c.kind = !std::strcmp(a, "--schema") ? OutputConstraint::Kind::JsonSchema : OutputConstraint::Kind::Gbnf;
      ++sources;
    } else if (!std::strcmp(a, "--regex")) {
      const char* v = value(a);
      if (!v) return 2;
      c.kind = OutputConstraint::Kind::Regex;
      c.source = v;
      ++sources;
    } else if (!std::strcmp(a, "--input")) {
      const char* v = value(a);
      if (!v) return 2;
      input = v;
    } else if (!std::strcmp(a, "--flexible-whitespace")) {
      c.flexible_whitespace = true;
    } else if (!std::strcmp(a, "--bench")) {
      bench = true;
    } else if (!std::strcmp(a, "--json")) {
      as_json = true;
    } else if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
      print_usage();
      return 0;
    } else {
      std::fprintf(stderr, "pagoda structured: unknown option '%s'\n", a);
      print_usage();
      return 2;
    }
  }
  if (model.empty() || sources != 1) {
    std::fprintf(stderr, "pagoda structured: --model and exactly one of --schema, --grammar, --regex are required\n");
    print_usage();
    return 2;
  }
  std::string text;
  if (!input.empty() && !read_file(input, text)) {
    std::fprintf(stderr, "pagoda structured: cannot read %s\n", input.c_str());
    return 2;
  }

  const gguf::GgufFile file = gguf::GgufFile::open(model);
  const auto tok = Tokenizer::from_gguf(file);
  const auto t_vocab = Clock::now();
  ConstraintCompiler compiler(*tok);
  const double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_vocab).count();

  nlohmann::ordered_json out;
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  const auto t0 = Clock::now();
  try {
    grammar = compiler.compile(c);
  } catch (const ConstraintError& e) {
    if (as_json) {
      out["compiled"] = false;
      out["error"] = e.what();
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("error: %s\n", e.what());
    }
    return 2;
  }
  const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  out["compiled"] = true;
  out["rules"] = grammar->rule_count();
  out["vocabulary"] = tok->vocab_size();
  if (!as_json) std::printf("compiled: %zu rules over %d tokens\n", grammar->rule_count(), tok->vocab_size());

  int rc = 0;
  if (!input.empty()) {
    const Walk w = walk_text(*tok, grammar, text);
    out["accepted"] = w.accepted;
    out["tokens"] = w.tokens;
    if (!w.accepted) {
      out["rejected_at"] = w.rejected_at;
      out["reason"] = w.reason;
      rc = 1;
    }
    if (!as_json) {
      if (w.accepted) std::printf("accepted (%zu tokens)\n", w.tokens);
      else std::printf("rejected at byte %zu: %s\n", w.rejected_at, w.reason.c_str());
    }
    if (bench) {
      nlohmann::ordered_json b = {{"vocabulary_ms", vocab_ms}, {"compile_ms", compile_ms},
                                  {"masks", w.mask_us.size()},
                                  {"mask_us_p50", percentile(w.mask_us, 0.50)},
                                  {"mask_us_p90", percentile(w.mask_us, 0.90)},
                                  {"mask_us_p99", percentile(w.mask_us, 0.99)},
                                  {"mask_us_max", w.mask_us.empty() ? 0.0 : *std::max_element(w.mask_us.begin(), w.mask_us.end())}};
      out["bench"] = b;
      if (!as_json)
        std::printf("bench: vocabulary %.2f ms, compile %.3f ms, %zu masks: p50 %.1f us, p90 %.1f us, "
                    "p99 %.1f us, max %.1f us\n",
                    vocab_ms, compile_ms, w.mask_us.size(), b["mask_us_p50"].get<double>(),
                    b["mask_us_p90"].get<double>(), b["mask_us_p99"].get<double>(), b["mask_us_max"].get<double>());
    }
  } else if (bench) {
    out["bench"] = {{"vocabulary_ms", vocab_ms}, {"compile_ms", compile_ms}};
    if (!as_json) std::printf("bench: vocabulary %.2f ms, compile %.3f ms\n", vocab_ms, compile_ms);
  }
  if (as_json) std::printf("%s\n", out.dump().c_str());
  return rc;
}

}  // namespace pagoda::cli
