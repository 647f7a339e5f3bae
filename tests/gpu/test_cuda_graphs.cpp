// CUDA graphs of decode steps (CudaBackendOptions::cuda_graphs): a Model whose backend records
// and replays decode-only steps against one that runs every step eagerly, fed the same steps.
// The batches change content (which sequences, their tokens, positions, block tables, seeds
// and counters) while keeping their shapes, block tables grow past a block, one sequence
// crosses the decode attention's split boundary (512 keys: a new shape), and one shape draws
// a row twice. Every step's sampled ids must be bit-identical, graphs must actually replay,
// and at the end the logits of all sequences (computed eagerly over KV caches that replayed
// steps wrote) must be bit-identical too. A tiny mixture-of-experts model does the same.
// Skips (CTest: Skipped) without a CUDA device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>

#include "engine/backend/cuda/backend_cuda.h"
#include "engine/model/model.h"
#include "engine/model/model_writer.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

constexpr int kBlock = 16;

using Seq = FedSeq;

// Adds tokens [n_cached, end) of `s` to the plan with one logit row at the end.
void add(StepPlan& p, const Seq& s, int end) { add_fed(p, s, end, kBlock); }

// Prefills all of each sequence's tokens but the last on both models, in chunks of up to 64
// (the logits must agree); the decode steps then feed the last one.
void prefill_both(Model& eager, Model& recorded, std::vector<Seq>& seqs) {
  for (auto& s : seqs) {
    const int end = static_cast<int>(s.tokens.size()) - 1;
    while (s.n_cached < end) {
      const int stop = std::min(end, s.n_cached + 64);
      StepPlan p;
      add(p, s, stop);
      std::vector<float> le, lr;
      eager.forward(p, le);
      recorded.forward(p, lr);
      REQUIRE(le == lr);
      s.n_cached = stop;
    }
  }
}

// Every sequence's next logits, eagerly on both models: equal when the KV the replayed steps
// wrote equals the eager steps'.
void same_next_logits(Model& eager, Model& recorded, const std::vector<Seq>& seqs) {
  StepPlan p;
  for (const auto& s : seqs) add(p, s, s.n_cached + 1);
  std::vector<float> le, lr;
  eager.forward(p, le);
  recorded.forward(p, lr);
  REQUIRE(le.size() == lr.size());
  CHECK(std::memcmp(le.data(), lr.data(), le.size() * sizeof(float)) == 0);
}

SampleRequest draw_for(int seq, int row, uint64_t counter) {
  SampleRequest d;
  d.row = row;
  d.counter = counter;
  d.seed = 100 + static_cast<uint64_t>(seq);
  switch (seq) {
    case 0: break;  // greedy
    case 1: d.temperature = 1.0f; break;
    case 2: d.temperature = 0.8f; d.top_k = 8; d.top_p = 0.9f; break;
    default: d.temperature = 1.2f; d.min_p = 0.05f; break;
  }
  return d;
}

}  // namespace

TEST_CASE("cuda graphs: replayed decode steps give the eager steps' ids and KV, bit for bit", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  CudaBackendOptions on;
  on.cuda_graphs = true;
  auto graph_backend = std::make_unique<CudaBackend>(on);
  CudaBackend* graphs = graph_backend.get();
  CudaBackendOptions off;
  off.cuda_graphs = false;  // every step launched op by op (graphs are on by default)
  Model eager(tiny_bf16_model(), make_cuda_backend(off), 64);
  Model recorded(tiny_bf16_model(), std::move(graph_backend), 64);
  const int vocab = eager.config().vocab_size;
  const int n_blocks = 144;  // 36 per sequence, interleaved
  for (Model* m : {&eager, &recorded}) m->init_kv_cache(n_blocks, kBlock);

  // Prompts of 13, 14, 15 and 508 tokens: the short ones cross into their second block while
  // decoding, the long one crosses 512 keys (a second attention split).
  std::vector<Seq> seqs(4);
  const int prompt_len[] = {13, 14, 15, 508};
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < 36; ++b) seqs[static_cast<size_t>(s)].table.push_back(b * 4 + (3 - s));
    for (int i = 0; i < prompt_len[s]; ++i)
      seqs[static_cast<size_t>(s)].tokens.push_back((i * 31 + s * 7 + 5) % vocab);
  }
  // Prefill eagerly on both (64-token chunks), all but each prompt's last token.
  prefill_both(eager, recorded, seqs);

  const std::vector<std::vector<int>> batches = {
      {0, 1, 2}, {0, 1, 2}, {1, 2, 3}, {0, 1, 2}, {1, 2, 3}, {0, 3}, {0, 3}, {0, 1, 2}, {1, 2, 3},
      {0, 3},    {1, 2, 3}, {0, 1, 2}, {0, 3},    {2, 3},    {0, 1, 2}, {1, 2, 3}, {1, 2, 3}};
  for (size_t step = 0; step < batches.size(); ++step) {
    const auto& batch = batches[step];
    StepPlan p;
    std::vector<SampleRequest> draws;
    for (size_t r = 0; r < batch.size(); ++r) {
      const Seq& s = seqs[static_cast<size_t>(batch[r])];
      add(p, s, s.n_cached + 1);
      draws.push_back(draw_for(batch[r], static_cast<int>(r), s.tokens.size()));
    }
    if (batch.size() == 2) {  // a shape with a row drawn twice (as n choices of one prompt)
      SampleRequest extra = draws[1];
      extra.seed += 1000;
      draws.push_back(extra);
    }
    StepLogits out_e, out_r;
    eager.forward(p, draws, out_e);
    recorded.forward(p, draws, out_r);
    INFO("step " << step);
    REQUIRE(out_r.drawn() == out_e.drawn());
    CHECK(out_e.host_rows() == 0);
    for (size_t r = 0; r < batch.size(); ++r) {
      Seq& s = seqs[static_cast<size_t>(batch[r])];
      ++s.n_cached;
      s.tokens.push_back(out_e.drawn()[r]);
    }
  }
  REQUIRE(seqs[3].n_cached > 512);

  const CudaGraphStats st = graphs->graph_stats();
  INFO("captures " << st.captures << ", replays " << st.replays << ", graphs " << st.graphs);
  CHECK(st.captures >= 3);  // 3 rows, 2 rows + 1 extra draw, 3 rows with two splits
  CHECK(st.replays >= 5);

  same_next_logits(eager, recorded, seqs);

  recorded.init_kv_cache(n_blocks, kBlock);
  CHECK(graphs->graph_stats().graphs == 0);  // they addressed the old cache
}

// The index buffer grows by one int per sequence every kBlock decode steps (block tables). The
// backend's device scratch must grow geometrically: an exact-size reallocation at every block
// crossing would sync the device, free, move the buffer and so force a re-capture of the shape
// each time (a scratch buffer that forgot to double did exactly that). Three sequences decode
// from 3 to 51 tokens in one shape, crossing three block boundaries: one capture, plus at most
// one re-capture while the buffer doubles past the prefill steps' size.
TEST_CASE("cuda graphs: block tables growing during decode do not force re-captures", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  CudaBackendOptions on;
  on.cuda_graphs = true;
  auto graph_backend = std::make_unique<CudaBackend>(on);
  CudaBackend* graphs = graph_backend.get();
  Model recorded(tiny_bf16_model(), std::move(graph_backend), 16);
  const int vocab = recorded.config().vocab_size;
  recorded.init_kv_cache(12, kBlock);
  std::vector<Seq> seqs(3);
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b < 4; ++b) seqs[static_cast<size_t>(s)].table.push_back(b * 3 + s);
    for (int i = 0; i < 3; ++i) seqs[static_cast<size_t>(s)].tokens.push_back((i * 17 + s * 5 + 1) % vocab);
    StepPlan p;
    add(p, seqs[static_cast<size_t>(s)], 2);  // a small prefill step: a small index buffer
    std::vector<float> logits;
    recorded.forward(p, logits);
    seqs[static_cast<size_t>(s)].n_cached = 2;
  }
  const int steps = 48;
  for (int step = 0; step < steps; ++step) {
    StepPlan p;
    std::vector<SampleRequest> draws;
    for (int s = 0; s < 3; ++s) {
      add(p, seqs[static_cast<size_t>(s)], seqs[static_cast<size_t>(s)].n_cached + 1);
      draws.push_back(draw_for(0, s, static_cast<uint64_t>(step)));  // greedy
    }
    StepLogits out;
    recorded.forward(p, draws, out);
    for (int s = 0; s < 3; ++s) {
      Seq& q = seqs[static_cast<size_t>(s)];
      ++q.n_cached;
      q.tokens.push_back(out.drawn()[static_cast<size_t>(s)]);
    }
  }
  REQUIRE(seqs[0].n_cached == 2 + steps);  // crossed 16, 32 and 48
  const CudaGraphStats st = graphs->graph_stats();
  INFO("captures " << st.captures << ", replays " << st.replays);
  CHECK(st.captures <= 2);
  CHECK(st.replays >= steps - 3);
}

// Mixture-of-experts decode steps are recorded too, where the backend routes on the device
// (quantized weights, up to kMoeRouteMaxTokens rows): a tiny qwen2moe (4 experts, top-2, a
// shared expert) in q8_0, graphs on against graphs off, over batches that change content and
// shape. Sampled ids equal step by step, graphs replay, and the final logits (eager on both)
// are bit-identical.
TEST_CASE("cuda graphs: mixture-of-experts decode steps replay as the eager steps run", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  static const gguf::GgufFile file =
      gguf::GgufFile::from_bytes(build_model(tiny_arch_spec(Arch::Qwen2Moe, GgmlType::Q8_0)).to_bytes(), "tiny-moe.gguf");
  CudaBackendOptions on, off;
  off.cuda_graphs = false;
  auto graph_backend = std::make_unique<CudaBackend>(on);
  CudaBackend* graphs = graph_backend.get();
  Model eager(file, make_cuda_backend(off), 32);
  Model recorded(file, std::move(graph_backend), 32);
  const int vocab = eager.config().vocab_size;
  for (Model* m : {&eager, &recorded}) m->init_kv_cache(24, kBlock);
  std::vector<Seq> seqs(3);
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b < 8; ++b) seqs[static_cast<size_t>(s)].table.push_back(b * 3 + s);
    for (int i = 0; i < 9 + s; ++i) seqs[static_cast<size_t>(s)].tokens.push_back((i * 13 + s * 5 + 3) % vocab);
  }
  prefill_both(eager, recorded, seqs);
  const std::vector<std::vector<int>> batches = {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {1, 2}, {0, 2}, {1, 2},
                                                 {0, 1, 2}, {0, 1},    {0, 1, 2}, {1, 2}, {0, 1, 2}};
  for (size_t step = 0; step < batches.size(); ++step) {
    StepPlan p;
    std::vector<SampleRequest> draws;
    for (size_t r = 0; r < batches[step].size(); ++r) {
      const Seq& s = seqs[static_cast<size_t>(batches[step][r])];
      add(p, s, s.n_cached + 1);
      draws.push_back(draw_for(batches[step][r], static_cast<int>(r), s.tokens.size()));
    }
    StepLogits out_e, out_r;
    eager.forward(p, draws, out_e);
    recorded.forward(p, draws, out_r);
    INFO("step " << step);
    REQUIRE(out_r.drawn() == out_e.drawn());
    for (size_t r = 0; r < batches[step].size(); ++r) {
      Seq& s = seqs[static_cast<size_t>(batches[step][r])];
      ++s.n_cached;
      s.tokens.push_back(out_e.drawn()[r]);
    }
  }
  const CudaGraphStats st = graphs->graph_stats();
  INFO("captures " << st.captures << ", replays " << st.replays);
  CHECK(st.captures >= 2);  // 3 rows, 2 rows
  CHECK(st.replays >= 5);
  same_next_logits(eager, recorded, seqs);
}

// Row buckets: with graphs on, a decode step of n rows runs padded to the next power of two
// (CudaBackend::recorded_rows; Model adds inert rows in a reserved KV block and drops their
// draws), so batches of 3 and 4 share one graph and 5-8 another. Eight sequences decode in
// batches of 1-8 rows, greedy-only and mixed draws; every step's ids equal the unpadded eager
// model's, the captures stay at the buckets' count (plus the greedy-only variants), and the
// final logits over the KV the padded steps wrote are bit-identical.
TEST_CASE("cuda graphs: batches padded to row buckets replay as the eager steps run", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  CudaBackendOptions on, off;
  off.cuda_graphs = false;
  auto graph_backend = std::make_unique<CudaBackend>(on);
  CudaBackend* graphs = graph_backend.get();
  CHECK(graphs->recorded_rows(3) == 4);
  CHECK(graphs->recorded_rows(5) == 8);
  CHECK(graphs->recorded_rows(8) == 8);
  CHECK(graphs->recorded_rows(65) == 65);
  Model eager(tiny_bf16_model(), make_cuda_backend(off), 16);
  Model recorded(tiny_bf16_model(), std::move(graph_backend), 16);
  const int vocab = eager.config().vocab_size;
  for (Model* m : {&eager, &recorded}) m->init_kv_cache(32, kBlock);
  std::vector<Seq> seqs(8);
  for (int s = 0; s < 8; ++s) {
    Seq& q = seqs[static_cast<size_t>(s)];
    for (int b = 0; b < 4; ++b) q.table.push_back(b * 8 + s);
    for (int i = 0; i < 4 + s; ++i) q.tokens.push_back((i * 11 + s * 3 + 2) % vocab);
  }
  prefill_both(eager, recorded, seqs);
  // {batch, greedy only}
  const std::vector<std::pair<std::vector<int>, bool>> batches = {
      {{0, 1, 2}, false},          {{3, 4, 5, 6}, false},       {{0, 2, 4}, false},    {{1, 2, 3, 4, 5}, false},
      {{0, 1, 2, 3, 4, 5, 6, 7}, false}, {{2, 3, 4, 5, 6, 7}, false}, {{0, 1, 2, 3, 4, 5, 6}, true},
      {{5, 6, 7}, true},           {{1, 3, 5, 7}, true},        {{0, 1, 2, 3, 4}, true}, {{6}, false},
      {{7}, true},                 {{0, 4}, false},             {{1, 5}, false},       {{2, 3, 4, 5, 6, 7, 0}, true},
      {{1, 2, 3}, true}};
  for (size_t step = 0; step < batches.size(); ++step) {
    const auto& [batch, greedy] = batches[step];
    StepPlan p;
    std::vector<SampleRequest> draws;
    for (size_t r = 0; r < batch.size(); ++r) {
      const Seq& s = seqs[static_cast<size_t>(batch[r])];
      add(p, s, s.n_cached + 1);
      draws.push_back(draw_for(greedy ? 0 : batch[r], static_cast<int>(r), s.tokens.size()));
    }
    StepLogits out_e, out_r;
    eager.forward(p, draws, out_e);
    recorded.forward(p, draws, out_r);
    INFO("step " << step);
    REQUIRE(out_r.drawn().size() == draws.size());
    REQUIRE(out_r.drawn() == out_e.drawn());
    for (size_t r = 0; r < batch.size(); ++r) {
      Seq& s = seqs[static_cast<size_t>(batch[r])];
      ++s.n_cached;
      s.tokens.push_back(out_e.drawn()[r]);
    }
  }
  const CudaGraphStats st = graphs->graph_stats();
  INFO("captures " << st.captures << ", replays " << st.replays << ", graphs " << st.graphs);
  // Keys (bucket, greedy only) in step order, each run eagerly at its first sight, captured at
  // its second, replayed after: (4, no) x3, (8, no) x3, (8, yes) x3, (4, yes) x3, (1, no),
  // (1, yes), (2, no) x2: five captures, four replays.
  CHECK(st.captures == 5);
  CHECK(st.graphs == 5);
  CHECK(st.replays == 4);
  same_next_logits(eager, recorded, seqs);
}
