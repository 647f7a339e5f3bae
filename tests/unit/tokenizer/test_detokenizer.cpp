// IncrementalDetokenizer (complete UTF-8 only, every character once, joined == decode) and
// StopStringMatcher (stops across piece boundaries, nothing of a stop string leaks).
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/detokenizer.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model_writer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "tests/support/testdata.h"

using pagoda::IncrementalDetokenizer;
using pagoda::StopStringMatcher;
using pagoda::Tokenizer;

namespace {

std::unique_ptr<Tokenizer> builtin() {
  pagoda::gguf::GgufWriter w;
  pagoda::add_builtin_vocab(w, pagoda::builtin_vocab_size());
  return Tokenizer::from_gguf(pagoda::gguf::GgufFile::from_bytes(w.to_bytes()));
}

std::unique_ptr<Tokenizer> load(const std::string& name) {
  const auto f = pagoda::gguf::GgufFile::open(std::string(PAGODA_TESTDATA_DIR) +
                                               "/vocab/ggml-vocab-" + name + ".gguf");
  return Tokenizer::from_gguf(f);
}

// Streams `ids` and checks every piece is valid UTF-8; returns the pieces.
std::vector<std::string> stream(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& ids) {
  IncrementalDetokenizer d(tok, prompt);
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    pieces.push_back(d.push(id));
    CHECK(pagoda::unicode::is_valid_utf8(pieces.back()));
  }
  pieces.push_back(d.flush());
  return pieces;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += p;
  return s;
}

}  // namespace

TEST_CASE("multi-byte characters split across byte tokens are emitted once, whole",
          "[detokenizer]") {
  const auto tok = builtin();
  const std::string text = "h\xC3\xA9llo \xF0\x9F\xA6\x99 \xE4\xB8\x96!";  // héllo 🦙 世!
  const auto ids = tok->encode(text, false, false);
  REQUIRE(ids.size() == text.size());  // one token per byte
  const auto pieces = stream(*tok, {}, ids);
  CHECK(join(pieces) == text);
  CHECK(pieces[1] == "");              // first byte of é held back
  CHECK(pieces[2] == "\xC3\xA9");      // é complete
  CHECK(pieces[7] == "");              // 🦙 needs four bytes
  CHECK(pieces[8] == "");
  CHECK(pieces[9] == "");
  CHECK(pieces[10] == "\xF0\x9F\xA6\x99");
  CHECK(pieces.back() == "");  // nothing left for flush
}

TEST_CASE("control tokens, invalid bytes and an unfinished tail", "[detokenizer]") {
  const auto tok = builtin();
  const int32_t im_end = tok->eot_id();
  IncrementalDetokenizer d(*tok, {tok->bos_id()});
  CHECK(d.push('a') == "a");
  CHECK(d.push(im_end) == "");       // control tokens are not text
  CHECK(d.push(0x80) == "\xEF\xBF\xBD");  // a stray continuation byte can never complete
  CHECK(d.push(0xE4) == "");
  CHECK(d.push(0xB8) == "");
  CHECK(d.flush() == "\xEF\xBF\xBD");  // the unfinished character, shown as U+FFFD
  CHECK(d.flush() == "");
}

TEST_CASE("SPM: joined pieces equal decode, with and without a prompt", "[detokenizer][spm][testdata]") {
  if (!pagoda::testing::testdata_available("vocab/ggml-vocab-llama-spm.gguf")) return;
  const auto tok = load("llama-spm");
  const std::string text = "Hello w\xC3\xB6rld \xF0\x9F\xA6\x99 and \xE1\x9E\x80\xE1\x9E\xB6 ok";
  const auto ids = tok->encode(text, false, false);
  // Without context the first token's added space is dropped, exactly as decode() does.
  CHECK(join(stream(*tok, {}, ids)) == tok->decode(ids));
  CHECK(tok->decode(ids) == text);
  // Same with only BOS before: BOS has no text, so the output still starts the text.
  CHECK(join(stream(*tok, {tok->bos_id()}, ids)) == text);
  // After a prompt with text, the space between prompt and output is kept.
  const auto prompt = tok->encode("Say:", true, false);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string expected = tok->decode(all).substr(tok->decode(prompt).size());
  CHECK(expected == " " + text);
  CHECK(join(stream(*tok, prompt, ids)) == expected);
}

TEST_CASE("byte-level BPE: joined pieces equal decode for every test string", "[detokenizer][testdata]") {
  if (!pagoda::testing::testdata_available("vocab")) return;
  for (const char* name : {"gpt-2", "deepseek-llm", "phi-3"}) {
    const auto tok = load(name);
    for (const std::string text : {"\xF0\x9F\x9A\x80 (normal) \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
                                   "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B", "Hello, y'all!"}) {
      INFO(name << ": " << text);
      const auto ids = tok->encode(text, false, false);
      CHECK(join(stream(*tok, {}, ids)) == tok->decode(ids));
    }
  }
}

TEST_CASE("stop strings across piece boundaries", "[stop]") {
  SECTION("split over three pieces") {
    StopStringMatcher m({"STOP"});
    CHECK(m.feed("abc S") == "abc ");
    CHECK(m.feed("TO") == "");
    CHECK_FALSE(m.matched());
    CHECK(m.matched_stop() == "");
    CHECK(m.feed("P and more") == "");
    CHECK(m.matched());
    CHECK(m.matched_stop() == "STOP");
    CHECK(m.feed("ignored") == "");
    CHECK(m.flush() == "");
  }
  SECTION("a partial match that fails is released") {
    StopStringMatcher m({"STOP"});
    CHECK(m.feed("abc ST") == "abc ");
    CHECK(m.feed("Xyz") == "STXyz");
    CHECK(m.feed("ST") == "");
    CHECK(m.flush() == "ST");
    CHECK_FALSE(m.matched());
  }
  SECTION("the earliest stop wins") {
    StopStringMatcher m({"world", "lo w"});
    CHECK(m.feed("hello world") == "hel");
    CHECK(m.matched());
    CHECK(m.matched_stop() == "lo w");
  }
  SECTION("overlapping prefixes") {
    StopStringMatcher m({"aab"});
    CHECK(m.feed("aaa") == "a");
    CHECK(m.feed("b") == "");
    CHECK(m.matched());
  }
  SECTION("the stop inside one piece, text before it returned") {
    StopStringMatcher m({"\n\n", "</s>"});
    CHECK(m.feed("one\ntwo</s>three") == "one\ntwo");
    CHECK(m.matched());
    CHECK(m.matched_stop() == "</s>");
  }
  SECTION("multi-byte stop strings") {
    StopStringMatcher m({"\xE3\x80\x82"});  // "。"
    CHECK(m.feed("\xE4\xB8\x96") == "\xE4\xB8\x96");
    CHECK(m.feed("\xE7\x95\x8C\xE3\x80") == "\xE7\x95\x8C");
    CHECK(m.feed("\x82x") == "");
    CHECK(m.matched());
  }
  SECTION("no stops, empty stops") {
    StopStringMatcher m({"", ""});
    CHECK(m.feed("abc") == "abc");
    CHECK(m.flush() == "");
  }
}

TEST_CASE("stop strings never leak: random texts and random piece boundaries", "[stop]") {
  std::mt19937 rng(7);
  const std::vector<std::string> stops = {"abba", "bab", "aaaa"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int len = std::uniform_int_distribution<int>(0, 30)(rng);
    for (int i = 0; i < len; ++i) text += "ab"[rng() % 2];
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    const std::string expected = text.substr(0, first);

    StopStringMatcher m(stops);
    std::string emitted;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(1, 5)(rng);
      emitted += m.feed(text.substr(pos, n));
      pos += n;
      INFO(text << " -> " << emitted);
      REQUIRE(expected.compare(0, emitted.size(), emitted) == 0);  // never ahead of the truth
      REQUIRE(emitted.size() <= expected.size());
    }
    emitted += m.flush();
    REQUIRE(emitted == expected);
    REQUIRE(m.matched() == (first != std::string::npos));
  }
}
