// Encoder forward throughput on the CPU (a benchmark, not a test): BertModel::embed_batch over
// batches of random inputs of a given length, one batch per call, median of the rounds; also
// the same inputs one call each (--single), to see what batching buys. For perf record too.
//   build/tests/bench_encoder MODEL.gguf [--threads N] [--tokens 100] [--batch 1,16,64] [--rounds 5] [--single]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/encoder/bert_model.h"
#include "engine/gguf/gguf.h"

using namespace pagoda;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_encoder MODEL.gguf [--threads N] [--tokens T] [--batch 1,16,64] [--rounds R] [--single]\n");
    return 2;
  }
  int threads = 2, tokens = 100, rounds = 5;
  bool single = false;
  std::vector<int> batches{1, 16, 64};
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--tokens") tokens = std::atoi(next().c_str());
    else if (a == "--rounds") rounds = std::atoi(next().c_str());
    else if (a == "--single") single = true;
    else if (a == "--batch") {
      batches.clear();
      const std::string list = next();
      for (size_t p = 0; p < list.size();) {
        const size_t c = list.find(',', p);
        batches.push_back(std::atoi(list.substr(p, c - p).c_str()));
        p = c == std::string::npos ? list.size() : c + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const auto file = gguf::GgufFile::open(argv[1]);
  const encoder::BertModel model(file, threads);
  const auto& c = model.config();
  std::printf("%s: %d layers, dim %d, ff %d; %d tokens per input, %d threads\n", argv[1], c.n_layers, c.dim, c.ff_dim,
              tokens, threads);
  std::mt19937 rng(7);
  for (int batch : batches) {
    std::vector<encoder::EncoderInput> inputs(static_cast<size_t>(batch));
    for (auto& in : inputs) {
      in.tokens.resize(static_cast<size_t>(tokens));
      for (auto& t : in.tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
      if (c.pooling == encoder::Pooling::Rank) in.segment_b = tokens / 10;
    }
    for (int mode = 0; mode < (single ? 2 : 1); ++mode) {
      std::vector<double> took;
      for (int r = 0; r < rounds + 1; ++r) {  // the first round warms up
        const auto t0 = std::chrono::steady_clock::now();
        if (mode == 0) model.embed_batch(inputs);
        else
          for (const auto& in : inputs) model.embed(in.tokens, in.segment_b);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) took.push_back(s);
      }
      std::sort(took.begin(), took.end());
      const double med = took[took.size() / 2];
      std::printf("batch %3d %-8s median %8.1f ms  %7.2f inputs/s  %8.0f tokens/s\n", batch,
                  mode == 0 ? "batched" : "single", med * 1e3, batch / med, batch * tokens / med);
    }
  }
  return 0;
}
