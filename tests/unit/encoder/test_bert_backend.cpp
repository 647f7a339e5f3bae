// BertModel with its layers on a Backend (BertBackendForward), here the CPU backend: the same
// embeddings and reranker scores as the CPU path (every component within 1e-5; cosine >=
// 0.99999), for batches split into several passes by the backend's row buffers too; and the
// architectures it does not run refused at construction. tests/gpu/test_cuda_encoder.cpp runs
// the same path on the CUDA backend.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/encoder/bert_model.h"
#include "engine/encoder/bert_writer.h"
#include "engine/gguf/gguf.h"
#include "tests/support/cosine.h"
#include "tests/support/test_files.h"

using namespace pagoda;
using namespace pagoda::encoder;

namespace {

using pagoda::testing::cosine;

}  // namespace

TEST_CASE("the backend path of the bert forward matches the CPU path", "[encoder][bert]") {
  testing::ScratchDir dir("bert-backend");
  for (Pooling pooling : {Pooling::Mean, Pooling::Cls, Pooling::Rank}) {
    BertSpec spec;
    spec.pooling = pooling;
    spec.xlm_roberta = pooling == Pooling::Cls;
    spec.seed = 23;
    const std::string path = dir.file("m" + std::to_string(int(pooling)) + ".gguf");
    write_bert_model(spec, path);
    const auto file = gguf::GgufFile::open(path);
    const BertModel cpu(file, 2);
    // Buffers of the context (128 rows) alone: the batch below takes several passes.
    const BertModel on_backend(file, 2, std::make_unique<CpuBackend>(2), 0);
    std::mt19937 rng(5);
    std::vector<EncoderInput> inputs;
    for (int len : {1, 20, 128, 77, 50, 3}) {
      EncoderInput in;
      for (int i = 0; i < len; ++i) in.tokens.push_back(int32_t(rng() % uint32_t(cpu.config().vocab_size)));
      if (pooling == Pooling::Rank) in.segment_b = len / 2;
      inputs.push_back(std::move(in));
    }
    const auto want = cpu.embed_batch(inputs);
    const auto got = on_backend.embed_batch(inputs);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("pooling " << int(pooling) << ", input " << i);
      REQUIRE(got[i].size() == want[i].size());
      double worst = 0;
      for (size_t j = 0; j < got[i].size(); ++j) worst = std::max(worst, double(std::fabs(got[i][j] - want[i][j])));
      CHECK(worst <= 1e-5);
      if (pooling != Pooling::Rank) CHECK(cosine(got[i], want[i]) >= 0.99999);
    }
  }
}

TEST_CASE("the backend path refuses nomic-bert", "[encoder][bert]") {
  testing::ScratchDir dir("bert-backend-nomic");
  BertSpec spec;
  spec.arch = EncoderArch::NomicBert;
  write_bert_model(spec, dir.file("n.gguf"));
  const auto file = gguf::GgufFile::open(dir.file("n.gguf"));
  CHECK_THROWS_AS(BertModel(file, 1, std::make_unique<CpuBackend>(1)), EncoderError);
}
