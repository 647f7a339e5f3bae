// Helpers of the forward-pass tests (test_model_forward.cpp, test_model_archs.cpp, test_moe.cpp): step plans
// over scrambled block tables, loading a tiny model on the CPU backend, chunked prefill and the
// relative logit error against the reference.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "tests/unit/model/reference_model.h"

namespace pagoda::test {

constexpr int kBlock = 4;

inline std::vector<int32_t> some_tokens(int n, int vocab, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 31 + salt * 17 + 5) % vocab);
  return t;
}

// One sequence's part of a step: tokens [begin, end) of `ids`, block table `table`.
struct Part {
  const std::vector<int32_t>* ids;
  int begin, end;
  std::vector<int32_t> table;
};

// A step over several sequences; every token gets logits (in token order).
inline StepPlan plan_of(const std::vector<Part>& parts) {
  StepPlan p;
  for (size_t s = 0; s < parts.size(); ++s) {
    const Part& pt = parts[s];
    p.seqs.push_back(SeqInStep{s, p.n_tokens(), pt.end - pt.begin, pt.begin,
                               static_cast<int32_t>(p.block_tables.size()), static_cast<int32_t>(pt.table.size())});
    p.block_tables.insert(p.block_tables.end(), pt.table.begin(), pt.table.end());
    for (int i = pt.begin; i < pt.end; ++i) {
      p.logit_rows.push_back(p.n_tokens());
      p.tokens.push_back((*pt.ids)[size_t(i)]);
      p.positions.push_back(i);
      p.slots.push_back(pt.table[size_t(i / kBlock)] * kBlock + i % kBlock);
      p.token_seq.push_back(static_cast<int32_t>(s));
    }
  }
  return p;
}

inline std::vector<int32_t> blocks(std::initializer_list<int32_t> b) { return b; }

struct Loaded {
  gguf::GgufFile file;
  std::unique_ptr<Model> model;
};

inline Loaded load(const TinyModelSpec& spec, GgmlType kv_type, int threads = 2, int max_tokens = 64) {
  Loaded l{gguf::GgufFile::from_bytes(test::make_tiny_model(spec)), nullptr};
  l.model = std::make_unique<Model>(l.file, std::make_unique<CpuBackend>(threads), max_tokens);
  l.model->init_kv_cache(32, kBlock, kv_type);
  return l;
}

// max |got - want| / max |want| over all logits.
inline double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double mx = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::fabs(want[i]));
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  return err / mx;
}

// Prefill of `ids` in the given chunk sizes on blocks 0, 1, ...; logits of every position.
inline std::vector<float> prefill(Model& m, const std::vector<int32_t>& ids, std::vector<int> chunks,
                           std::vector<int32_t> table) {
  std::vector<float> all, step;
  int begin = 0;
  for (int c : chunks) {
    m.forward(plan_of({Part{&ids, begin, begin + c, table}}), step);
    all.insert(all.end(), step.begin(), step.end());
    begin += c;
  }
  return all;
}

}  // namespace pagoda::test
