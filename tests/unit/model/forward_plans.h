// Step plans for the forward-pass tests (test_model_forward, test_moe): deterministic token
// sequences and plans of several sequences' chunks on explicit block tables of kPlanBlock-token
// blocks, every token with a logit row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/backend/step_plan.h"

namespace pagoda::test {

constexpr int kPlanBlock = 4;

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
      p.slots.push_back(pt.table[size_t(i / kPlanBlock)] * kPlanBlock + i % kPlanBlock);
      p.token_seq.push_back(static_cast<int32_t>(s));
    }
  }
  return p;
}

// max |got - want| / max |want| over all logits (the sizes must match: the caller checks).
inline double max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double mx = 0, err = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    mx = std::max(mx, std::fabs(want[i]));
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  return err / mx;
}

}  // namespace pagoda::test
