// The Unigram tokenizer on make-model's generated xlm-roberta vocabulary (seed 3) against ids
// written down from llama.cpp: `llama-tokenize -m xlm-roberta.gguf -p TEXT --ids` of a
// llama.cpp built from its September 2025 sources, on the file `pagoda make-model --arch
// xlm-roberta --seed 3` wrote (scripts/encoder-fidelity.py compares 200 random strings the same
// way). The ids include <s> (0) and </s> (2), and control-token text is parsed as llama-tokenize
// does by default. The vocabulary is generated from the seed, so these ids pin it down too.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "engine/encoder/bert_writer.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/test_files.h"

TEST_CASE("Unigram ids of the generated xlm-roberta vocabulary match llama.cpp's", "[encoder][tokenizer]") {
  pagoda::testing::ScratchDir dir("unigram-vectors");
  pagoda::encoder::BertSpec spec;
  spec.xlm_roberta = true;
  spec.seed = 3;
  spec.n_layers = 1;
  write_bert_model(spec, dir.file("xlmr.gguf"));
  const auto file = pagoda::gguf::GgufFile::open(dir.file("xlmr.gguf"));
  const auto tok = pagoda::Tokenizer::from_gguf(file);
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"hello world", {0, 605, 606, 2}},
      {"  The  cat sat\ton the mat.  ", {0, 108, 147, 141, 607, 609, 3, 161, 159, 604, 610, 31, 2}},
      {"what is the capital of france?",
       {0, 178, 147, 133, 171, 150, 169, 604, 612, 162, 143, 144, 167, 133, 159, 137, 141, 65, 2}},
      {"caf\xC3\xA9 \xC3\xBC" "ber ni\xC3\xB1o \xE4\xB8\xAD\xE6\x96\x87\xE8\xAA\x9E",
       {0, 138, 133, 143, 193, 196, 135, 141, 167, 160, 149, 197, 161, 200, 201, 203, 2}},
      {"Numbers 12345 #$%&*!", {0, 96, 173, 157, 135, 141, 167, 169, 38, 39, 41, 43, 45, 10, 11, 13, 15, 23, 5, 2}},
      {"xyzzy qwerty", {0, 180, 181, 183, 183, 181, 166, 177, 141, 167, 171, 181, 2}},
      {"hello<|user|>world", {0, 605, 613, 606, 2}},
      {"<s>paris</s>", {0, 0, 611, 2, 2}},
      {"\xC3\x85ngstr\xC3\xB6m \xF0\x9F\x98\x80 end", {0, 4, 3, 159, 145, 169, 171, 167, 3, 157, 4, 3, 142, 159, 139, 2}},
      {"a", {0, 134, 2}},
      {"", {0, 2}},
      {"   ", {0, 2}},
      {"\xE2\x96\x81hello", {0, 4, 605, 2}},
      {"thecatsatonthemat", {0, 604, 137, 133, 171, 295, 171, 161, 159, 171, 147, 141, 157, 133, 171, 2}},
      {"Dog-CAT, dog_cat.", {0, 76, 161, 145, 29, 73, 69, 107, 27, 608, 129, 137, 133, 171, 31, 2}},
  };
  for (const auto& [text, want] : cases) {
    INFO("[" << text << "]");
    CHECK(tok->encode(text, true, true) == want);
  }
  CHECK(tok->decode(tok->encode("hello world", true, true)) == "hello world");
}
