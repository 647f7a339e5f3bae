// Tokenizer encoding speed on English-like text, one thread.
//   bench_tokenizer [--mb N] [vocab.gguf ...]
// Default vocabularies: gpt-2 and llama-spm from ../shared/testdata/vocab. The text is random
// sentences over a fixed list of common English words (seeded, so runs are comparable), cut into
// paragraphs of about 2 KB that are encoded one by one, as prompts would be.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

const char* const kWords[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
    "are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or",
    "had", "by", "hot", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all",
    "there", "when", "up", "use", "your", "how", "said", "an", "each", "she", "which", "do",
    "their", "time", "if", "will", "way", "about", "many", "then", "them", "write", "would",
    "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has", "look",
    "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most", "people", "my",
    "over", "know", "water", "than", "call", "first", "who", "may", "down", "side", "been", "now",
    "find", "any", "new", "work", "part", "take", "get", "place", "made", "live", "where",
    "after", "back", "little", "only", "round", "man", "year", "came", "show", "every", "good",
    "me", "give", "our", "under", "name", "very", "through", "just", "form", "sentence", "great",
    "think", "say", "help", "low", "line", "differ", "turn", "cause", "much", "mean", "before",
    "move", "right", "boy", "old", "too", "same", "tell", "does", "set", "three", "want", "air",
    "well", "also", "play", "small", "end", "put", "home", "read", "hand", "port", "large",
    "spell", "add", "even", "land", "here", "must", "big", "high", "such", "follow", "act", "why",
    "ask", "men", "change", "went", "light", "kind", "off", "need", "house", "picture", "try",
    "us", "again", "animal", "point", "mother", "world", "near", "build", "self", "earth",
    "father", "head", "stand", "own", "page", "should", "country", "found", "answer", "school",
    "grow", "study", "still", "learn", "plant", "cover", "food", "sun", "four", "between",
    "state", "keep", "eye", "never", "last", "let", "thought", "city", "tree", "cross", "farm",
    "hard", "start", "might", "story", "saw", "far", "sea", "draw", "left", "late", "run",
    "don't", "while", "press", "close", "night", "real", "life", "few", "north", "inference",
    "server", "tokenizer", "language", "model", "request", "response", "1984", "42", "2.5",
    "London", "Paris", "Monday", "OpenAI-compatible", "it's", "we'll", "they're",
};

std::string make_text(size_t bytes) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::uniform_int_distribution<int> len(6, 18), punct(0, 9);
  std::string s;
  s.reserve(bytes + 256);
  while (s.size() < bytes) {
    const int n = len(rng);
    for (int i = 0; i < n; ++i) {
      std::string w = kWords[word(rng)];
      if (i == 0) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
      s += w;
      if (i + 1 < n) s += punct(rng) == 0 ? ", " : " ";
    }
    s += punct(rng) < 8 ? ". " : punct(rng) < 5 ? "? " : ".\n\n";
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 8;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) {
      mb = std::atof(argv[++i]);
    } else {
      paths.emplace_back(argv[i]);
    }
  }
  if (paths.empty()) {
    paths = {std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-gpt-2.gguf",
             std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-llama-spm.gguf"};
  }
  const std::string text = make_text(static_cast<size_t>(mb * 1e6));
  std::vector<std::string_view> paragraphs;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find(". ", std::min(text.size(), pos + 2000));
    end = end == std::string::npos ? text.size() : end + 2;
    paragraphs.push_back(std::string_view(text).substr(pos, end - pos));
    pos = end;
  }
  for (const auto& path : paths) {
    try {
      const auto file = pagoda::gguf::GgufFile::open(path);
      const auto tok = pagoda::Tokenizer::from_gguf(file);
      size_t n_tokens = 0;
      for (size_t i = 0; i < paragraphs.size() / 20; ++i)  // warm-up
        n_tokens += tok->encode(paragraphs[i], false, false).size();
      n_tokens = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& p : paragraphs) n_tokens += tok->encode(p, false, false).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-40s %8.2f MB/s  (%.1f MB, %zu tokens, %.2f bytes/token, %.3f s)\n",
                  path.substr(path.find_last_of('/') + 1).c_str(), text.size() / 1e6 / s,
                  text.size() / 1e6, n_tokens, double(text.size()) / n_tokens, s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), e.what());
      return 1;
    }
  }
  return 0;
}
