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
#include <span>

#include "engine/backend/cuda/backend_cuda.h"
#include "engine/loop/engine.h"
#include "engine/loop/request_stream.h"
#include "engine/model/model.h"
#include "engine/model/model_writer.h"
#include "engine/speculative/speculative.h"
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
// wrote equals the eager steps'. `copies`: slot copies still owed to the cache (a verified
// tree's accepted side branch), applied first.
void same_next_logits(Model& eager, Model& recorded, const std::vector<Seq>& seqs,
                      const std::vector<SlotCopy>& copies = {}) {
  StepPlan p;
  p.slot_copies = copies;
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

// A tiny qwen2moe (4 experts, top-2, a shared expert) in q8_0, whose steps of up to
// kMoeRouteMaxTokens rows route on the device; built once.
const gguf::GgufFile& tiny_moe_file() {
  static const gguf::GgufFile file =
      gguf::GgufFile::from_bytes(build_model(tiny_arch_spec(Arch::Qwen2Moe, GgmlType::Q8_0)).to_bytes(), "tiny-moe.gguf");
  return file;
}

int slot_of(const Seq& s, int logical) {
  return s.table[static_cast<size_t>(logical / kBlock)] * kBlock + logical % kBlock;
}

// Adds `tree` for `s` as the scheduler emits a verify step: its root is the sequence's next
// token (not yet cached), node j is written at logical index n_cached + j and roped at
// n_cached + its depth, every node a logit row. `slot_base` >= 0 writes node j at slot
// slot_base + j instead (a probe whose K/V must not land in the sequence's blocks).
void add_tree(StepPlan& p, const Seq& s, const DraftTree& tree, int slot_base = -1) {
  SeqInStep e;
  e.seq_id = p.seqs.size();
  e.first_token = p.n_tokens();
  e.n_tokens = tree.size();
  e.n_past = s.n_cached;
  e.block_table_offset = static_cast<int32_t>(p.block_tables.size());
  e.n_blocks = (s.n_cached + tree.size() + kBlock - 1) / kBlock;
  p.block_tables.insert(p.block_tables.end(), s.table.begin(), s.table.begin() + e.n_blocks);
  p.tree_masks.resize(p.tokens.size(), 0);
  const std::vector<uint64_t> masks = tree.masks();
  for (int j = 0; j < tree.size(); ++j) {
    p.tokens.push_back(tree.tokens[static_cast<size_t>(j)]);
    p.positions.push_back(s.n_cached + tree.depth(j));
    p.slots.push_back(slot_base >= 0 ? slot_base + j : slot_of(s, s.n_cached + j));
    p.token_seq.push_back(static_cast<int32_t>(p.seqs.size()));
    p.tree_masks.push_back(masks[static_cast<size_t>(j)]);
    p.logit_rows.push_back(e.first_token + j);
  }
  p.seqs.push_back(e);
}

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// One sequence of a verify step: a token tree of these parents (node 0, the root, has -1), or,
// with none, a plain decode row drawn `draws` times on the device (0: its logits come back).
struct VerifySeq {
  int seq = 0;
  std::vector<int> parents;
  int draws = 1;
};

struct VerifyTally {
  int accepted = 0;      // drafted nodes accepted
  int side_branch = 0;   // accepted nodes off the main chain (moved by slot copies)
};

// Speculative verify steps on both models, step by step: each tree's nodes get drafted tokens
// (the eager model's own greedy token after the root on the root's last child, so that drafts
// are accepted, on a side branch when the root has several children; other nodes a made-up
// token), the tree rows' logits come back to the host and decode rows are drawn on the device.
// Drawn ids and every tree row's logits must be bit-identical, as must the tokens the greedy
// acceptance walk emits; the accepted path then joins each sequence (side-branch nodes moved
// by slot copies in the next step, as the scheduler does). Returns the slot copies still owed.
std::vector<SlotCopy> verify_steps(Model& eager, Model& recorded, std::vector<Seq>& seqs,
                                   const std::vector<std::vector<VerifySeq>>& steps, int probe_block,
                                   VerifyTally& tally) {
  const int vocab = eager.config().vocab_size;
  std::vector<SlotCopy> owed;
  for (size_t step = 0; step < steps.size(); ++step) {
    INFO("verify step " << step);
    const auto& batch = steps[step];
    // The oracle: each tree root's next token, from a one-node tree on the eager model whose
    // K/V goes to a scratch block (the verify step below writes the real ones).
    StepPlan probe;
    probe.slot_copies = owed;
    std::vector<int> probe_row(batch.size(), -1);
    for (size_t k = 0; k < batch.size(); ++k) {
      if (batch[k].parents.empty()) continue;
      const Seq& s = seqs[static_cast<size_t>(batch[k].seq)];
      probe_row[k] = static_cast<int>(probe.logit_rows.size());
      add_tree(probe, s, DraftTree(s.tokens[static_cast<size_t>(s.n_cached)]),
               probe_block * kBlock + static_cast<int>(k));
    }
    std::vector<float> probe_logits;
    eager.forward(probe, probe_logits);

    StepPlan p;
    p.slot_copies = owed;  // applied again: their sources are untouched since
    owed.clear();
    std::vector<SampleRequest> draws;
    std::vector<DraftTree> trees(batch.size());
    std::vector<int> first_row(batch.size(), -1);
    for (size_t k = 0; k < batch.size(); ++k) {
      const Seq& s = seqs[static_cast<size_t>(batch[k].seq)];
      const auto& parents = batch[k].parents;
      first_row[k] = static_cast<int>(p.logit_rows.size());
      if (parents.empty()) {
        add(p, s, s.n_cached + 1);
        for (int d = 0; d < batch[k].draws; ++d) {
          draws.push_back(draw_for(batch[k].seq == 0 ? 1 : batch[k].seq, first_row[k], s.tokens.size()));
          draws.back().seed += 1000 * static_cast<uint64_t>(d);
        }
        continue;
      }
      const int32_t oracle = argmax(std::span<const float>(probe_logits).subspan(
          static_cast<size_t>(probe_row[k]) * static_cast<size_t>(vocab), static_cast<size_t>(vocab)));
      const int last_root_child =
          static_cast<int>(std::find(parents.rbegin(), parents.rend(), 0).base() - parents.begin()) - 1;
      DraftTree& t = trees[k];
      t = DraftTree(s.tokens[static_cast<size_t>(s.n_cached)]);
      for (size_t j = 1; j < parents.size(); ++j) {
        int32_t tok = static_cast<int32_t>((step * 37 + j * 11 + static_cast<size_t>(batch[k].seq) * 5 + 1) % vocab);
        if (static_cast<int>(j) == last_root_child) tok = oracle;
        else
          while (tok == oracle || t.child(parents[j], tok) >= 0) tok = (tok + 1) % vocab;
        t.add(parents[j], tok);
      }
      REQUIRE(t.valid());
      add_tree(p, s, t);
    }
    p.tree_masks.resize(p.tokens.size(), 0);
    StepLogits out_e, out_r;
    eager.forward(p, draws, out_e);
    recorded.forward(p, draws, out_r);
    REQUIRE(out_r.drawn() == out_e.drawn());
    REQUIRE(out_r.host_rows() == out_e.host_rows());
    for (size_t k = 0; k < batch.size(); ++k) {
      Seq& s = seqs[static_cast<size_t>(batch[k].seq)];
      if (batch[k].parents.empty()) {
        ++s.n_cached;
        if (batch[k].draws > 0) {
          s.tokens.push_back(out_e.drawn()[static_cast<size_t>(std::find_if(draws.begin(), draws.end(),
              [&](const SampleRequest& d) { return d.row == first_row[k]; }) - draws.begin())]);
        } else {
          const auto e = out_e.host_row(first_row[k]), r = out_r.host_row(first_row[k]);
          REQUIRE(std::memcmp(e.data(), r.data(), e.size() * sizeof(float)) == 0);
          s.tokens.push_back(argmax(e));
        }
        continue;
      }
      const DraftTree& t = trees[k];
      for (int j = 0; j < t.size(); ++j) {
        const auto e = out_e.host_row(first_row[k] + j), r = out_r.host_row(first_row[k] + j);
        REQUIRE(std::memcmp(e.data(), r.data(), e.size() * sizeof(float)) == 0);
      }
      struct Drawn {
        int32_t token;
      };
      const auto walk = [&](const StepLogits& out) {
        std::vector<int32_t> ids;
        for (const Drawn& d : walk_tree(t, [&](int node) { return Drawn{argmax(out.host_row(first_row[k] + node))}; }))
          ids.push_back(d.token);
        return ids;
      };
      const std::vector<int32_t> emitted = walk(out_e);
      REQUIRE(walk(out_r) == emitted);
      const std::vector<int> path = accepted_nodes(t, emitted);
      const int n_past = s.n_cached;
      for (size_t d = 1; d < path.size(); ++d) {
        s.tokens.push_back(t.tokens[static_cast<size_t>(path[d])]);
        ++tally.accepted;
        if (path[d] != static_cast<int>(d)) {
          ++tally.side_branch;
          owed.push_back(SlotCopy{slot_of(s, n_past + path[d]), slot_of(s, n_past + static_cast<int>(d))});
        }
      }
      s.tokens.push_back(emitted.back());
      s.n_cached = n_past + static_cast<int>(path.size());
    }
  }
  return owed;
}

// The same model twice: `eager` launches every op of every step (graphs off), `recorded`
// records steps and replays them (graphs on; `graphs` is its backend, for the counters). The
// rest of `opts` applies to both.
struct GraphPair {
  GraphPair(const gguf::GgufFile& file, int max_tokens, CudaBackendOptions opts = {})
      : owned_(std::make_unique<CudaBackend>(with_graphs(opts, true))),
        graphs(owned_.get()),
        eager(file, make_cuda_backend(with_graphs(opts, false)), max_tokens),
        recorded(file, std::move(owned_), max_tokens) {}

 private:
  static CudaBackendOptions with_graphs(CudaBackendOptions o, bool on) {
    o.cuda_graphs = on;
    return o;
  }
  std::unique_ptr<CudaBackend> owned_;  // recorded's backend until recorded takes it

 public:
  CudaBackend* graphs;
  Model eager, recorded;
};

}  // namespace

TEST_CASE("cuda graphs: replayed decode steps give the eager steps' ids and KV, bit for bit", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  GraphPair models(tiny_bf16_model(), 64);
  Model &eager = models.eager, &recorded = models.recorded;
  CudaBackend* graphs = models.graphs;
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
  const gguf::GgufFile& file = tiny_moe_file();
  GraphPair models(file, 32);
  Model &eager = models.eager, &recorded = models.recorded;
  CudaBackend* graphs = models.graphs;
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
  GraphPair models(tiny_bf16_model(), 16);
  Model &eager = models.eager, &recorded = models.recorded;
  CudaBackend* graphs = models.graphs;
  CHECK(graphs->recorded_rows(3) == 4);
  CHECK(graphs->recorded_rows(5) == 8);
  CHECK(graphs->recorded_rows(8) == 8);
  CHECK(graphs->recorded_rows(65) == 65);
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

// With batch_invariant a prompt's one-token chunk takes a prefill tile (SeqInStep::prefill), so
// a step of one-token rows holding one has a decode step's shape (the model pads it to the row
// bucket) but is no decode step: it must run unrecorded, and the decode steps around it replay.
// Three rows a step (padded to 4): decodes three times (eager, capture, replay), two decodes
// beside a prompt's last token, then decodes again (a replay); ids as the eager model's.
TEST_CASE("cuda graphs: with batch_invariant a step holding a prompt's one-token chunk runs unrecorded",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  CudaBackendOptions invariant;
  invariant.batch_invariant = true;
  GraphPair models(tiny_bf16_model(), 16, invariant);
  Model &eager = models.eager, &recorded = models.recorded;
  CudaBackend* graphs = models.graphs;
  const int vocab = eager.config().vocab_size;
  for (Model* m : {&eager, &recorded}) m->init_kv_cache(16, kBlock);
  std::vector<Seq> seqs(4);  // 0-2 decode; 3 is the prompt
  for (int s = 0; s < 4; ++s) {
    Seq& q = seqs[static_cast<size_t>(s)];
    for (int b = 0; b < 4; ++b) q.table.push_back(b * 4 + s);
    for (int i = 0; i < 5 + 3 * s; ++i) q.tokens.push_back((i * 13 + s * 5 + 1) % vocab);
  }
  prefill_both(eager, recorded, seqs);  // all but each sequence's last token
  const std::vector<std::vector<int>> batches = {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {0, 1, 3}, {0, 1, 2}};
  for (size_t step = 0; step < batches.size(); ++step) {
    StepPlan p;
    std::vector<SampleRequest> draws;
    for (size_t r = 0; r < batches[step].size(); ++r) {
      const int s = batches[step][r];
      const Seq& q = seqs[static_cast<size_t>(s)];
      add_fed(p, q, q.n_cached + 1, kBlock, true, s == 3);
      draws.push_back(draw_for(0, static_cast<int>(r), q.tokens.size()));
    }
    const CudaGraphStats before = graphs->graph_stats();
    StepLogits out_e, out_r;
    eager.forward(p, draws, out_e);
    recorded.forward(p, draws, out_r);
    INFO("step " << step);
    REQUIRE(out_r.drawn() == out_e.drawn());
    const CudaGraphStats after = graphs->graph_stats();
    if (step == 3) {
      CHECK(after.captures == before.captures);
      CHECK(after.replays == before.replays);
    }
    for (size_t r = 0; r < batches[step].size(); ++r) {
      Seq& q = seqs[static_cast<size_t>(batches[step][r])];
      ++q.n_cached;
      q.tokens.push_back(out_e.drawn()[r]);
    }
  }
  const CudaGraphStats st = graphs->graph_stats();
  INFO("captures " << st.captures << ", replays " << st.replays);
  CHECK(st.captures == 1);
  CHECK(st.replays == 2);
  same_next_logits(eager, recorded, seqs);
}

// Speculative verify steps are recorded too: their token trees' index arrays sit in the index
// buffer at offsets the key fixes (the trees' sizes, not their branching), the tree rows'
// logits come back after the recorded ops. Three sequences verify trees beside a decode row
// drawn on the device, over steps whose trees change tokens and branching but keep their
// sizes (replays), and steps of other sizes: two trees of 4 beside a decode row (as many rows
// as 5 + 3, another key), two trees without a device draw, and two shapes that differ only in
// how many rows the draws read. Accepted drafts, on the main
// chain and on side branches (slot copies in the next step), grow the sequences. Every step's
// ids, tree logits and acceptance are bit-identical to the eager model's, the captures and
// replays are exactly the keys' counts, and the final logits over the KV the replays wrote
// are bit-identical.
TEST_CASE("cuda graphs: speculative verify steps replay as the eager steps run", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  GraphPair models(tiny_bf16_model(), 64);
  Model &eager = models.eager, &recorded = models.recorded;
  CudaBackend* graphs = models.graphs;
  const int vocab = eager.config().vocab_size;
  const int probe_block = 24;  // the oracle's scratch block, in no sequence's table
  for (Model* m : {&eager, &recorded}) m->init_kv_cache(probe_block + 1, kBlock);
  std::vector<Seq> seqs(3);
  for (int s = 0; s < 3; ++s) {
    Seq& q = seqs[static_cast<size_t>(s)];
    for (int b = 0; b < 8; ++b) q.table.push_back(b * 3 + s);
    for (int i = 0; i < 20 + 5 * s; ++i) q.tokens.push_back((i * 19 + s * 7 + 4) % vocab);
  }
  prefill_both(eager, recorded, seqs);
  // Key A (9 rows: trees of 5 and 3, one drawn row), in four branchings and two seat orders.
  const std::vector<VerifySeq> a1 = {{0, {-1, 0, 1, 2, 0}}, {1, {-1, 0, 0}}, {2, {}}};
  const std::vector<VerifySeq> a2 = {{0, {-1, 0, 1, 0, 3}}, {1, {-1, 0, 1}}, {2, {}}};
  const std::vector<VerifySeq> a3 = {{1, {-1, 0, 0, 2, 1}}, {2, {-1, 0, 1}}, {0, {}}};
  // Key B (9 rows: two trees of 4, one drawn row) and key C (trees of 6 and 2, nothing drawn).
  const std::vector<VerifySeq> b1 = {{0, {-1, 0, 1, 2}}, {1, {-1, 0, 0, 1}}, {2, {}}};
  const std::vector<VerifySeq> b2 = {{2, {-1, 0, 0, 0}}, {0, {-1, 0, 1, 0}}, {1, {}}};
  const std::vector<VerifySeq> c1 = {{2, {-1, 0, 1, 2, 0, 0}}, {0, {-1, 0}}};
  const std::vector<VerifySeq> c2 = {{1, {-1, 0, 0, 1, 3, 4}}, {2, {-1, 0}}};
  // Keys D and E differ in the drawn rows alone (7 rows, two draws): a tree of 5 beside a row
  // drawn twice and a row read back, or beside two rows drawn once each.
  const std::vector<VerifySeq> d1 = {{0, {-1, 0, 1, 0, 1}}, {1, {}, 2}, {2, {}, 0}};
  const std::vector<VerifySeq> e1 = {{1, {-1, 0, 0, 2, 3}}, {2, {}}, {0, {}}};
  VerifyTally tally;
  const std::vector<SlotCopy> owed = verify_steps(
      eager, recorded, seqs, {a1, a2, b1, a3, a1, b2, b1, c1, c2, a2, c1, d1, e1, d1, e1, d1}, probe_block, tally);
  INFO("accepted " << tally.accepted << ", on side branches " << tally.side_branch);
  CHECK(tally.accepted > 0);
  CHECK(tally.side_branch > 0);
  const CudaGraphStats st = graphs->graph_stats();
  INFO("captures " << st.captures << ", replays " << st.replays << ", graphs " << st.graphs);
  // Each key runs eagerly at its first sight, is captured at its second, replayed after:
  // A at steps 0, 1, 3, 4, 9; B at 2, 5, 6; C at 7, 8, 10; D at 11, 13, 15; E at 12, 14.
  CHECK(st.captures == 5);
  CHECK(st.graphs == 5);
  CHECK(st.replays == 6);
  same_next_logits(eager, recorded, seqs, owed);
}

// The same for a mixture-of-experts model (quantized experts route on the device up to
// kMoeRouteMaxTokens rows): verify steps of 8 rows, with and without a drawn decode row.
TEST_CASE("cuda graphs: mixture-of-experts verify steps replay as the eager steps run", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const gguf::GgufFile& file = tiny_moe_file();
  GraphPair models(file, 32);
  Model &eager = models.eager, &recorded = models.recorded;
  CudaBackend* graphs = models.graphs;
  const int vocab = eager.config().vocab_size;
  const int probe_block = 24;
  for (Model* m : {&eager, &recorded}) m->init_kv_cache(probe_block + 1, kBlock);
  std::vector<Seq> seqs(3);
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b < 8; ++b) seqs[static_cast<size_t>(s)].table.push_back(b * 3 + s);
    for (int i = 0; i < 9 + s; ++i) seqs[static_cast<size_t>(s)].tokens.push_back((i * 13 + s * 5 + 3) % vocab);
  }
  prefill_both(eager, recorded, seqs);
  // Key A: trees of 4 and 3 and a drawn row; key B: trees of 3 and 5, nothing drawn.
  const std::vector<VerifySeq> a1 = {{0, {-1, 0, 1, 0}}, {1, {-1, 0, 1}}, {2, {}}};
  const std::vector<VerifySeq> a2 = {{2, {-1, 0, 0, 2}}, {0, {-1, 0, 0}}, {1, {}}};
  const std::vector<VerifySeq> b1 = {{1, {-1, 0, 0}}, {2, {-1, 0, 1, 2, 1}}};
  const std::vector<VerifySeq> b2 = {{0, {-1, 0, 1}}, {1, {-1, 0, 0, 1, 0}}};
  VerifyTally tally;
  const std::vector<SlotCopy> owed =
      verify_steps(eager, recorded, seqs, {a1, a2, b1, a1, b2, b1, a2}, probe_block, tally);
  INFO("accepted " << tally.accepted << ", on side branches " << tally.side_branch);
  CHECK(tally.accepted > 0);
  CHECK(tally.side_branch > 0);
  const CudaGraphStats st = graphs->graph_stats();
  INFO("captures " << st.captures << ", replays " << st.replays << ", graphs " << st.graphs);
  // A at steps 0, 1, 3, 6; B at 2, 4, 5.
  CHECK(st.captures == 2);
  CHECK(st.replays == 3);
  same_next_logits(eager, recorded, seqs, owed);
}

// The engine's own verify steps (n-gram drafts, trees of two branches, every node drawn on the
// GPU, the acceptance walk following the drawn ids): two greedy requests whose
// prompts repeat themselves, on an engine with graphs on and one with graphs off. Steps of one
// or two plain rows are never padded and verify steps never are, so both engines run the same
// ops: the tokens must be equal, drafts must have been accepted, and graphs replayed.
TEST_CASE("cuda graphs: an engine speculating gives the same tokens with graphs on and off", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  std::vector<GenerationRequest> reqs(2);
  for (int i = 0; i < 2; ++i) {
    std::vector<int32_t> phrase;
    for (int k = 0; k < 10 + 3 * i; ++k) phrase.push_back((k * 29 + i * 13 + 7) % 200);
    GenerationRequest& r = reqs[static_cast<size_t>(i)];
    for (int rep = 0; rep < 3; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.stop.max_tokens = 20;
    r.stop.ignore_eos = true;
    r.sampling.temperature = 0;
  }
  std::vector<std::vector<int32_t>> tokens[2];
  EngineStats stats[2];
  CudaGraphStats graph_stats[2];
  for (int on = 0; on < 2; ++on) {
    CudaBackendOptions opts;
    opts.cuda_graphs = on == 1;
    auto backend = std::make_unique<CudaBackend>(opts);
    CudaBackend* be = backend.get();
    Model model(tiny_bf16_model(), std::move(backend), 64);
    EngineConfig cfg;
    cfg.block_size = kBlock;
    cfg.max_batch_tokens = 64;
    cfg.max_seqs = 2;
    cfg.kv_cache_memory = 24 * model.kv_block_bytes(kBlock);
    cfg.speculative = SpeculativeMode::Ngram;
    cfg.spec_tokens = 4;
    cfg.spec_tree = 2;
    cfg.spec_cost_gate = false;  // a tiny model's steps cost per token: the gate would not draft
    LlmEngine engine(model, nullptr, cfg);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) {
      SubmitError err;
      streams.push_back(engine.submit(r, &err));
      REQUIRE(streams.back());
    }
    for (auto& s : streams) {
      std::vector<int32_t> got;
      for (int polls = 0; !s->done() && polls < 6000; ++polls) {
        auto d = s->next(std::chrono::milliseconds(100));
        if (!d) continue;
        REQUIRE(d->finish != FinishReason::Error);
        got.insert(got.end(), d->tokens.begin(), d->tokens.end());
      }
      REQUIRE(s->done());
      tokens[on].push_back(got);
    }
    stats[on] = engine.stats();
    graph_stats[on] = be->graph_stats();
  }
  INFO("drafted " << stats[1].spec_drafted << ", accepted " << stats[1].spec_accepted << ", verify steps "
                  << stats[1].spec_verifications << "; replays " << graph_stats[1].replays << ", captures "
                  << graph_stats[1].captures);
  REQUIRE(tokens[1][0].size() == 20);
  CHECK(tokens[1] == tokens[0]);
  CHECK(stats[1].spec_accepted > 0);
  CHECK(stats[1].spec_verifications > 0);
  CHECK(graph_stats[1].replays > 0);
  CHECK(graph_stats[0].replays == 0);
}
