// Pre-tokenizer variants added to match llama.cpp's list of tokenizer.ggml.pre values. Expected
// splits are worked out by hand from each variant's split regexes (and were checked against
// Python's `regex` module while writing them: matches and the gaps between them, stage by stage).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

using pagoda::TokenizerError;
using pagoda::tok::PreTokenizer;
using Words = std::vector<std::string>;

namespace {

Words split(const std::string& pre, const std::string& text) {
  const auto p = PreTokenizer::by_name(pre);
  std::vector<pagoda::tok::Span> spans;
  p.split(text, spans);
  Words out;
  for (const auto& s : spans) out.push_back(text.substr(s.begin, s.len));
  return out;
}

// A byte-level vocabulary of the 256 byte tokens and BOS/EOS, with the given pre-tokenizer
// (none when `pre` is empty).
std::unique_ptr<pagoda::Tokenizer> byte_vocab(const std::string& pre) {
  using pagoda::gguf::Value;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    pagoda::unicode::append_utf8(t, pagoda::unicode::byte_to_cp(static_cast<uint8_t>(b)));
    tokens.push_back(t);
  }
  tokens.push_back("<s>");
  tokens.push_back("</s>");
  std::vector<int64_t> types(256, 1);
  types.push_back(3);
  types.push_back(3);
  pagoda::gguf::GgufWriter w;
  w.set("tokenizer.ggml.model", Value::from_string("gpt2"));
  if (!pre.empty()) w.set("tokenizer.ggml.pre", Value::from_string(pre));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.merges", Value::string_array({}));
  w.set("tokenizer.ggml.bos_token_id", Value::from_u32(256));
  w.set("tokenizer.ggml.eos_token_id", Value::from_u32(257));
  return pagoda::Tokenizer::from_gguf(pagoda::gguf::GgufFile::from_bytes(w.to_bytes()));
}

}  // namespace

TEST_CASE("BLOOM / Poro / Viking pre-tokenizer", "[tokenizer][pre]") {
  // " ?[^(\s|.,!?…。，、।۔،)]+": the brackets and "|" are excluded characters too.
  const Words want{"Hello", ",", " world", "! (", "x", "|", "y", ")", " ok", "? ", " end"};
  for (const char* name : {"bloom", "poro-chat", "gpt3-finnish"}) {
    INFO(name);
    CHECK(split(name, "Hello, world! (x|y) ok?  end") == want);
  }
  CHECK(split("bloom", "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x80\x82\xE3\x83\x86\xE3\x80\x81x\n\ny") ==
        Words{"\xE6\x97\xA5\xE6\x9C\xAC", "\xE3\x80\x82", "\xE3\x83\x86", "\xE3\x80\x81", "x", "\n\n", "y"});
  // Viking: the same, then every digit on its own.
  CHECK(split("viking", "abc123 def4") == Words{"abc", "1", "2", "3", " def", "4"});
}

TEST_CASE("Qwen2-style variants", "[tokenizer][pre]") {
  // DeepSeek-R1-Distill-Qwen keeps Qwen2's tokenizer: single digits (not DeepSeek V3's {1,3}).
  CHECK(split("deepseek-r1-qwen", "12345") == Words{"1", "2", "3", "4", "5"});
  // Qwen3.5 counts combining marks as word characters: "café" (e + U+0301) and Devanagari
  // stay whole where Qwen2 cuts them at every mark.
  const std::string text = "cafe\xCC\x81 ok \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87!";
  CHECK(split("qwen35", text) ==
        Words{"cafe\xCC\x81", " ok", " \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", "!"});
  CHECK(split("qwen2", text) == Words{"cafe", "\xCC\x81", " ok", " \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8",
                                      "\xE0\xA5\x8D\xE0\xA4\xA4", "\xE0\xA5\x87!"});
  CHECK(split("qwen35", "x \xCC\x81\xCC\x81!") == Words{"x", " \xCC\x81\xCC\x81", "!"});
  // Seed-Coder: no line breaks glued to punctuation.
  CHECK(split("seed-coder", "a!!\n\nb 123") == Words{"a", "!!", "\n\n", "b", " ", "1", "2", "3"});
  CHECK(split("qwen2", "a!!\n\nb") == Words{"a", "!!\n\n", "b"});
  // Ufakzeka: no English contractions, so Turkish suffixes stay with the apostrophe.
  CHECK(split("ufakzeka", "Ankara'da it's") == Words{"Ankara", "'da", " it", "'s"});
  CHECK(split("qwen2", "Ankara'da it's") == Words{"Ankara", "'d", "a", " it", "'s"});
  // MiniCPM5: numbers in groups of three first, then Llama 3's pattern.
  CHECK(split("minicpm5", "abc 12345 x!1") == Words{"abc", " ", "123", "45", " x", "!", "1"});
  CHECK(PreTokenizer::by_name("minicpm5").ignore_merges());
  // Laguna: runs of line feeds apart first, then Qwen2's pattern.
  CHECK(split("laguna", "ab\n\ncd 12\n") == Words{"ab", "\n\n", "cd", " ", "1", "2", "\n"});
}

TEST_CASE("the default pre-tokenizer is llama.cpp's", "[tokenizer][pre]") {
  // [\p{P}\$\+<=>\^~\|]+ , GPT-2 , \p{N}+ , [0-9]{3}: numbers lose their space and are cut in threes.
  CHECK(split("default", "Hello, world!! 1234567 $x") ==
        Words{"Hello", ",", " world", "!!", " ", "123", "456", "7", " ", "$", "x"});
  CHECK(split("gpt-2", "Hello, world!! 1234567 $x") ==
        Words{"Hello", ",", " world", "!!", " 1234567", " $", "x"});
  // A file without tokenizer.ggml.pre gets it, with a warning; an unknown name is an error.
  const auto old = byte_vocab("");
  REQUIRE(old->warnings().size() == 1);
  CHECK_THAT(old->warnings()[0], Catch::Contains("tokenizer.ggml.pre"));
  CHECK(byte_vocab("gpt-2")->warnings().empty());
  try {
    byte_vocab("no-such-pre");
    FAIL("no error");
  } catch (const TokenizerError& e) {
    CHECK_THAT(e.what(), Catch::Contains("\"no-such-pre\"") && Catch::Contains("bloom") &&
                             Catch::Contains("llama-bpe"));
  }
}

TEST_CASE("llama.cpp's other names for known pre-tokenizers", "[tokenizer][pre]") {
  const std::string text = "Hello World's  HTMLParser\n\n 12345 caf\xC3\xA9!!\n\xE4\xB8\x96\xE7\x95\x8C";
  const std::pair<const char*, std::vector<const char*>> aliases[] = {
      {"gpt-2", {"gigachat", "a.x-4.0", "mellum", "exaone4", "trillion", "granite-docling"}},
      {"llama-bpe", {"falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"}},
      {"dbrx", {"glm4"}},
      {"qwen2", {"kormo", "f2llmv2", "megrez", "hunyuan", "solar-open", "grok-2", "bailingmoe",
                 "bailingmoe2", "llada-moe", "deepseek-r1-qwen"}},
      {"gpt-4o", {"llama4", "kanana2", "talkie", "minimax-m2"}},
      {"starcoder", {"minerva-7b", "mellum2"}},
      {"deepseek-v3", {"hunyuan-dense", "joyai-llm", "hy_v4"}},
  };
  for (const auto& [base, names] : aliases) {
    const Words want = split(base, text);
    for (const char* name : names) {
      INFO(name << " = " << base);
      CHECK(split(name, text) == want);
      CHECK(PreTokenizer::by_name(name).ignore_merges() == PreTokenizer::by_name(base).ignore_merges());
    }
  }
  // The families differ on this text, so the checks above can tell them apart.
  CHECK(split("qwen2", text) != split("llama-bpe", text));
  CHECK(split("gpt-4o", text) != split("llama-bpe", text));
  CHECK(split("gpt-2", text) != split("starcoder", text));
}

TEST_CASE("Llama 3 and Tekken vocabularies ignore merges and add BOS unless told otherwise",
          "[tokenizer][pre]") {
  CHECK(PreTokenizer::by_name("tekken").ignore_merges());
  CHECK(PreTokenizer::by_name("falcon3").add_bos_by_default());
  CHECK_FALSE(PreTokenizer::by_name("qwen2").add_bos_by_default());
  CHECK(byte_vocab("llama-bpe")->add_bos());
  CHECK(byte_vocab("llama-bpe")->encode("a", true, false) == std::vector<int32_t>{256, 'a'});
  CHECK_FALSE(byte_vocab("qwen2")->add_bos());
}

TEST_CASE("Jais 2, Tiny Aya, Youtu, EXAONE MoE and Spark 2.5 pre-tokenizers", "[tokenizer][pre]") {
  const std::string sp8(8, ' '), sp16(16, ' '), sp4(4, ' ');
  // Jais 2: whitespace runs cut into 512/256/../4/2/1-space pieces, keeping one for the next word.
  CHECK(split("jais-2", "a" + std::string(10, ' ') + "b   c  d" + std::string(20, ' ')) ==
        Words{"a", sp8, " ", " b", "  ", " c", " ", " d", sp16, sp4});
  CHECK(split("jais-2", "x" + std::string(600, ' ') + "y") ==
        Words{"x", std::string(512, ' '), std::string(64, ' '), sp16, sp4, "  ", " ", " y"});
  // Tiny Aya / Cohere: digit runs that end a word are cut in threes from the right first.
  const Words aya{"Pay", " ", "1", "234", "567", " now", ",", " ", "123", "45", "abc", " x", "1", "234", " ", "9"};
  CHECK(split("tiny_aya", "Pay 1234567 now, 12345abc x1234 9") == aya);
  CHECK(split("cohere2moe", "Pay 1234567 now, 12345abc x1234 9") == aya);
  CHECK(split("tiny_aya", "a 1234\xC3\xA9 55") == Words{"a", " ", "123", "4", "\xC3\xA9", " ", "55"});
  // Youtu: Hangul, CJK punctuation, Bopomofo and CJK/kana runs apart, then GPT-4o-like words.
  CHECK(split("youtu", "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4\xEF\xBC\x81\xE2\x80\x9C\xE6\x97\xA5\xE6\x9C\xAC"
                       "\xE2\x80\x9D\xE3\x84\x85\xE3\x84\x86\xEF\xBC\x8CHelloWorld 123 ok") ==
        Words{"\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "\xEF\xBC\x81\xE2\x80\x9C", "\xE6\x97\xA5\xE6\x9C\xAC",
              "\xE2\x80\x9D", "\xE3\x84\x85\xE3\x84\x86", "\xEF\xBC\x8C", "Hello", "World", " ", "1", "2", "3",
              " ok"});
  CHECK(PreTokenizer::by_name("youtu").ignore_merges());
  // EXAONE MoE: words joined by single spaces form one piece.
  CHECK(split("exaone-moe", "Hello big world  it's 42 ok!!\n\nnext/ line e\xCC\x81t\xC3\xA9 a") ==
        Words{"Hello big world", " ", " it", "'s", " ", "4", "2", " ok", "!!\n", "\n", "next", "/",
              " line e\xCC\x81t\xC3\xA9 a"});
  CHECK(split("exaone-moe", " hi there.") == Words{" hi there", "."});
  // Spark 2.5: DeepSeek V3's pattern with lone line breaks, then single digits.
  CHECK(split("spark2_5", "Hello world.txt 12345 \xE6\x97\xA5\xE6\x9C\xACx!!\n\n  \nend") ==
        Words{"Hello", " world", ".txt", " ", "1", "2", "3", "4", "5", " ", "\xE6\x97\xA5\xE6\x9C\xAC", "x",
              "!!", "\n", "\n", "  ", "\n", "end"});
}
