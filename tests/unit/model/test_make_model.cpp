// make-model: determinism (same spec -> same bytes, whatever the thread count), that
// ModelConfig accepts its output for both architectures and every weight type, sane weight
// statistics, the built-in vocabulary, --vocab-from, and the CLI flags.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/model_writer.h"
#include "kernels/cpu/quants.h"
#include "server/cli/commands.h"
#include "tests/support/testdata.h"

using namespace pagoda;
using namespace pagoda::gguf;

namespace {

ModelSpec small_spec() {
  ModelSpec s;  // defaults: 2 layers, dim 256, ff 512, 4 heads, 2 kv heads
  s.seed = 7;
  return s;
}

std::vector<float> dequantize(const GgufFile& f, const TensorInfo& t) {
  std::vector<float> out(size_t(t.n_elements()));
  cpu::dequantize_row(t.type, f.tensor_data(t), out.data(), t.n_elements());
  return out;
}

void stats(const std::vector<float>& v, double& mean, double& stdev) {
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
  }
  mean = s / double(v.size());
  stdev = std::sqrt(std::max(0.0, s2 / double(v.size()) - mean * mean));
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "make-model");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cli::make_model(int(argv.size()), argv.data());
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pagoda_test_" + name)).string();
}

}  // namespace

TEST_CASE("same spec gives identical bytes, whatever the thread count; the seed matters") {
  ModelSpec s = small_spec();
  s.type = GgmlType::Q8_0;
  auto a = build_model(s, {}, 1).to_bytes();
  auto b = build_model(s, {}, 3).to_bytes();
  CHECK(a == b);
  s.seed = 8;
  auto c = build_model(s, {}, 1).to_bytes();
  REQUIRE(c.size() == a.size());
  CHECK(c != a);
}

TEST_CASE("from_gguf accepts make-model output for both architectures and every type") {
  for (Arch arch : {Arch::Llama, Arch::Qwen2}) {
    for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k",
                             "q5_k", "q6_k", "iq4_nl", "iq4_xs"}) {
      INFO(arch_name(arch) << " " << type);
      ModelSpec s = small_spec();
      s.arch = arch;
      s.type = parse_weight_type(type);
      GgufFile f = GgufFile::from_bytes(build_model(s).to_bytes(), "m.gguf");
      ModelConfig c = ModelConfig::from_gguf(f);
      CHECK(c.arch == arch);
      CHECK(c.n_layers == 2);
      CHECK(c.dim == 256);
      CHECK(c.ff_dim == 512);
      CHECK(c.n_heads == 4);
      CHECK(c.n_kv_heads == 2);
      CHECK(c.head_dim == 64);
      CHECK(c.ctx_train == 1024);
      CHECK(c.vocab_size == builtin_vocab_size());
      CHECK(c.qkv_bias == (arch == Arch::Qwen2));
      CHECK(c.rope_freq_base == (arch == Arch::Qwen2 ? 1e6f : 1e4f));
      CHECK_FALSE(c.tied_embeddings);
      CHECK(f.find_tensor("blk.1.ffn_down.weight")->type == s.type);
      CHECK(f.find_tensor("token_embd.weight")->type == s.type);
      CHECK(f.find_tensor("blk.0.attn_norm.weight")->type == GgmlType::F32);
      // Every value is finite after dequantization.
      size_t non_finite = 0;
      for (const TensorInfo& t : f.tensors())
        for (float x : dequantize(f, t)) non_finite += !std::isfinite(x);
      CHECK(non_finite == 0);
    }
  }
}

TEST_CASE("make-model writes qwen3, gemma2, gemma3 and phi3 files that load with their traits") {
  for (Arch arch : {Arch::Qwen3, Arch::Gemma2, Arch::Gemma3, Arch::Phi3}) {
    for (const char* type : {"f16", "q4_k"}) {
      INFO(arch_name(arch) << " " << type);
      ModelSpec s = small_spec();
      s.arch = arch;
      s.n_layers = 6;
      s.type = parse_weight_type(type);
      if (arch == Arch::Phi3) s.rope_freqs = RopeFreqs::LongRope;
      GgufFile f = GgufFile::from_bytes(build_model(s).to_bytes(), "m.gguf");
      const ModelConfig c = ModelConfig::from_gguf(f);
      CHECK(c.arch == arch);
      CHECK(c.rope_neox);
      CHECK_FALSE(c.qkv_bias);
      CHECK(c.qk_norm == (arch == Arch::Qwen3 || arch == Arch::Gemma3));
      CHECK(c.post_norms == (arch == Arch::Gemma2 || arch == Arch::Gemma3));
      CHECK(c.gelu_ffn == c.post_norms);
      CHECK(c.tied_embeddings == c.post_norms);  // gemma ties its LM head
      CHECK(c.fused_qkv == (arch == Arch::Phi3));
      CHECK(c.attn_softcap == (arch == Arch::Gemma2 ? 50.0f : 0.0f));
      const std::vector<int> windows = arch == Arch::Gemma2   ? std::vector<int>{4096, 0, 4096, 0, 4096, 0}
                                       : arch == Arch::Gemma3 ? std::vector<int>{512, 512, 512, 512, 512, 0}
                                       : arch == Arch::Phi3   ? std::vector<int>(6, 1023)
                                                              : std::vector<int>(6, 0);
      CHECK(c.layer_window == windows);
      CHECK(c.rope_factors_long.size() == (arch == Arch::Phi3 ? 32u : 0u));
      CHECK(c.rope_orig_ctx == (arch == Arch::Phi3 ? 256 : 0));
    }
  }
  ModelSpec bad = small_spec();
  bad.rope_freqs = RopeFreqs::LongRope;
  CHECK_THROWS_AS(build_model(bad), ModelSpecError);  // longrope is phi3's
  bad = small_spec();
  bad.arch = Arch::Gemma2;
  bad.sliding_window = 0;
  CHECK_THROWS_AS(build_model(bad), ModelSpecError);
  CHECK(parse_arch_name("gemma3") == Arch::Gemma3);
  CHECK_THROWS_WITH(parse_arch_name("gpt2"), Catch::Matchers::Contains("qwen3"));
}

TEST_CASE("weights are scaled so activations stay sane") {
  ModelSpec s = small_spec();
  s.type = GgmlType::F32;
  s.arch = Arch::Qwen2;
  GgufFile f = GgufFile::from_bytes(build_model(s).to_bytes());
  double mean = 0, sd = 0;
  stats(dequantize(f, *f.find_tensor("blk.0.attn_q.weight")), mean, sd);
  CHECK(std::abs(mean) < 0.002);
  CHECK(sd == Approx(1.0 / 16.0).epsilon(0.05));  // 1 / sqrt(in = 256)
  stats(dequantize(f, *f.find_tensor("blk.0.ffn_down.weight")), mean, sd);
  CHECK(sd == Approx(1.0 / std::sqrt(512.0)).epsilon(0.05));
  stats(dequantize(f, *f.find_tensor("blk.1.ffn_norm.weight")), mean, sd);
  CHECK(mean == Approx(1.0).epsilon(0.01));
  CHECK(sd < 0.05);
  stats(dequantize(f, *f.find_tensor("blk.1.attn_v.bias")), mean, sd);
  CHECK(std::abs(mean) < 0.01);
  CHECK(sd > 0.005);
  // Different tensors get different values.
  auto q = dequantize(f, *f.find_tensor("blk.0.ffn_gate.weight"));
  auto u = dequantize(f, *f.find_tensor("blk.0.ffn_up.weight"));
  CHECK(q != u);
}

TEST_CASE("built-in vocabulary: GPT-2 byte tokens, control tokens, padding, chat template") {
  ModelSpec s = small_spec();
  s.vocab_size = 300;
  GgufFile f = GgufFile::from_bytes(build_model(s).to_bytes());
  CHECK(ModelConfig::from_gguf(f).vocab_size == 300);
  CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
  const auto& tokens = *f.get_string_array("tokenizer.ggml.tokens");
  const auto& types = *f.get_int_array("tokenizer.ggml.token_type");
  REQUIRE(tokens.size() == 300);
  REQUIRE(types.size() == 300);
  CHECK(tokens['A'] == "A");
  CHECK(tokens[' '] == "\xc4\xa0");   // U+0120 'Ġ'
  CHECK(tokens['\n'] == "\xc4\x8a");  // U+010A 'Ċ'
  CHECK(tokens[0xff] == "\xc3\xbf");  // printable Latin-1 stands for itself
  CHECK(tokens[0x7f] == "\xc4\xa1");  // DEL is the 34th remapped byte: U+0121
  CHECK(types['A'] == 1);
  CHECK(tokens[256] == "<|bos|>");
  CHECK(tokens[257] == "<|eos|>");
  CHECK(tokens[258] == "<|im_start|>");
  CHECK(tokens[259] == "<|im_end|>");
  for (int id = 256; id < 260; ++id) CHECK(types[id] == 3);
  CHECK(tokens[260] == "\xc4\xa0" "ba");   // padding: pseudo-words after a space
  CHECK(tokens[261] == "\xc4\xa0" "be");
  CHECK(tokens[299] == "\xc4\xa0" "ku");
  CHECK(types[299] == 1);
  CHECK(f.get_int("tokenizer.ggml.bos_token_id") == 256);
  CHECK(f.get_int("tokenizer.ggml.eos_token_id") == 257);
  CHECK(f.get_bool("tokenizer.ggml.add_bos_token") == true);
  CHECK(f.get_string_array("tokenizer.ggml.merges")->empty());
  CHECK_THAT(*f.get_string("tokenizer.chat_template"), Catch::Contains("<|im_start|>"));
  // All tokens are distinct, also with a vocabulary big enough for three-syllable padding.
  std::vector<std::string> all(tokens.begin(), tokens.end());
  std::sort(all.begin(), all.end());
  CHECK(std::unique(all.begin(), all.end()) == all.end());
  GgufWriter big;
  add_builtin_vocab(big, 128256);
  GgufFile fb = GgufFile::from_bytes(big.to_bytes());
  all = *fb.get_string_array("tokenizer.ggml.tokens");
  CHECK(all[260 + 100] == "\xc4\xa0" "baba");  // first two-syllable word
  CHECK(all[260 + 10100] == "\xc4\xa0" "bababa");
  std::sort(all.begin(), all.end());
  CHECK(std::unique(all.begin(), all.end()) == all.end());

  s.vocab_size = 100;
  CHECK_THROWS_AS(build_model(s), ModelSpecError);
}

TEST_CASE("--vocab-from copies every tokenizer key and the vocabulary size", "[testdata]") {
  if (!pagoda::testing::testdata_available("vocab/ggml-vocab-llama-spm.gguf")) return;
  const std::string src_path = std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(src_path)) {
    WARN("no testdata " << src_path);
    return;
  }
  GgufFile src = GgufFile::open(src_path);
  ModelSpec s = small_spec();
  s.n_layers = 1;
  s.vocab_from = src_path;
  GgufFile f = GgufFile::from_bytes(build_model(s).to_bytes());
  int n_tok = 0;
  for (const auto& [key, v] : src.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    INFO(key);
    const Value* copied = f.find(key);
    REQUIRE(copied != nullptr);
    CHECK(copied->type == v.type);
    CHECK(copied->s == v.s);
    CHECK(copied->arr_str == v.arr_str);
    CHECK(copied->arr_int == v.arr_int);
    CHECK(copied->arr_float == v.arr_float);
    ++n_tok;
  }
  CHECK(n_tok >= 3);
  const int vocab = int(src.get_string_array("tokenizer.ggml.tokens")->size());
  CHECK(ModelConfig::from_gguf(f).vocab_size == vocab);
  CHECK(f.get_int("llama.vocab_size") == vocab);
  s.vocab_size = vocab + 1;
  CHECK_THROWS_AS(build_model(s), ModelSpecError);
}

TEST_CASE("spec validation names the problem") {
  ModelSpec s = small_spec();
  s.n_heads = 3;
  CHECK_THROWS_WITH(build_model(s), Catch::Contains("not a multiple of heads"));
  s = small_spec();
  s.n_kv_heads = 3;
  CHECK_THROWS_WITH(build_model(s), Catch::Contains("kv-heads"));
  s = small_spec();
  s.dim = 96, s.n_heads = 2, s.n_kv_heads = 2, s.type = GgmlType::Q4_K;
  CHECK_THROWS_WITH(build_model(s), Catch::Contains("multiple of 256 for type q4_k"));
  s = small_spec();
  s.n_layers = 0;
  CHECK_THROWS_WITH(build_model(s), Catch::Contains("layers must be positive"));
  CHECK_THROWS_AS(parse_weight_type("q8_k"), ModelSpecError);
  CHECK_THROWS_AS(model_preset("gpt5"), ModelSpecError);
}

TEST_CASE("presets have the published shapes") {
  ModelSpec t = model_preset("tinyllama-1.1b");
  CHECK(t.n_layers == 22);
  CHECK(t.dim == 2048);
  CHECK(t.ff_dim == 5632);
  CHECK(t.n_heads == 32);
  CHECK(t.n_kv_heads == 4);
  CHECK(t.vocab_size == 32000);
  CHECK(t.type == GgmlType::Q8_0);
  ModelSpec l = model_preset("llama3-8b");
  CHECK(l.n_layers == 32);
  CHECK(l.dim == 4096);
  CHECK(l.ff_dim == 14336);
  CHECK(l.n_kv_heads == 8);
  CHECK(l.vocab_size == 128256);
  CHECK(l.rope_freq_base == 500000.0f);
  CHECK(model_preset("demo").dim == 256);
}

TEST_CASE("progress reaches the total") {
  uint64_t last = 0, total = 0;
  int calls = 0;
  build_model(small_spec(), [&](uint64_t d, uint64_t t) {
    CHECK(d >= last);
    last = d, total = t, ++calls;
  }).to_bytes();
  CHECK(calls == 3 + 2 * 9);  // one per tensor
  CHECK(last == total);
}

TEST_CASE("CLI: flags override the preset, output is deterministic, bad flags fail") {
  const std::string a = temp_path("mm_a.gguf"), b = temp_path("mm_b.gguf");
  const std::vector<std::string> args = {"--preset", "tinyllama-1.1b", "--layers", "1",
                                         "--dim", "256", "--ff", "512", "--heads", "4",
                                         "--kv-heads", "2", "--vocab-size", "512", "--arch",
                                         "qwen2", "--type", "q4_k", "--seed", "3", "--quiet"};
  auto with_output = [&](const std::string& out) {
    auto v = args;
    v.push_back("--output");
    v.push_back(out);
    return v;
  };
  REQUIRE(run_cli(with_output(a)) == 0);
  REQUIRE(run_cli(with_output(b)) == 0);
  CHECK(read_file(a) == read_file(b));
  {
    GgufFile f = GgufFile::open(a);
    ModelConfig c = ModelConfig::from_gguf(f);
    CHECK(c.arch == Arch::Qwen2);
    CHECK(c.n_layers == 1);
    CHECK(c.dim == 256);
    CHECK(c.vocab_size == 512);
    CHECK(c.ctx_train == 2048);  // from the preset
    CHECK(f.find_tensor("blk.0.ffn_up.weight")->type == GgmlType::Q4_K);
  }
  std::filesystem::remove(a);
  std::filesystem::remove(b);
  CHECK(run_cli({"--output", a, "--bogus", "1"}) == 2);
  CHECK(run_cli({"--output", a, "--layers", "x"}) == 2);
  CHECK(run_cli({"--output", a, "--type", "q8_k"}) == 2);
  CHECK(run_cli({"--layers", "2"}) == 2);  // no --output
  CHECK(run_cli({"--output", a, "--preset", "nope"}) == 2);
  CHECK(run_cli({"--output", a, "--heads", "3"}) == 2);
  CHECK_FALSE(std::filesystem::exists(a));
}

TEST_CASE("--head-dim: heads wider than dim / heads, as Qwen3-30B-A3B has (32 x 128 over 2048)") {
  ModelSpec s = small_spec();  // dim 256, 4 heads, 2 kv heads
  s.arch = Arch::Qwen3Moe;
  s.head_dim = 128;            // q width 512 != dim
  GgufFile f = GgufFile::from_bytes(build_model(s).to_bytes(), "m.gguf");
  const ModelConfig c = ModelConfig::from_gguf(f);
  CHECK(c.head_dim == 128);
  CHECK(c.n_rot == 128);
  const TensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  const TensorInfo* o = f.find_tensor("blk.0.attn_output.weight");
  REQUIRE(q);
  REQUIRE(o);
  CHECK(q->dims == std::vector<int64_t>{256, 512});
  CHECK(o->dims == std::vector<int64_t>{512, 256});
  s.head_dim = 7;
  CHECK_THROWS_WITH(build_model(s), Catch::Matchers::Contains("even"));
  CHECK(run_cli({"--output", temp_path("hd.gguf"), "--quiet", "--arch", "qwen3", "--head-dim", "-2"}) != 0);
  std::remove(temp_path("hd.gguf").c_str());
}
