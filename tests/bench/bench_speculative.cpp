// Speculative decoding benchmarks (scripts/bench_speculative.sh runs them):
//  1. verify cost: one forward pass over a chain-shaped draft tree of T tokens (T = 1 is a
//     plain decode) at a context of --ctx tokens, median of --reps, alternating T each round;
//  2. single stream through LlmEngine: --tokens greedy tokens after a prompt that repeats a
//     random passage (a copying workload for prompt lookup), plain vs --speculative ngram (and
//     --self-draft: draft = the target itself) vs an oracle drafter that knows the plain output
//     (100% acceptance: the ceiling the verify costs allow), alternating, with acceptance rates.
//     With --passage TEXT (a trained model with a tokenizer: real text), the passage is that
//     text, encoded by the model's tokenizer, instead of random ids.
//
//   bench_speculative --model M.gguf [--threads 2] [--ctx 256] [--reps 7] [--max-tree 8]
//                     [--tokens 64] [--spec-tokens 4] [--rounds 2] [--self-draft]
//                     [--passage TEXT] [--no-verify-cost] [--no-cost-gate]
//     (--no-cost-gate: speculating modes draft within the fixed budgets alone, spec_cost.h)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/loop/engine.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

using namespace pagoda;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model;
  int threads = 2, ctx = 256, reps = 7, max_tree = 8, tokens = 64, spec_tokens = 4, rounds = 2;
  bool self_draft = false, verify = true, cost_gate = true;
  std::string passage;  // text; empty: random ids
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int32_t> random_ids(int n, uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 3)) + 3;
  return v;
}

// A plan for tokens [from, from + n) of one sequence in blocks 0.. (chain-shaped tree when
// `tree`: masks of a chain, which is what a verify of T drafted-and-root tokens runs).
StepPlan chain_plan(const std::vector<int32_t>& toks, int from, int n, int B, bool tree, bool all_logits) {
  StepPlan p;
  SeqInStep s;
  s.seq_id = 1;
  s.n_tokens = n;
  s.n_past = from;
  s.n_blocks = (from + n + B - 1) / B;
  for (int b = 0; b < s.n_blocks; ++b) p.block_tables.push_back(b);
  p.seqs.push_back(s);
  for (int i = 0; i < n; ++i) {
    p.tokens.push_back(toks[static_cast<size_t>(from + i)]);
    p.positions.push_back(from + i);
    p.slots.push_back(from + i);
    p.token_seq.push_back(0);
    if (tree) p.tree_masks.push_back((uint64_t{1} << (i + 1)) - 1);
    if (all_logits || i == n - 1) p.logit_rows.push_back(i);
  }
  return p;
}

void verify_cost(const Args& a, const gguf::GgufFile& f) {
  Model m(f, std::make_unique<CpuBackend>(a.threads), 512);
  const int B = 16;
  m.init_kv_cache((a.ctx + a.max_tree) / B + 2, B);
  const auto toks = random_ids(a.ctx + a.max_tree, 1, m.config().vocab_size);
  std::vector<float> logits;
  for (int from = 0; from < a.ctx; from += 256)  // the context, in chunks
    m.forward(chain_plan(toks, from, std::min(256, a.ctx - from), B, false, false), logits);
  std::vector<std::vector<double>> ms(static_cast<size_t>(a.max_tree + 1));
  for (int rep = 0; rep < a.reps + 1; ++rep) {
    for (int k = 0; k < a.max_tree; ++k) {
      const int T = rep % 2 ? a.max_tree - k : k + 1;  // alternate the order each round
      const StepPlan plan = chain_plan(toks, a.ctx, T, B, T > 1, true);
      const auto t0 = Clock::now();
      m.forward(plan, logits);
      if (rep > 0) ms[static_cast<size_t>(T)].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  const double base = median(ms[1]);
  std::printf("verify cost at context %d, %d threads (median of %d):\n  T  ms      x decode\n", a.ctx, a.threads, a.reps);
  for (int T = 1; T <= a.max_tree; ++T)
    std::printf("  %d  %7.2f  %.2f\n", T, median(ms[static_cast<size_t>(T)]), median(ms[static_cast<size_t>(T)]) / base);
}

struct StreamResult {
  double tok_s = 0;
  uint64_t drafted = 0, accepted = 0;
  std::vector<int32_t> tokens;
};

// `oracle`: drafts the next tokens of this known output (what a perfect drafter would say).
StreamResult stream(const Args& a, const gguf::GgufFile& f, SpeculativeMode mode, const std::vector<int32_t>& prompt,
                    const std::vector<int32_t>* oracle = nullptr) {
  Model m(f, std::make_unique<CpuBackend>(a.threads), 512);
  std::unique_ptr<Model> draft;
  EngineConfig c;
  c.max_seqs = 1;
  c.ctx_size = 2048;
  c.kv_cache_memory = 64u << 20;
  c.speculative = mode;
  c.spec_tokens = a.spec_tokens;
  c.spec_cost_gate = a.cost_gate;
  if (oracle)
    c.custom_drafter = [oracle](const Sequence& seq, int max_draft) {
      DraftTree t(seq.tokens.back());
      for (size_t i = seq.output.size(); i < oracle->size() && t.drafted() < max_draft; ++i)
        t.add(t.size() - 1, (*oracle)[i]);
      return t;
    };
  if (mode == SpeculativeMode::Draft) {
    draft = std::make_unique<Model>(f, std::make_unique<CpuBackend>(a.threads), 512);
    c.draft_model = draft.get();
  }
  LlmEngine engine(m, nullptr, c);
  GenerationRequest r;
  r.prompt = prompt;
  r.stop.max_tokens = a.tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  SubmitError err;
  auto s = engine.submit(r, &err);
  if (!s) throw std::runtime_error(err.message);
  StreamResult out;
  Clock::time_point first{};
  while (!s->done()) {
    auto d = s->next(std::chrono::milliseconds(100));
    if (!d) continue;
    if (first == Clock::time_point{} && !d->tokens.empty()) first = Clock::now();
    out.tokens.insert(out.tokens.end(), d->tokens.begin(), d->tokens.end());
  }
  const double secs = std::chrono::duration<double>(Clock::now() - first).count();
  out.tok_s = (static_cast<double>(out.tokens.size()) - 1) / secs;  // after the first token
  const EngineStats st = engine.stats();
  out.drafted = st.spec_drafted;
  out.accepted = st.spec_accepted;
  return out;
}

void single_stream(const Args& a, const gguf::GgufFile& f) {
  const int vocab = Model(f, std::make_unique<CpuBackend>(1), 8).config().vocab_size;
  // "Repeat this passage": a passage (120 random ids, or the text's tokens), a separator, then
  // the passage's first 20 tokens again.
  std::vector<int32_t> prompt, passage, sep;  // prompt: BOS where the model wants one, when text
  if (a.passage.empty()) {
    passage = random_ids(120, 7, vocab);
    sep = random_ids(4, 8, vocab);
  } else {
    const auto tok = Tokenizer::from_gguf(f);
    prompt = tok->encode("", true, false);
    passage = tok->encode(a.passage, false, false);
    sep = tok->encode("\n\n", false, false);
    if (passage.size() < 40) throw std::runtime_error("--passage: fewer than 40 tokens");
  }
  prompt.insert(prompt.end(), passage.begin(), passage.end());
  prompt.insert(prompt.end(), sep.begin(), sep.end());
  prompt.insert(prompt.end(), passage.begin(), passage.begin() + 20);
  std::vector<std::pair<const char*, SpeculativeMode>> modes{{"plain", SpeculativeMode::None},
                                                             {"ngram", SpeculativeMode::Ngram}};
  if (a.self_draft) modes.push_back({"self-draft", SpeculativeMode::Draft});
  // Last: an oracle drafter that knows plain decoding's output (acceptance 100%): the best any
  // drafter can do with these verify costs on this machine.
  modes.push_back({"oracle", SpeculativeMode::Ngram});
  std::vector<std::vector<StreamResult>> res(modes.size());
  for (int round = 0; round < a.rounds; ++round)
    for (size_t i = 0; i < modes.size(); ++i)
      res[i].push_back(stream(a, f, modes[i].second, prompt,
                              i + 1 == modes.size() ? &res[0].back().tokens : nullptr));
  std::printf("single stream, %d greedy tokens, prompt %zu tokens (a %s passage, then its start again), "
              "--spec-tokens %d, cost gate %s, %d threads, median of %d:\n",
              a.tokens, prompt.size(), a.passage.empty() ? "random-id" : "text", a.spec_tokens,
              a.cost_gate ? "on" : "off", a.threads, a.rounds);
  const double plain = [&] {
    std::vector<double> v;
    for (const auto& r : res[0]) v.push_back(r.tok_s);
    return median(v);
  }();
  for (size_t i = 0; i < modes.size(); ++i) {
    std::vector<double> v;
    for (const auto& r : res[i]) v.push_back(r.tok_s);
    const StreamResult& last = res[i].back();
    const bool same = last.tokens == res[0].back().tokens;
    std::printf("  %-10s %6.2f tok/s  %.2fx  drafted %llu accepted %llu (%.0f%%)  output %s plain\n", modes[i].first,
                median(v), median(v) / plain, static_cast<unsigned long long>(last.drafted),
                static_cast<unsigned long long>(last.accepted),
                last.drafted ? 100.0 * static_cast<double>(last.accepted) / static_cast<double>(last.drafted) : 0.0,
                same ? "==" : "!=");
  }
  // How much of the random model's output copies the prompt (what prompt lookup can catch).
  const auto& out = res[0].back().tokens;
  int copied = 0;
  size_t comparable = 0;
  for (size_t i = 0; i < out.size() && 20 + i < passage.size(); ++i) copied += out[i] == passage[20 + i], ++comparable;
  std::printf("  plain output tokens equal to the passage's continuation: %d of %zu\n", copied, comparable);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--model") a.model = next();
    else if (k == "--threads") a.threads = std::stoi(next());
    else if (k == "--ctx") a.ctx = std::stoi(next());
    else if (k == "--reps") a.reps = std::stoi(next());
    else if (k == "--max-tree") a.max_tree = std::stoi(next());
    else if (k == "--tokens") a.tokens = std::stoi(next());
    else if (k == "--spec-tokens") a.spec_tokens = std::stoi(next());
    else if (k == "--rounds") a.rounds = std::stoi(next());
    else if (k == "--self-draft") a.self_draft = true;
    else if (k == "--passage") a.passage = next();
    else if (k == "--no-verify-cost") a.verify = false;
    else if (k == "--no-cost-gate") a.cost_gate = false;
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "usage: bench_speculative --model M.gguf [options]\n");
    return 2;
  }
  try {
    const gguf::GgufFile f = gguf::GgufFile::open(a.model);
    if (a.verify) verify_cost(a, f);
    single_stream(a, f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_speculative: %s\n", e.what());
    return 1;
  }
  return 0;
}
