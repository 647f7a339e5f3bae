// BertModel against a reference written here: the BERT forward in plain double-precision loops
// over the file's F32 tensors (embeddings + LayerNorm, post-norm layers with biases, all-pairs
// softmax attention, tanh GELU, mean or CLS pooling, L2 norm; for nomic-bert rotary Q/K in NeoX
// halves, a fused QKV, SwiGLU and no matrix biases; for rerankers token type 1 on a pair's second
// text and the classification head, dense + tanh then the score). Tolerance: every component of the
// normalized embedding within 1e-4 of the reference for F32 weights (the engine sums in float
// with SIMD order; the reference in double), and cosine >= 0.999 for F16 weights (rounded once).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/encoder/bert_model.h"
#include "engine/encoder/bert_writer.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/cosine.h"
#include "tests/support/test_files.h"

using namespace pagoda::encoder;
using pagoda::gguf::GgufFile;

namespace {

// A whole F32 tensor of the file.
std::vector<double> t32(const GgufFile& f, const std::string& name) {
  const auto* t = f.find_tensor(name);
  REQUIRE(t != nullptr);
  REQUIRE(t->type == pagoda::GgmlType::F32);
  const auto* p = reinterpret_cast<const float*>(f.tensor_data(*t));
  return std::vector<double>(p, p + t->n_elements());
}

using Mat = std::vector<std::vector<double>>;  // [tokens][features]

// A tensor that may be absent (nomic-bert's biases): empty then.
std::vector<double> t32_opt(const GgufFile& f, const std::string& name) {
  return f.find_tensor(name) ? t32(f, name) : std::vector<double>{};
}

// x * w^T + b, w holding `out` rows; an empty b is no bias.
Mat linear(const Mat& x, const std::vector<double>& w, const std::vector<double>& b) {
  const size_t in = x[0].size(), out = w.size() / in;
  Mat y(x.size(), std::vector<double>(out));
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (size_t k = 0; k < in; ++k) s += w[o * in + k] * x[i][k];
      y[i][o] = s;
    }
  return y;
}

void norm(Mat& x, const std::vector<double>& g, const std::vector<double>& b, double eps) {
  for (auto& row : x) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= row.size();
    for (double v : row) var += (v - mean) * (v - mean);
    var /= row.size();
    for (size_t j = 0; j < row.size(); ++j) row[j] = (row[j] - mean) / std::sqrt(var + eps) * g[j] + b[j];
  }
}

// Rotates each head's dimension i with i + hd/2 by pos * base^(-2i/hd), pos = the row.
void rotate(Mat& x, int hd, double base) {
  for (size_t pos = 0; pos < x.size(); ++pos)
    for (size_t h = 0; h < x[pos].size() / hd; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double th = double(pos) / std::pow(base, 2.0 * i / hd);
        double& a = x[pos][h * hd + i];
        double& b = x[pos][h * hd + i + hd / 2];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(th) - b0 * std::sin(th);
        b = a0 * std::sin(th) + b0 * std::cos(th);
      }
}

std::vector<double> reference(const GgufFile& f, const std::vector<int32_t>& ids, int segment_b = -1) {
  const std::string arch = *f.get_string("general.architecture"), key = arch + ".";
  const bool nomic = arch == "nomic-bert";
  const int d = int(*f.get_int(key + "embedding_length")), heads = int(*f.get_int(key + "attention.head_count"));
  const int layers = int(*f.get_int(key + "block_count")), hd = d / heads;
  const double eps = *f.get_float(key + "attention.layer_norm_epsilon");
  const auto tok = t32(f, "token_embd.weight"), pos = t32_opt(f, "position_embd.weight"), typ = t32(f, "token_types.weight");
  const size_t n = ids.size();
  Mat x(n, std::vector<double>(d));
  for (size_t i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) {
      const size_t type = segment_b >= 0 && int(i) >= segment_b && typ.size() >= size_t(2 * d) ? 1 : 0;
      x[i][j] = tok[size_t(ids[i]) * d + j] + (nomic ? 0.0 : pos[i * d + j]) + typ[type * d + j];
    }
  norm(x, t32(f, "token_embd_norm.weight"), t32(f, "token_embd_norm.bias"), eps);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto lin = [&](const Mat& in, const std::string& m) { return linear(in, t32(f, p + m + ".weight"), t32_opt(f, p + m + ".bias")); };
    Mat q, k, v;
    if (nomic) {
      const Mat qkv = lin(x, "attn_qkv");
      for (const auto& row : qkv) {
        q.emplace_back(row.begin(), row.begin() + d);
        k.emplace_back(row.begin() + d, row.begin() + 2 * d);
        v.emplace_back(row.begin() + 2 * d, row.end());
      }
      rotate(q, hd, *f.get_float(key + "rope.freq_base"));
      rotate(k, hd, *f.get_float(key + "rope.freq_base"));
    } else {
      q = lin(x, "attn_q"), k = lin(x, "attn_k"), v = lin(x, "attn_v");
    }
    Mat a(n, std::vector<double>(d, 0.0));
    for (int h = 0; h < heads; ++h)
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> s(n);
        double mx = -1e300, sum = 0;
        for (size_t j = 0; j < n; ++j) {
          for (int u = 0; u < hd; ++u) s[j] += q[i][h * hd + u] * k[j][h * hd + u];
          s[j] /= std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j < n; ++j)
          for (int u = 0; u < hd; ++u) a[i][h * hd + u] += s[j] / sum * v[j][h * hd + u];
      }
    const Mat o = lin(a, "attn_output");
    for (size_t i = 0; i < n; ++i)
      for (int j = 0; j < d; ++j) x[i][j] += o[i][j];
    norm(x, t32(f, p + "attn_output_norm.weight"), t32(f, p + "attn_output_norm.bias"), eps);
    Mat up = lin(x, "ffn_up");
    if (nomic) {
      const Mat gate = lin(x, "ffn_gate");
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < up[i].size(); ++j) up[i][j] *= gate[i][j] / (1 + std::exp(-gate[i][j]));
    } else {
      for (auto& row : up)
        for (double& e : row) e = 0.5 * e * (1 + std::tanh(std::sqrt(2 / M_PI) * (e + 0.044715 * e * e * e)));
    }
    const Mat down = lin(up, "ffn_down");
    for (size_t i = 0; i < n; ++i)
      for (int j = 0; j < d; ++j) x[i][j] += down[i][j];
    norm(x, t32(f, p + "layer_output_norm.weight"), t32(f, p + "layer_output_norm.bias"), eps);
  }
  std::vector<double> out(d, 0.0);
  if (*f.get_int(key + "pooling_type") == 4) {  // rank: the head on the first token, unnormalized
    Mat h{x[0]};
    if (f.find_tensor("cls.weight")) {
      h = linear(h, t32(f, "cls.weight"), t32_opt(f, "cls.bias"));
      for (double& e : h[0]) e = std::tanh(e);
    }
    if (f.find_tensor("cls.output.weight")) h = linear(h, t32(f, "cls.output.weight"), t32_opt(f, "cls.output.bias"));
    return h[0];
  }
  if (*f.get_int(key + "pooling_type") == 2) {
    out = x[0];
  } else {
    for (const auto& row : x)
      for (int j = 0; j < d; ++j) out[j] += row[j] / n;
  }
  double len = 0;
  for (double e : out) len += e * e;
  for (double& e : out) e /= std::sqrt(len);
  return out;
}

using pagoda::testing::cosine;

}  // namespace

TEST_CASE("the bert and nomic-bert forwards match a plain float reference", "[encoder][bert]") {
  pagoda::testing::ScratchDir dir("bert-ref");
  for (auto [arch, pooling] : {std::pair{EncoderArch::Bert, Pooling::Mean}, std::pair{EncoderArch::Bert, Pooling::Cls},
                               std::pair{EncoderArch::NomicBert, Pooling::Mean}, std::pair{EncoderArch::NomicBert, Pooling::Cls}}) {
    BertSpec spec;
    spec.arch = arch;
    spec.type = pagoda::GgmlType::F32;
    spec.n_layers = 3;
    spec.pooling = pooling;
    spec.seed = 7;
    const std::string path = dir.file("enc-" + std::to_string(int(arch)) + "-" + std::to_string(int(pooling)) + ".gguf");
    write_bert_model(spec, path);
    const auto file = GgufFile::open(path);
    const BertModel model(file, 2);
    const auto tok = pagoda::Tokenizer::from_gguf(file);
    for (const char* text : {"hello world", "The cat sat on the mat.", "x", "What is the capital of France?"}) {
      const auto ids = tok->encode(text, true, false);
      REQUIRE(ids.front() == 2);  // [CLS]
      const auto got = model.embed(ids);
      const auto want = reference(file, ids);
      REQUIRE(got.size() == want.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      INFO(text << " arch " << int(arch) << " pooling " << int(pooling) << " worst " << worst);
      CHECK(worst < 1e-4);
      CHECK(cosine(got, want) > 0.99999);
    }
  }
}

TEST_CASE("F16 bert weights stay close to the reference of their F32 twin", "[encoder][bert]") {
  pagoda::testing::ScratchDir dir("bert-f16");
  BertSpec spec;
  spec.seed = 3;
  spec.type = pagoda::GgmlType::F32;
  write_bert_model(spec, dir.file("f32.gguf"));
  spec.type = pagoda::GgmlType::F16;
  write_bert_model(spec, dir.file("f16.gguf"));
  const auto f32 = GgufFile::open(dir.file("f32.gguf")), f16 = GgufFile::open(dir.file("f16.gguf"));
  const BertModel model(f16, 1);
  const auto ids = pagoda::Tokenizer::from_gguf(f16)->encode("hello paris dog", true, false);
  CHECK(cosine(model.embed(ids), reference(f32, ids)) > 0.999);
}

TEST_CASE("bert embeddings: different inputs differ, order matters, bad inputs throw", "[encoder][bert]") {
  pagoda::testing::ScratchDir dir("bert-misc");
  BertSpec spec;
  spec.ctx = 16;
  write_bert_model(spec, dir.file("m.gguf"));
  const auto file = GgufFile::open(dir.file("m.gguf"));
  const BertModel model(file, 1);
  const auto tok = pagoda::Tokenizer::from_gguf(file);
  const auto a = model.embed(tok->encode("cat dog", true, false));
  const auto b = model.embed(tok->encode("dog cat", true, false));
  double len = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) len += double(a[i]) * a[i], diff += std::abs(a[i] - b[i]);
  CHECK(std::abs(len - 1) < 1e-5);
  CHECK(diff > 1e-3);  // positions matter
  CHECK_THROWS_AS(model.embed({}), EncoderError);
  CHECK_THROWS_AS(model.embed(std::vector<int32_t>(17, 5)), EncoderError);
  CHECK_THROWS_AS(model.embed({2, 100000, 3}), EncoderError);
  CHECK(model.config().pooling == Pooling::Mean);
}

TEST_CASE("rerankers: the classification head's score of a pair, token types on the second text", "[encoder][bert]") {
  pagoda::testing::ScratchDir dir("bert-rank");
  for (bool xlm : {false, true}) {
    BertSpec spec;
    spec.xlm_roberta = xlm;
    spec.type = pagoda::GgmlType::F32;
    spec.pooling = Pooling::Rank;
    spec.seed = 11;
    const std::string path = dir.file(xlm ? "xlm.gguf" : "bert.gguf");
    write_bert_model(spec, path);
    const auto file = GgufFile::open(path);
    const BertModel model(file, 2);
    REQUIRE(model.config().n_cls_out == 1);
    CHECK(model.config().n_types == (xlm ? 1 : 2));
    const auto tok = pagoda::Tokenizer::from_gguf(file);
    auto ids = tok->encode("what is the capital of france", false, false);
    const int segment_b = int(ids.size());
    const auto doc = tok->encode("paris is the capital", false, false);
    ids.insert(ids.end(), doc.begin(), doc.end());
    const auto got = model.embed(ids, segment_b);
    const auto want = reference(file, ids, segment_b);
    REQUIRE(got.size() == 1);
    REQUIRE(want.size() == 1);
    INFO((xlm ? "xlm-roberta" : "bert") << " score " << got[0] << " reference " << want[0]);
    CHECK(std::abs(got[0] - want[0]) < 1e-4);
    // The second segment's token type changes a BERT score; XLM-RoBERTa has one type only.
    const double whole_a = model.embed(ids, -1)[0];
    if (xlm) {
      CHECK(whole_a == Approx(got[0]).margin(1e-6));
    } else {
      CHECK(std::abs(whole_a - got[0]) > 1e-5);
      CHECK(std::abs(whole_a - reference(file, ids, -1)[0]) < 1e-4);
    }
  }
}

TEST_CASE("a rank file without a classification head is refused", "[encoder][bert]") {
  pagoda::testing::ScratchDir dir("bert-rank-bad");
  BertSpec spec;
  write_bert_model(spec, dir.file("m.gguf"));
  auto src = GgufFile::open(dir.file("m.gguf"));
  pagoda::gguf::GgufWriter w;
  for (const auto& [key, value] : src.metadata()) w.set(key, value);
  w.set("bert.pooling_type", pagoda::gguf::Value::from_u32(4));
  for (const auto& t : src.tensors()) {
    const auto* p = static_cast<const uint8_t*>(src.tensor_data(t));
    w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(p, p + t.nbytes));
  }
  const auto bad = GgufFile::from_bytes(w.to_bytes());
  CHECK_THROWS_AS(BertConfig::from_gguf(bad), EncoderError);
}
