// Speculative decoding without a model: draft trees, the n-gram drafter, the acceptance path,
// the scheduler's tree steps (rows, positions, slots, masks, budgets) and exact block
// accounting when a tree's path is kept and the rest released.
#include <catch2/catch.hpp>

#include <memory>
#include <numeric>
#include <vector>

#include "engine/scheduler/scheduler.h"
#include "engine/speculative/speculative.h"

using namespace pagoda;

namespace {

std::shared_ptr<Sequence> make_seq(uint64_t id, std::vector<int32_t> prompt, int max_tokens) {
  auto req = std::make_shared<GenerationRequest>();
  req->prompt = std::move(prompt);
  req->stop.max_tokens = max_tokens;
  auto seq = std::make_shared<Sequence>();
  seq->id = id;
  seq->request = req;
  seq->tokens = req->prompt;
  seq->speculate = true;
  return seq;
}

// root -> 10 -> 11 -> 12 (main chain, nodes 1..3), root -> 20 (node 4), 10 -> 30 (node 5).
DraftTree fixed_tree(int32_t root) {
  DraftTree t(root);
  const int a = t.add(0, 10);
  t.add(t.add(a, 11), 12);
  t.add(0, 20);
  t.add(a, 30);
  return t;
}

}  // namespace

TEST_CASE("draft trees: masks, depths, validity") {
  const DraftTree t = fixed_tree(5);
  REQUIRE(t.valid());
  CHECK(t.masks() == std::vector<uint64_t>{0b1, 0b11, 0b111, 0b1111, 0b10001, 0b100011});
  CHECK(t.depth(3) == 3);
  CHECK(t.depth(4) == 1);
  CHECK(t.child(1, 30) == 5);
  CHECK(t.child(1, 31) == -1);
  DraftTree dup = t;
  dup.add(0, 10);  // siblings must hold distinct tokens
  CHECK_FALSE(dup.valid());
  CHECK(accepted_nodes(t, {10, 30, 99}) == std::vector<int>{0, 1, 5});
  CHECK(accepted_nodes(t, {7}) == std::vector<int>{0});
  CHECK_THROWS_AS(accepted_nodes(t, {20, 11, 1}), std::logic_error);
}

TEST_CASE("walk_tree follows drawn tokens down the tree and stops at the first miss") {
  const DraftTree t = fixed_tree(5);
  struct R { int32_t token; int node; };
  const std::vector<int32_t> script{10, 11, 12, 77};  // node 0 -> 10, 1 -> 11, 2 -> 12, 3 -> 77
  const auto out = walk_tree(t, [&](int node) { return R{script[static_cast<size_t>(t.depth(node))], node}; });
  REQUIRE(out.size() == 4);
  CHECK(out[3].node == 3);
  CHECK(out[3].token == 77);
}

TEST_CASE("the n-gram drafter continues the most frequent earlier continuation") {
  NgramDraftConfig cfg;
  // "1 2 3 4 5 ... 1 2 3" -> drafts 4 5 6.
  std::vector<int32_t> toks{1, 2, 3, 4, 5, 6, 9, 9, 1, 2, 3};
  DraftTree t = ngram_draft(toks, 3, cfg);
  CHECK(t.tokens == std::vector<int32_t>{3, 4, 5, 6});
  CHECK(t.parent == std::vector<int32_t>{-1, 0, 1, 2});
  // Nothing matches: the root alone.
  CHECK(ngram_draft({1, 2, 3, 4}, 4, cfg).drafted() == 0);
  // Two continuations of "7": 8 (twice) and 5 (once, most recent). Branches: 8 first.
  cfg.branches = 2;
  toks = {7, 8, 1, 7, 8, 2, 7, 5, 3, 7};
  t = ngram_draft(toks, 6, cfg);
  REQUIRE(t.valid());
  CHECK(t.tokens[1] == 8);  // the main chain follows the most frequent
  CHECK(t.child(0, 5) > 0);  // a side branch at depth 1
  CHECK(t.drafted() <= 6);
}

TEST_CASE("keep_tree_path keeps the path, copies side-branch nodes and releases the rest, exactly") {
  KvCacheManager kv(16, 4);
  // 6 tokens computed (blocks 0, 1), then a 9-node tree at logical 6..14 (blocks 1, 2, 3).
  REQUIRE(kv.allocate(1, 0, 6));
  REQUIRE(kv.allocate(1, 6, 9));
  CHECK(kv.block_table(1).size() == 4);
  CHECK(kv.pool().stats().used == 4);
  // Path root(0) -> node 1 -> node 7 -> node 8: depth 2 and 3 move (6+7 -> 6+2, 6+8 -> 6+3).
  kv.keep_tree_path(1, 6, {0, 1, 7, 8});
  std::vector<SlotCopy> copies;
  kv.take_slot_copies(copies);
  const auto& t = kv.block_table(1);
  auto slot = [&](int i) { return t[i / 4] * 4 + i % 4; };
  REQUIRE(copies.size() == 2);
  CHECK(copies[0].src == slot(13));
  CHECK(copies[0].dst == slot(8));
  CHECK(copies[1].src == slot(14));
  CHECK(copies[1].dst == slot(9));
  // 10 tokens now: 3 blocks kept, the 4th released.
  CHECK(t.size() == 3);
  CHECK(kv.pool().stats().used == 3);
  CHECK(kv.pool().num_available() == 13);
  // The main chain accepted: no copies.
  REQUIRE(kv.allocate(1, 10, 5));
  kv.keep_tree_path(1, 10, {0, 1, 2});
  copies.clear();
  kv.take_slot_copies(copies);
  CHECK(copies.empty());
  CHECK(kv.block_table(1).size() == 4);  // 13 tokens
  kv.free(1);
  CHECK(kv.pool().stats().used == 0);
  CHECK(kv.pool().num_available() == 16);
}

TEST_CASE("scheduler: a speculating decode verifies a tree, takes the accepted path, leaks nothing") {
  KvCacheManager kv(32, 4);
  SchedulerConfig c;
  c.max_batch_tokens = 64;
  c.max_seqs = 4;
  c.ctx_limit = 100;
  c.spec_tokens = 8;
  int asked = -1;
  c.draft = [&](const Sequence& seq, int max_draft) {
    asked = max_draft;
    return fixed_tree(seq.tokens.back());
  };
  Scheduler s(c, kv);
  auto seq = make_seq(1, {1, 2, 3, 4, 5, 6}, 20);
  auto plain = make_seq(2, {1, 2, 3}, 20);
  plain->speculate = false;
  s.add(seq);
  s.add(plain);
  s.schedule();  // prefills
  CHECK(s.update(std::vector<int32_t>{40, 41}).size() == 2);
  REQUIRE(seq->num_computed == 6);

  StepPlan plan = s.schedule();
  CHECK(asked == 8);
  REQUIRE(s.sample_targets().size() == 2);
  const SampleTarget& t = s.sample_targets()[0];
  REQUIRE(t.tree);
  CHECK(plan.n_tokens() == 6 + 1);
  REQUIRE(plan.tree_masks.size() == 7);
  CHECK(plan.tree_masks[6] == 0);  // the plain decode
  CHECK(std::vector<int32_t>(plan.positions.begin(), plan.positions.begin() + 6) ==
        std::vector<int32_t>{6, 7, 8, 9, 7, 8});
  CHECK(plan.logit_rows.size() == 7);
  CHECK_NOTHROW(validate_step_plan(plan, 32, 4, "test"));
  // Emitted: 10 (node 1), 30 (node 5), then 99: path 0, 1, 5 -> node 5 moves to depth 2.
  const auto got = s.update_emitted(std::vector<std::vector<int32_t>>{{10, 30, 99}, {42}});
  REQUIRE(got.size() == 4);
  CHECK(got[0] == seq);
  CHECK(got[2] == seq);
  CHECK(got[3] == plain);
  CHECK(seq->num_computed == 9);
  CHECK(seq->tokens == std::vector<int32_t>{1, 2, 3, 4, 5, 6, 40, 10, 30, 99});
  CHECK(seq->output == std::vector<int32_t>{40, 10, 30, 99});
  CHECK(kv.block_table(seq->id).size() == 3);
  CHECK(s.counters().spec_drafted == 5);
  CHECK(s.counters().spec_accepted == 2);
  plan = s.schedule();  // the slot copy travels in the next plan
  REQUIRE(plan.slot_copies.size() == 1);
  const auto& table = kv.block_table(seq->id);
  CHECK(plan.slot_copies[0].dst == table[8 / 4] * 4 + 8 % 4);
  s.finish(seq, FinishReason::Abort);
  s.finish(plain, FinishReason::Abort);
  CHECK(kv.pool().stats().used == 0);
}

TEST_CASE("scheduler: drafts stop at max_tokens, respect the step's speculation budget and the context") {
  KvCacheManager kv(64, 4);
  SchedulerConfig c;
  c.max_batch_tokens = 64;
  c.max_seqs = 8;
  c.ctx_limit = 10;
  c.spec_tokens = 8;
  c.spec_step_tokens = 4;
  std::vector<int> asked;
  c.draft = [&](const Sequence& seq, int max_draft) {
    asked.push_back(max_draft);
    DraftTree t(seq.tokens.back());
    for (int i = 0; i < max_draft; ++i) t.add(i, 10 + i);
    return t;
  };
  Scheduler s(c, kv);
  auto a = make_seq(1, {1, 2, 3}, 3);
  auto b = make_seq(2, {1, 2, 3}, 20);
  s.add(a);
  s.add(b);
  s.schedule();
  s.update(std::vector<int32_t>{50, 51});
  s.schedule();
  // Two decoding sequences, a 4-token step cap: 2 drafted tokens in all, to the first.
  CHECK(asked == std::vector<int>{2});
  // a accepts both drafts and a third token, but max_tokens = 3 ends it after 2 of them.
  s.update_emitted(std::vector<std::vector<int32_t>>{{10, 11, 12}, {60}});
  CHECK(a->finished());
  CHECK(a->output == std::vector<int32_t>{50, 10, 11});
  // b alone: the 4-token cap minus its decode = 3 drafts; then the context (10) binds: with 8
  // tokens computed, 10 - 8 - 1 = 1.
  asked.clear();
  s.schedule();
  s.update_emitted(std::vector<std::vector<int32_t>>{{10, 11, 12, 13}});
  CHECK(b->num_computed == 8);
  s.schedule();
  CHECK(asked == std::vector<int>{3, 1});
  s.finish(b, FinishReason::Abort);
  CHECK(kv.pool().stats().used == 0);
}

TEST_CASE("low acceptance pauses a sequence's speculation, with a growing back-off") {
  SpecState st;
  int misses = 0;
  while (st.paused_steps == 0 && misses < 100) st.observe(4, 0), ++misses;
  CHECK(misses == 4);
  CHECK(st.paused_steps == 8);
  int skipped = 0;
  while (!st.allowed()) ++skipped;
  CHECK(skipped == 8);
  for (int i = 0; i < 3; ++i) st.observe(4, 0);
  CHECK(st.paused_steps == 16);
  SpecState good;
  for (int i = 0; i < 20; ++i) good.observe(4, 3);
  CHECK(good.paused_steps == 0);
}

TEST_CASE("scheduler: next_step carries each target with its rows; take_emitted counts the tokens each took") {
  KvCacheManager kv(32, 4);
  SchedulerConfig c;
  c.max_batch_tokens = 64;
  c.max_seqs = 4;
  c.ctx_limit = 100;
  c.spec_tokens = 8;
  c.draft = [&](const Sequence& seq, int) { return fixed_tree(seq.tokens.back()); };
  Scheduler s(c, kv);
  auto seq = make_seq(1, {1, 2, 3, 4, 5, 6}, 3);  // ends after 3 tokens: its second drafted one
  auto plain = make_seq(2, {1, 2, 3}, 20);
  plain->speculate = false;
  s.add(seq);
  s.add(plain);
  ScheduledStep first = s.next_step();  // prefills: one plain row each
  REQUIRE(first.targets.size() == 2);
  CHECK(first.targets[0].seq == seq);
  CHECK(first.targets[1].seq == plain);
  CHECK(first.targets[0].logit_row != first.targets[1].logit_row);
  CHECK(first.plan.logit_rows.size() == 2);
  CHECK(s.take_emitted({{40}, {41}}) == std::vector<int>{1, 1});

  ScheduledStep step = s.next_step();
  REQUIRE(step.targets.size() == 2);
  REQUIRE(step.targets[0].tree);
  CHECK(step.targets[0].seq == seq);
  CHECK(!step.targets[1].tree);
  CHECK(step.targets[1].logit_row == step.targets[0].tree->size());  // after the tree's rows
  // The tree target emits three tokens, but max_tokens = 3 (one already drawn) ends it after two.
  CHECK(s.take_emitted({{10, 30, 99}, {42}}) == std::vector<int>{2, 1});
  CHECK(seq->finished());
  CHECK(seq->output == std::vector<int32_t>{40, 10, 30});
  s.finish(plain, FinishReason::Abort);
  CHECK(kv.pool().stats().used == 0);
}
