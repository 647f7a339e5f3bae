// The WordPiece tokenizer against ../shared/testdata/vocab-wordpiece (bge's vocabulary): every
// test string gives exactly the expected ids; [CLS]/[SEP] framing; the normalizer's word split.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/wordpiece.h"
#include "tests/support/test_files.h"
#include "tests/support/testdata.h"
#include "tests/support/vocab_cases.h"

namespace fs = std::filesystem;
using pagoda::testing::join;
using pagoda::testing::read_vocab_cases;
using pagoda::Tokenizer;

namespace {

const pagoda::testing::RequiredTestdata needs_testdata{"vocab-wordpiece/ggml-vocab-bert-bge.gguf"};

const std::string kVocab =
    (fs::path(PAGODA_TESTDATA_DIR) / "vocab-wordpiece" / "ggml-vocab-bert-bge.gguf").string();

}  // namespace

TEST_CASE("every bge test string gives the expected WordPiece ids", "[tokenizer][wordpiece]") {
  const auto file = pagoda::gguf::GgufFile::open(kVocab);
  const auto tok = Tokenizer::from_gguf(file);
  const auto cases = read_vocab_cases(kVocab);
  REQUIRE(cases.size() > 40);
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto got = tok->encode(cases[i].text, false, false);
    if (got != cases[i].ids) {
      ++failures;
      UNSCOPED_INFO("input " << i << " [" << cases[i].text << "]\n got  " << join(got) << "\n want "
                             << join(cases[i].ids));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("WordPiece frames the input with [CLS] and [SEP] and decodes back", "[tokenizer][wordpiece]") {
  const auto file = pagoda::gguf::GgufFile::open(kVocab);
  const auto tok = Tokenizer::from_gguf(file);
  const auto ids = tok->encode("Hello, world!", true, false);
  REQUIRE(ids.size() == 6);
  CHECK(ids.front() == 101);  // [CLS]
  CHECK(ids.back() == 102);   // [SEP]
  CHECK(tok->decode(ids) == "hello , world !");
  CHECK(tok->decode(tok->encode("Führer", false, false)) == "fuhrer");
  // Control-token text is the token when asked, plain text otherwise.
  CHECK(tok->encode("[SEP]", false, true) == std::vector<int32_t>{102});
  CHECK(tok->encode("[SEP]", false, false).size() > 1);
}

TEST_CASE("the WordPiece normalizer splits words the BERT way", "[tokenizer][wordpiece]") {
  using pagoda::tok::WordPieceTokenizer;
  CHECK(WordPieceTokenizer::split_words("  Héllo,\tWORLD!  ") ==
        std::vector<std::string>{"hello", ",", "world", "!"});
  CHECK(WordPieceTokenizer::split_words("a$b") == std::vector<std::string>{"a", "$", "b"});
  CHECK(WordPieceTokenizer::split_words("\xE4\xB8\xAD\xE6\x96\x87") ==  // two CJK ideographs
        std::vector<std::string>{"\xE4\xB8\xAD", "\xE6\x96\x87"});
  CHECK(WordPieceTokenizer::split_words("x\x01y\xFFz") == std::vector<std::string>{"xyz"});
  CHECK(WordPieceTokenizer::split_words("").empty());
}
