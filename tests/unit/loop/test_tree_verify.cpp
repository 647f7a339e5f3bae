// Token-tree verification on the CPU backend (StepPlan::tree_masks): every node's logits equal,
// bit for bit, those of plain decoding of its path (llama, and gemma2 past its sliding window);
// a tree sharing the step with an ordinary
// prefill leaves that one's logits alone; the accepted path's K/V (kept in place or moved by
// slot copies) equal what plain decoding writes; malformed trees are refused.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "engine/speculative/speculative.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

constexpr int kB = 16;

// The logits of the last token of `tokens`, computed alone from position 0 on a fresh cache
// region (blocks 0.. in order).
std::vector<float> plain_last_logits(Model& m, const std::vector<int32_t>& tokens) {
  StepPlan plan = whole_prompt_plan(tokens, kB, true);
  std::vector<float> all;
  m.forward(plan, all);
  const size_t vocab = static_cast<size_t>(m.config().vocab_size);
  return std::vector<float>(all.end() - static_cast<std::ptrdiff_t>(vocab), all.end());
}

// A tree step for a sequence whose first n_past tokens sit in blocks `table` (logical index i
// in table[i / kB]); node j goes to logical index n_past + j. Every node is a logit row.
void add_tree(StepPlan& plan, const DraftTree& tree, int n_past, const std::vector<int32_t>& table, uint64_t id) {
  SeqInStep s;
  s.seq_id = id;
  s.first_token = plan.n_tokens();
  s.n_tokens = tree.size();
  s.n_past = n_past;
  s.block_table_offset = static_cast<int32_t>(plan.block_tables.size());
  s.n_blocks = (n_past + tree.size() + kB - 1) / kB;
  plan.block_tables.insert(plan.block_tables.end(), table.begin(), table.begin() + s.n_blocks);
  plan.tree_masks.resize(plan.tokens.size(), 0);
  const auto masks = tree.masks();
  for (int j = 0; j < tree.size(); ++j) {
    const int index = n_past + j;
    plan.tokens.push_back(tree.tokens[j]);
    plan.positions.push_back(n_past + tree.depth(j));
    plan.slots.push_back(table[index / kB] * kB + index % kB);
    plan.token_seq.push_back(static_cast<int32_t>(plan.seqs.size()));
    plan.tree_masks.push_back(masks[j]);
    plan.logit_rows.push_back(s.first_token + j);
  }
  plan.seqs.push_back(s);
}

// The tokens on the path root..node.
std::vector<int32_t> path_tokens(const DraftTree& tree, int node) {
  std::vector<int32_t> out;
  for (int u = node; u >= 0; u = tree.parent[u]) out.insert(out.begin(), tree.tokens[u]);
  return out;
}

DraftTree sample_tree(int32_t root) {
  DraftTree t(root);
  const int a = t.add(0, 11), b = t.add(a, 12), c = t.add(b, 13);  // main chain 1..3
  t.add(c, 14);
  const int d = t.add(0, 21);  // side branch at depth 1
  t.add(d, 22);
  t.add(a, 31);                // side branch at depth 2
  t.add(b, 41);
  return t;
}

std::vector<float> kv_slot(Model& m, int layer, int slot, bool v) {
  const auto& c = m.config();
  const int row = c.n_kv_heads * c.head_dim;
  std::vector<float> k(static_cast<size_t>(kB * row)), vv(k.size());
  m.backend().read_kv_block(layer, slot / kB, k.data(), vv.data());
  const auto& src = v ? vv : k;
  return std::vector<float>(src.begin() + (slot % kB) * row, src.begin() + (slot % kB + 1) * row);
}

}  // namespace

TEST_CASE("tree rows: each node's logits are those of plain decoding of its path, bit for bit") {
  // llama, and gemma2 with a window of 8 (the prefix is longer: windowed, capped attention).
  const bool windowed = GENERATE(false, true);
  INFO((windowed ? "gemma2, window 8" : "llama"));
  static const gguf::GgufFile gemma2 = tiny_windowed_model_file(8);
  auto model = load_model(windowed ? gemma2 : tiny_model(), 128);
  model->init_kv_cache(16, kB);
  const std::vector<int32_t> prefix = random_tokens(21, 7);  // 21: the tree straddles blocks 1 and 2
  const DraftTree tree = sample_tree(prefix.back());
  REQUIRE(tree.valid());
  const std::vector<int32_t> committed(prefix.begin(), prefix.end() - 1);
  const int n_past = static_cast<int>(committed.size());

  // References: each node's path after the committed prefix, alone.
  std::vector<std::vector<float>> expect;
  for (int j = 0; j < tree.size(); ++j) {
    auto toks = committed;
    const auto p = path_tokens(tree, j);
    toks.insert(toks.end(), p.begin(), p.end());
    expect.push_back(plain_last_logits(*model, toks));
  }

  // The committed prefix in blocks 4, 5 (a different place than the references used), then the
  // tree in blocks 5, 6, beside an ordinary 5-token prefill of another sequence in block 9.
  const std::vector<int32_t> table{4, 5, 6};
  StepPlan pre = whole_prompt_plan(committed, kB, true);
  for (auto& b : pre.block_tables) b = table[b];
  for (int i = 0; i < n_past; ++i) pre.slots[i] = table[i / kB] * kB + i % kB;
  std::vector<float> ignored;
  model->forward(pre, ignored);

  StepPlan plan;
  const std::vector<int32_t> other = random_tokens(5, 99);
  {
    SeqInStep s;
    s.seq_id = 2;
    s.n_tokens = 5;
    s.n_blocks = 1;
    plan.seqs.push_back(s);
    plan.block_tables.push_back(9);
    for (int i = 0; i < 5; ++i) {
      plan.tokens.push_back(other[i]);
      plan.positions.push_back(i);
      plan.slots.push_back(9 * kB + i);
      plan.token_seq.push_back(0);
    }
    plan.logit_rows.push_back(4);
  }
  add_tree(plan, tree, n_past, table, 1);
  std::vector<float> logits;
  model->forward(plan, logits);
  const size_t vocab = static_cast<size_t>(model->config().vocab_size);
  REQUIRE(logits.size() == vocab * (1 + tree.size()));
  for (int j = 0; j < tree.size(); ++j) {
    INFO("node " << j << " at depth " << tree.depth(j));
    const float* got = logits.data() + vocab * (1 + j);
    CHECK(std::memcmp(got, expect[j].data(), vocab * sizeof(float)) == 0);
  }
  const auto other_expect = plain_last_logits(*model, other);
  CHECK(std::memcmp(logits.data(), other_expect.data(), vocab * sizeof(float)) == 0);
}

TEST_CASE("an accepted side branch moved by slot copies holds plain decoding's K/V") {
  auto model = load_model(tiny_model(), 128);
  model->init_kv_cache(16, kB);
  const std::vector<int32_t> committed = random_tokens(14, 3);
  const int n_past = 14;
  const DraftTree tree = sample_tree(5);
  const std::vector<int32_t> table{0, 1};
  std::vector<float> ignored;
  model->forward(whole_prompt_plan(committed, kB, true), ignored);
  StepPlan plan;
  add_tree(plan, tree, n_past, table, 1);
  model->forward(plan, ignored);

  // Accept root -> 21 -> 22 (nodes 0, 5, 6): they move to logical 15, 16 by slot copies.
  KvCacheManager kv(16, kB);
  REQUIRE(kv.allocate(1, 0, n_past + tree.size()));
  REQUIRE(kv.block_table(1) == table);
  kv.keep_tree_path(1, n_past, {0, 5, 6});
  StepPlan edits;
  kv.take_slot_copies(edits.slot_copies);
  REQUIRE(edits.slot_copies.size() == 2);
  CHECK(edits.slot_copies[0].src == n_past + 5);
  CHECK(edits.slot_copies[0].dst == n_past + 1);
  model->forward(edits, ignored);  // no tokens: the edits alone

  // Plain decoding of the same path writes logical 14..16 in blocks 8, 9.
  auto toks = committed;
  for (int32_t t : {5, 21, 22}) toks.push_back(t);
  StepPlan ref = whole_prompt_plan(toks, kB, true);
  for (auto& b : ref.block_tables) b += 8;
  for (auto& s : ref.slots) s += 8 * kB;
  model->forward(ref, ignored);
  for (int layer = 0; layer < model->config().n_layers; ++layer)
    for (int i = n_past; i < n_past + 3; ++i)
      for (bool v : {false, true}) {
        INFO("layer " << layer << " index " << i << (v ? " V" : " K"));
        CHECK(kv_slot(*model, layer, i, v) == kv_slot(*model, layer, 8 * kB + i, v));
      }
}

TEST_CASE("validate_step_plan refuses malformed trees") {
  StepPlan plan;
  add_tree(plan, sample_tree(1), 3, {0, 1}, 1);
  CHECK_NOTHROW(validate_step_plan(plan, 4, kB, "t"));
  auto expect_refused = [](StepPlan p) { CHECK_THROWS_AS(validate_step_plan(p, 4, kB, "t"), std::invalid_argument); };
  {
    StepPlan p = plan;
    p.positions[2] += 1;  // not n_past + depth
    expect_refused(p);
  }
  {
    StepPlan p = plan;
    p.tree_masks[2] = 0b110;  // no root bit
    expect_refused(p);
  }
  {
    StepPlan p = plan;
    p.tree_masks[1] = 0b110;  // a bit above its own
    expect_refused(p);
  }
  {
    StepPlan p = plan;
    p.tree_masks.pop_back();
    expect_refused(p);
  }
  {
    StepPlan p = plan;
    p.slot_copies.push_back({3, 4 * kB});
    expect_refused(p);
  }
}
