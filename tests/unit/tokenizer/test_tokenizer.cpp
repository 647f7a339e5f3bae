// Tokenizer units: pre-tokenizer splits, Unicode helpers, special and user-defined tokens, the
// project's own byte-level vocabulary, and clear errors for bad metadata.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model_writer.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/vocab.h"
#include "tests/support/testdata.h"

using pagoda::Tokenizer;
using pagoda::TokenizerError;
using pagoda::gguf::GgufFile;
using pagoda::gguf::GgufWriter;
using pagoda::gguf::Value;
using Words = std::vector<std::string>;

namespace {

Words split(const std::string& pre, const std::string& text) {
  const auto p = pagoda::tok::PreTokenizer::by_name(pre);
  std::vector<pagoda::tok::Span> spans;
  p.split(text, spans);
  Words out;
  for (const auto& s : spans) out.push_back(text.substr(s.begin, s.len));
  return out;
}

std::unique_ptr<Tokenizer> load(const std::string& name) {
  const auto f = GgufFile::open(std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-" + name + ".gguf");
  return Tokenizer::from_gguf(f);
}

std::unique_ptr<Tokenizer> from_writer(const GgufWriter& w) {
  return Tokenizer::from_gguf(GgufFile::from_bytes(w.to_bytes()));
}

// A small byte-level BPE vocabulary: the 256 byte tokens plus "ab" (merge "a b") and "<|x|>".
GgufWriter tiny_bpe(const std::string& pre) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    pagoda::unicode::append_utf8(t, pagoda::unicode::byte_to_cp(static_cast<uint8_t>(b)));
    tokens.push_back(t);
  }
  tokens.push_back("ab");
  tokens.push_back("<|x|>");
  std::vector<int64_t> types(257, 1);
  types.push_back(3);
  GgufWriter w;
  w.set("tokenizer.ggml.model", Value::from_string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::from_string(pre));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.merges", Value::string_array({"a b"}));
  w.set("tokenizer.ggml.eos_token_id", Value::from_u32(257));
  return w;
}

std::string error_of(const GgufWriter& w) {
  try {
    from_writer(w);
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("GPT-2 pre-tokenizer", "[tokenizer][pre]") {
  CHECK(split("gpt-2", "Hello world's  end\n\n 123abc!!") ==
        Words{"Hello", " world", "'s", " ", " end", "\n\n", " 123", "abc", "!!"});
  CHECK(split("gpt-2", "I'M  ") == Words{"I", "'", "M", "  "});
  CHECK(split("default", "tab\there") == Words{"tab", "\t", "here"});
  CHECK(split("gpt-2", "") == Words{});
}

TEST_CASE("Llama 3 and Qwen2 pre-tokenizers", "[tokenizer][pre]") {
  const std::string s = "Hello world's  end\n\n 12345abc!!\n";
  CHECK(split("llama-bpe", s) ==
        Words{"Hello", " world", "'s", " ", " end", "\n\n", " ", "123", "45", "abc", "!!\n"});
  CHECK(split("qwen2", s) == Words{"Hello", " world", "'s", " ", " end", "\n\n", " ", "1", "2", "3",
                                   "4", "5", "abc", "!!\n"});
  CHECK(split("llama-bpe", "I'M (ok)") == Words{"I", "'M", " (", "ok", ")"});
  CHECK(split("tekken", "HelloWorld HTMLParser iPhone's 2024/05 x\n/") ==
        Words{"Hello", "World", " HTMLParser", " i", "Phone", "'s", " ", "2", "0", "2", "4", "/", "0",
              "5", " x", "\n", "/"});
  CHECK(split("gpt-4o", "HelloWorld HTMLParser iPhone's 2024/05 x\n/") ==
        Words{"Hello", "World", " HTMLParser", " i", "Phone's", " ", "202", "4", "/", "05", " x", "\n",
              "/"});
  CHECK(split("gpt-4o", "ABC \xE4\xB8\x96\xE7\x95\x8C") == Words{"ABC", " \xE4\xB8\x96\xE7\x95\x8C"});
  CHECK(pagoda::tok::PreTokenizer::by_name("llama-bpe").ignore_merges());
  CHECK_FALSE(pagoda::tok::PreTokenizer::by_name("qwen2").ignore_merges());
}

TEST_CASE("multi-stage pre-tokenizers", "[tokenizer][pre]") {
  CHECK(split("deepseek-llm", "Hello, \xE4\xB8\x96\xE7\x95\x8C 123\n") ==
        Words{"Hello", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", " ", "123", "\n"});
  CHECK(split("deepseek-coder", "foo(bar) 42") == Words{"foo", "(", "bar", ")", " ", "4", "2"});
  CHECK(split("falcon", "Hello, world!! 1234567") ==
        Words{"Hello", ",", " world", "!!", " ", "123", "456", "7"});
  CHECK(split("starcoder", "abc 123") == Words{"abc", " ", "1", "2", "3"});
  CHECK(split("refact", "x1") == Words{"x", "1"});
  CHECK(split("deepseek-v3", "Hello world.txt 12345 \xE4\xB8\x96\xE3\x81\x82x!!\n\n") ==
        Words{"Hello", " world", ".txt", " ", "123", "45", " ", "\xE4\xB8\x96\xE3\x81\x82", "x", "!!\n\n"});
}

TEST_CASE("pre-tokenizers cover their input exactly, whatever the bytes", "[tokenizer][pre]") {
  const std::string nasty = std::string("a\xFF\xC3 b\xE2\x82") + '\0' + "  \r\n\xF0\x9F\xA6\x99 9";
  for (const auto& name : pagoda::tok::PreTokenizer::supported_names()) {
    INFO(name);
    std::string joined;
    for (const auto& w : split(name, nasty)) {
      CHECK_FALSE(w.empty());
      joined += w;
    }
    CHECK(joined == nasty);
  }
}

TEST_CASE("Unicode helpers", "[tokenizer][unicode]") {
  using namespace pagoda::unicode;
  CHECK(flags(U'\u00E9') == (kLetter | kLower));
  CHECK(flags('A') == (kLetter | kUpper));
  CHECK(flags(U'\u01C5') == (kLetter | kUpper));  // titlecase Dž
  CHECK(flags(U'\u4E16') == kLetter);             // CJK: other letter, no case
  CHECK(flags(U'\u0663') == kNumber);  // Arabic-Indic digit three
  CHECK(flags('!') == kPunct);
  CHECK(flags('+') == kSymbol);
  CHECK(flags(0x3000) == (kSeparator | kWhitespace));
  CHECK(flags('\n') == kWhitespace);
  CHECK(flags(0x1F999) == kSymbol);  // an emoji, outside the BMP
  CHECK(flags(0x20000) == kLetter);  // CJK extension B
  CHECK(flags(0x1D41A) == (kLetter | kLower));  // mathematical bold small a
  for (int b = 0; b < 256; ++b) CHECK(cp_to_byte(byte_to_cp(static_cast<uint8_t>(b))) == b);
  CHECK(byte_to_cp(' ') == 0x120);  // "Ġ"
  CHECK(complete_prefix_len("ab\xC3") == 2);
  CHECK(complete_prefix_len("ab\xF0\x9F\xA6") == 2);
  CHECK(complete_prefix_len("ab\xF0\x9F\xA6\x99") == 6);
  CHECK(complete_prefix_len("ab\x80") == 3);      // a stray continuation byte never completes
  CHECK(complete_prefix_len("ab\xE0\x80") == 4);  // overlong: can never become valid
  CHECK(sanitize_utf8("a\xFF" "b\xC3") == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  CHECK(sanitize_utf8("\xF0\x9F\xA6x") == "\xEF\xBF\xBDx");  // one U+FFFD per broken sequence
  CHECK(sanitize_utf8("\xE0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("the project's own byte-level vocabulary", "[tokenizer][builtin]") {
  GgufWriter w;
  pagoda::add_builtin_vocab(w, pagoda::builtin_vocab_size() + 3);
  const auto tok = from_writer(w);
  const int32_t bos = tok->bos_id(), eos = tok->eos_id();
  CHECK(tok->token_text(bos) == "<|bos|>");
  CHECK(tok->token_text(eos) == "<|eos|>");
  CHECK(tok->add_bos());
  CHECK(tok->is_eog(eos));
  const int32_t im_end = tok->eot_id();
  CHECK(tok->token_text(im_end) == "<|im_end|>");
  CHECK(tok->is_eog(im_end));
  CHECK(tok->is_control(im_end));

  const std::string text = "h\xC3\xA9llo \xF0\x9F\xA6\x99\n";
  const auto ids = tok->encode(text, true, false);
  REQUIRE(ids.size() == text.size() + 1);
  CHECK(ids[0] == bos);
  for (size_t i = 0; i < text.size(); ++i) CHECK(ids[i + 1] == static_cast<uint8_t>(text[i]));
  CHECK(tok->decode(ids) == text);
  CHECK(tok->decode(ids, true) == "<|bos|>" + text);

  const std::string chat = "<|im_start|>user\nhi<|im_end|>";
  const auto special = tok->encode(chat, false, true);
  CHECK(special.front() == tok->encode("<|im_start|>", false, true)[0]);
  CHECK(special.back() == im_end);
  CHECK(special.size() == 2 + std::string("user\nhi").size());
  const auto plain = tok->encode(chat, false, false);
  CHECK(plain.size() == chat.size());  // control-token text stays text without parse_special
  CHECK(tok->decode(plain) == chat);
  CHECK(tok->token_to_piece(im_end) == "");
  CHECK(tok->token_to_piece(im_end, true) == "<|im_end|>");
  // Padding tokens beyond the built-in ones are plain words: never produced by encoding (there
  // are no merges) but decodable, and their text encodes back to the same text.
  const std::string pad = tok->decode({tok->vocab_size() - 1});
  CHECK_FALSE(pad.empty());
  CHECK(tok->decode(tok->encode(pad, false, false)) == pad);
  CHECK_THROWS_AS(tok->token_to_piece(tok->vocab_size()), TokenizerError);
  CHECK_THROWS_AS(tok->token_to_piece(-1), TokenizerError);
}

TEST_CASE("SPM special tokens and the added leading space", "[tokenizer][spm][testdata]") {
  if (!pagoda::testing::testdata_available("vocab/ggml-vocab-llama-spm.gguf")) return;
  const auto tok = load("llama-spm");
  const auto hello = tok->encode("Hello", false, false);
  CHECK(tok->encode("Hello", true, false).front() == 1);  // BOS
  CHECK(tok->encode("Hello", true, false).size() == hello.size() + 1);
  CHECK(tok->encode("", true, false) == std::vector<int32_t>{1});
  CHECK(tok->encode("", false, false).empty());
  // "<s>" is matched as BOS only when parsing special tokens; text after it gets its own "▁".
  const auto parsed = tok->encode("<s>Hello", false, true);
  CHECK(parsed.front() == 1);
  CHECK(std::vector<int32_t>(parsed.begin() + 1, parsed.end()) == hello);
  const auto unparsed = tok->encode("<s>Hello", false, false);
  CHECK(std::find(unparsed.begin(), unparsed.end(), 1) == unparsed.end());
  CHECK(tok->decode(unparsed) == "<s>Hello");
  // Decoding drops only the one space encoding added.
  CHECK(tok->decode(tok->encode("  two spaces", true, false)) == "  two spaces");
  CHECK(tok->decode(tok->encode("\xF0\x9F\xA6\x99 \xFF", false, false)) == "\xF0\x9F\xA6\x99 \xFF");
}

TEST_CASE("user-defined tokens are always matched, control tokens only when asked", "[tokenizer][testdata]") {
  if (!pagoda::testing::testdata_available("vocab/ggml-vocab-phi-3.gguf")) return;
  const auto phi = load("phi-3");
  // In this vocabulary "</s>" (id 2) is user-defined and "<|user|>" (32010) is a control token.
  const auto a = phi->encode("a</s>b", false, false);
  CHECK(std::find(a.begin(), a.end(), 2) != a.end());
  const auto b = phi->encode("<|user|>\nHi<|end|>", false, false);
  CHECK(std::find(b.begin(), b.end(), 32010) == b.end());
  const auto c = phi->encode("<|user|>\nHi<|end|>", false, true);
  CHECK(c.front() == 32010);
  CHECK(c.back() == 32007);
  CHECK(phi->is_eog(32007));  // <|end|>
  CHECK(phi->is_eog(32000));  // EOS <|endoftext|>
  CHECK_FALSE(phi->is_eog(32010));
}

TEST_CASE("BPE merges, special tokens and invalid UTF-8", "[tokenizer][bpe][testdata]") {
  if (!pagoda::testing::testdata_available("vocab/ggml-vocab-gpt-2.gguf")) return;
  const auto tok = from_writer(tiny_bpe("default"));
  CHECK(tok->encode("abab", false, false) == std::vector<int32_t>{256, 256});
  CHECK(tok->encode("ba", false, false) == std::vector<int32_t>{'b', 'a'});
  CHECK(tok->encode("x<|x|>", false, true) == std::vector<int32_t>{'x', 257});
  CHECK(tok->encode("<|x|>", false, false).size() == 5);
  const std::string bad = "\xFF\xFE a\xC3";
  CHECK(tok->decode(tok->encode(bad, false, false)) == bad);
  {
    // Llama 3 ignores merges for a word that is a token: "ab" without any merge rule.
    GgufWriter w = tiny_bpe("llama-bpe");
    w.set("tokenizer.ggml.merges", Value::string_array({}));
    CHECK(from_writer(w)->encode("ab", false, false) == std::vector<int32_t>{256});
    w.set("tokenizer.ggml.pre", Value::from_string("default"));
    CHECK(from_writer(w)->encode("ab", false, false) == std::vector<int32_t>{'a', 'b'});
  }
  {
    GgufWriter w = tiny_bpe("default");
    std::vector<int64_t> types(256, 1);
    types.push_back(5);  // "ab" marked unused: it decodes to nothing
    types.push_back(3);
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    const auto unused = from_writer(w);
    CHECK(unused->decode({256}) == "");
    CHECK(unused->decode({256}, true) == "");
  }
  const auto gpt2 = load("gpt-2");
  CHECK(gpt2->decode(gpt2->encode(bad, false, false)) == bad);
  CHECK(gpt2->encode("Hello world", false, false) == std::vector<int32_t>{15496, 995});
  CHECK(gpt2->is_eog(50256));
  CHECK_FALSE(gpt2->add_bos());
}

TEST_CASE("bad tokenizer metadata gives clear errors", "[tokenizer][errors]") {
  CHECK_THAT(error_of(tiny_bpe("no-such-pre")),
             Catch::Contains("tokenizer.ggml.pre") && Catch::Contains("no-such-pre"));
  {
    GgufWriter w = tiny_bpe("default");
    w.set("tokenizer.ggml.model", Value::from_string("rwkv"));
    CHECK_THAT(error_of(w), Catch::Contains("unsupported tokenizer.ggml.model \"rwkv\""));
  }
  {
    GgufWriter w = tiny_bpe("default");  // a WordPiece vocabulary needs its [UNK]
    w.set("tokenizer.ggml.model", Value::from_string("bert"));
    CHECK_THAT(error_of(w), Catch::Contains("WordPiece vocabulary has no unknown token"));
  }
  {
    GgufWriter w;
    w.set("general.architecture", Value::from_string("llama"));
    CHECK_THAT(error_of(w), Catch::Contains("no tokenizer.ggml.model"));
    w.set("tokenizer.ggml.model", Value::from_string("llama"));
    CHECK_THAT(error_of(w), Catch::Contains("no tokenizer.ggml.tokens"));
  }
  {
    GgufWriter w = tiny_bpe("default");
    w.set("tokenizer.ggml.token_type", Value::i32_array({1, 1}));
    CHECK_THAT(error_of(w), Catch::Contains("token_type has 2 entries"));
  }
  {
    GgufWriter w = tiny_bpe("default");
    w.set("tokenizer.ggml.merges", Value::string_array({"ab"}));
    CHECK_THAT(error_of(w), Catch::Contains("merges[0]"));
  }
  {
    GgufWriter w = tiny_bpe("default");
    w.set("tokenizer.ggml.add_bos_token", Value::from_bool(true));
    CHECK_THAT(error_of(w), Catch::Contains("no BOS token"));
  }
  {
    GgufWriter w = tiny_bpe("default");
    w.set("tokenizer.ggml.eos_token_id", Value::from_u32(100000));
    CHECK_THAT(error_of(w), Catch::Contains("eos_token_id") && Catch::Contains("outside"));
  }
  {
    GgufWriter w = tiny_bpe("default");
    w.set("tokenizer.ggml.tokens", Value::from_string("not an array"));
    CHECK_THAT(error_of(w), Catch::Contains("tokenizer.ggml.tokens"));
  }
}

// Added tokens that strip whitespace (Hugging Face AddedToken rstrip / lstrip). Phi-3's chat
// tokens strip the whitespace after them, and SentencePiece then adds its leading space to the
// text that follows, as Hugging Face and llama.cpp both tokenize it: "<|user|>\nHello<|end|>"
// is "<|user|>", "▁Hello", "<|end|>" (transformers issue #32136 shows the dropped newline).
TEST_CASE("Phi-3 chat tokens strip the whitespace after them", "[tokenizer][spm][strip][testdata]") {
  if (!pagoda::testing::testdata_available("vocab")) return;
  using Ids = std::vector<int32_t>;
  const auto phi = load("phi-3");
  CHECK(phi->encode("<|user|>\nHello<|end|>\n<|assistant|>\n", false, true) ==
        Ids{32010, 15043, 32007, 32001});
  CHECK(phi->encode("Hello<|end|>", false, true) == Ids{15043, 32007});
  // All of the run goes, spaces included; whitespace before a token stays (no lstrip).
  CHECK(phi->encode("<|user|>\n  Hi there <|end|>", false, true) == Ids{32010, 6324, 727, 29871, 32007});
  CHECK(phi->encode("<|end|>\n\n", false, true) == Ids{32007});
  CHECK(phi->encode("<|system|>\xE3\x80\x80x", false, true) == Ids{32006, 921});  // U+3000 is whitespace
  // "<s>", "<unk>" and "<|endoftext|>" do not strip: the newline stays, after the added "▁".
  CHECK(phi->encode("<s>\nHi", false, true) == Ids{1, 29871, 13, 18567});
  CHECK(phi->encode("<|endoftext|>\nx", false, true) == Ids{32000, 29871, 13, 29916});
  // "</s>" is user-defined here: matched (and stripping) even without parse_special.
  CHECK(phi->encode("a</s>\nb", false, false) == Ids{263, 2, 289});
  // Control-token text that is not parsed is plain text: nothing is stripped.
  CHECK(phi->encode("<|end|>\nx", false, false).size() > 3);

  // The rule belongs to the Phi-3 family: the same vocabulary in a file of another model keeps
  // its whitespace, as Llama 2's does.
  const auto phi_file = GgufFile::open(std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-phi-3.gguf");
  GgufWriter w;
  for (const auto& [key, value] : phi_file.metadata()) w.set(key, value);
  w.set("general.architecture", Value::from_string("llama"));
  w.set("general.name", Value::from_string("some model"));
  CHECK(from_writer(w)->encode("<|user|>\nHello", false, true) == Ids{32010, 29871, 13, 10994});
  w.set("general.name", Value::from_string("My Phi-3 Finetune"));  // found by name, as llama.cpp does
  CHECK(from_writer(w)->encode("<|user|>\nHello", false, true) == Ids{32010, 15043});
  CHECK(load("llama-spm")->encode("</s>\nHi", false, true) == Ids{2, 29871, 13, 18567});
}

TEST_CASE("strip flags drop whitespace next to a matched token", "[tokenizer][strip]") {
  using pagoda::tok::Fragment;
  using pagoda::tok::Vocab;
  const auto file = GgufFile::from_bytes(tiny_bpe("default").to_bytes());
  Vocab v = Vocab::load(file, false);
  const int32_t x = 257;  // "<|x|>", a control token
  auto parts = [&](std::string_view text, bool parse_special) {
    std::vector<Fragment> out;
    v.partition(text, parse_special, out);
    Words w;
    for (const auto& f : out) w.push_back(f.token >= 0 ? "#" + std::to_string(f.token) : std::string(f.text));
    return w;
  };
  CHECK(parts(" a \t<|x|>\n b ", true) == Words{" a \t", "#257", "\n b "});
  v.set_strip(x, pagoda::tok::kStripLeft | pagoda::tok::kStripRight);
  CHECK(parts(" a \t<|x|>\n b ", true) == Words{" a", "#257", "b "});
  CHECK(parts("a\xE3\x80\x80<|x|><|x|>  ", true) == Words{"a", "#257", "#257"});
  CHECK(parts("  <|x|>", true) == Words{"#257"});
  CHECK(parts(" a <|x|> b", false) == Words{" a <|x|> b"});  // not matched, nothing stripped
  v.set_strip(x, pagoda::tok::kStripRight);
  CHECK(parts(" a <|x|> b", true) == Words{" a ", "#257", "b"});
  CHECK_THROWS_AS(v.set_strip(9999, pagoda::tok::kStripRight), TokenizerError);
}
