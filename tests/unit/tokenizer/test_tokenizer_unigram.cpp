// The Unigram ("t5") tokenizer on small hand-made vocabularies whose best cuts are known: the
// highest total score wins, unknown code points merge into one unknown token, the normalizer's
// space prefix and whitespace merging, user-defined and control tokens, EOS framing, decoding,
// and a precompiled character map built by hand.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unigram.h"

using pagoda::Tokenizer;
namespace gguf = pagoda::gguf;

namespace {

const std::string S = "\xE2\x96\x81";  // "▁"

struct Piece {
  std::string text;
  float score;
  int type = 1;  // normal
};

// A t5 vocabulary: <pad> </s> <unk> first (llama.cpp's default ids 0, 1, 2), then `pieces`.
gguf::GgufFile vocab(const std::vector<Piece>& pieces, bool space_prefix, bool merge_spaces,
                     const std::vector<int64_t>& charsmap = {}) {
  std::vector<std::string> tokens = {"<pad>", "</s>", "<unk>"};
  std::vector<double> scores = {0, 0, 0};
  std::vector<int64_t> types = {3, 3, 2};
  for (const Piece& p : pieces) tokens.push_back(p.text), scores.push_back(p.score), types.push_back(p.type);
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::from_string("t5"));
  w.set("tokenizer.ggml.model", gguf::Value::from_string("t5"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::from_bool(space_prefix));
  w.set("tokenizer.ggml.remove_extra_whitespaces", gguf::Value::from_bool(merge_spaces));
  if (!charsmap.empty()) w.set("tokenizer.ggml.precompiled_charsmap", gguf::Value::i32_array(charsmap));
  return gguf::GgufFile::from_bytes(w.to_bytes());
}

// Ids: 3 "▁", 4 "▁ab", 5 "▁a", 6 "b", 7 "a", 8 "▁c", 9 "<|x|>" (user-defined).
std::vector<Piece> pieces(float ab_score) {
  return {{S, -2}, {S + "ab", ab_score}, {S + "a", -1}, {"b", -1}, {"a", -3}, {S + "c", -1}, {"<|x|>", -9, 4}};
}

}  // namespace

TEST_CASE("Unigram picks the cut with the highest total score", "[tokenizer][unigram]") {
  // "▁ab" at -3 loses to "▁a" + "b" at -2; at -1.5 it wins.
  const auto low = Tokenizer::from_gguf(vocab(pieces(-3.0f), true, true));
  CHECK(low->encode("ab", false, false) == std::vector<int32_t>{5, 6});
  const auto high = Tokenizer::from_gguf(vocab(pieces(-1.5f), true, true));
  CHECK(high->encode("ab", false, false) == std::vector<int32_t>{4});
  CHECK(high->encode("ab c", false, false) == std::vector<int32_t>{4, 8});
  // EOS (id 1) is added by default, BOS is not.
  CHECK(high->encode("ab", true, false) == std::vector<int32_t>{4, 1});
  CHECK(high->decode(high->encode("ab c", true, false)) == "ab c");
}

TEST_CASE("Unigram merges a run of unknown code points into one unknown token", "[tokenizer][unigram]") {
  const auto tok = Tokenizer::from_gguf(vocab(pieces(-1.5f), true, true));
  // "▁" then x, y, é unknown (one token), then "b".
  CHECK(tok->encode("xy\xC3\xA9" "b", false, false) == std::vector<int32_t>{3, 2, 6});
  // A malformed byte is U+FFFD, unknown too.
  CHECK(tok->encode("a\xFF", false, false) == std::vector<int32_t>{5, 2});
}

TEST_CASE("Unigram's normalizer: space prefix, whitespace merging, user-defined text", "[tokenizer][unigram]") {
  const auto file = vocab(pieces(-1.5f), true, true);
  const pagoda::tok::UnigramTokenizer merged(file);
  CHECK(merged.normalize("  ab   c ") == S + "ab" + S + "c");
  CHECK(merged.normalize("") == "");
  const pagoda::tok::UnigramTokenizer kept(vocab(pieces(-1.5f), true, false));
  CHECK(kept.normalize("ab  c ") == S + "ab" + S + S + "c" + S);
  const pagoda::tok::UnigramTokenizer bare(vocab(pieces(-1.5f), false, false));
  CHECK(bare.normalize("ab c") == "ab" + S + "c");
  // A user-defined token is matched as a piece of its own (score 0 wins) and kept verbatim.
  const auto tok = Tokenizer::from_gguf(vocab(pieces(-1.5f), true, true));
  CHECK(tok->encode("ab<|x|>c", false, false) == std::vector<int32_t>{4, 9, 8});  // each raw run gets its "▁"
  // Control text is the control token only with parse_special.
  CHECK(tok->encode("ab</s>", false, true) == std::vector<int32_t>{4, 1});
}

TEST_CASE("Unigram applies a precompiled character map", "[tokenizer][unigram]") {
  // A double array mapping "A" to "a": node 0 has BASE 1; the child labelled 'A' (0x41) sits at
  // 1 ^ 0x41 = 64, a leaf with BASE 1, so its value node is 64 ^ 1 = 65, holding offset 0 of
  // the replacement strings ("a\0").
  std::vector<uint32_t> nodes(66, 0);
  nodes[0] = 1u << 10;
  nodes[64] = 0x41u | 1u << 8 | 1u << 10;
  nodes[65] = 0;
  std::vector<int64_t> blob;
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) blob.push_back(int64_t((v >> (8 * i)) & 0xFF));
  };
  put32(uint32_t(nodes.size() * 4));
  for (uint32_t n : nodes) put32(n);
  blob.push_back('a'), blob.push_back(0);
  const pagoda::tok::UnigramTokenizer tok(vocab(pieces(-1.5f), true, true, blob));
  CHECK(tok.normalize("AB") == S + "aB");
  CHECK(tok.normalize("bA") == S + "ba");
  // A map whose array does not fit its blob is refused.
  blob[0] = 0x7F, blob[1] = 0x7F;
  CHECK_THROWS_AS(pagoda::tok::UnigramTokenizer(vocab(pieces(-1.5f), true, true, blob)), pagoda::TokenizerError);
}
