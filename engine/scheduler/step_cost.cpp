#include "engine/scheduler/step_cost.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/step_plan.h"

namespace pagoda {

namespace {

constexpr double kPairScale = 1e-6;  // attention pairs are counted in millions
constexpr size_t kMinSamples = 4;
// The correction's running mean: each step moves it this far (in log terms) toward its own
// actual / fitted ratio, so it settles within a few steps and one slow step moves it only a
// little. The ratio a single step contributes, and the correction, stay within a bound.
constexpr double kCorrectionWeight = 0.3;
constexpr double kMaxStepRatio = 4.0;
constexpr double kMaxCorrection = 16.0;

// Steps whose chunks carry prompt tokens: more tokens than sampled rows (a decode samples
// every token it runs).
bool has_prompt_tokens(const StepFeatures& f) { return f.tokens > f.logit_rows; }

StepCostModel::Coefficients features(const StepFeatures& f) {
  return {1.0, f.tokens, f.logit_rows, f.attention_pairs * kPairScale};
}

// Solves the normal equations restricted to the `free` coefficients (the others are 0) by
// Gaussian elimination with partial pivoting. False when singular.
bool solve(const double (&a)[4][4], const double (&b)[4], const bool (&free)[4], double (&out)[4]) {
  int idx[4], n = 0;
  for (int i = 0; i < 4; ++i)
    if (free[i]) idx[n++] = i;
  double m[4][5];
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) m[r][c] = a[idx[r]][idx[c]];
    m[r][n] = b[idx[r]];
  }
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(m[r][c]) > std::fabs(m[p][c])) p = r;
    if (std::fabs(m[p][c]) < 1e-300) return false;
    std::swap(m[p], m[c]);
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const double k = m[r][c] / m[c][c];
      for (int k2 = c; k2 <= n; ++k2) m[r][k2] -= k * m[c][k2];
    }
  }
  for (double& v : out) v = 0;
  for (int r = 0; r < n; ++r) out[idx[r]] = m[r][n] / m[r][r];
  return true;
}

}  // namespace

void StepFeatures::add_chunk(int n_past, int n, int rows) {
  tokens += n;
  logit_rows += rows;
  attention_pairs += static_cast<double>(n) * (n_past + (n + 1) / 2.0);
}

StepFeatures StepFeatures::of(const StepPlan& plan) {
  StepFeatures f;
  for (const auto& s : plan.seqs) f.add_chunk(s.n_past, s.n_tokens, 0);
  f.logit_rows = static_cast<double>(plan.logit_rows.size());
  return f;
}

void StepCostModel::observe(const StepFeatures& f, double ms, bool prefill) {
  if (!std::isfinite(ms) || ms < 0) return;
  if (const double fitted = fitted_ms(f); fitted > 0 && has_prompt_tokens(f)) {
    // How far off the fit the scheduler planned this step with was (before it learns from it).
    const double ratio = std::clamp(ms / fitted, 1 / kMaxStepRatio, kMaxStepRatio);
    double& c = prompt_correction_;
    c = std::exp((1 - kCorrectionWeight) * std::log(c) + kCorrectionWeight * std::log(ratio));
    c = std::clamp(c, 1 / kMaxCorrection, kMaxCorrection);
  }
  int size_class = 0;
  for (double t = f.tokens; t >= 2 && size_class < kSizes - 1; t /= 2) ++size_class;
  Bucket& b = buckets_[prefill ? 1 : 0][size_class];
  const Sample s{features(f), ms};
  if (b.ring.size() < kPerBucket) b.ring.push_back(s);
  else b.ring[b.next] = s;
  b.next = (b.next + 1) % kPerBucket;
  refit();
}

void StepCostModel::refit() {
  double a[4][4] = {}, b[4] = {};
  size_t n = 0;
  for (const auto& kind : buckets_) {
    for (const Bucket& bucket : kind) {
      for (const Sample& s : bucket.ring) {
        for (int i = 0; i < 4; ++i) {
          for (int j = 0; j < 4; ++j) a[i][j] += s.x[i] * s.x[j];
          b[i] += s.x[i] * s.ms;
        }
        ++n;
      }
    }
  }
  if (n < kMinSamples) return;
  // A light ridge, relative to each feature's scale, keeps the system solvable when features
  // move together (decode-only steps have as many logit rows as tokens; then the cost is split
  // evenly between them) or never vary (a feature always 0 gets coefficient 0).
  for (int i = 0; i < 4; ++i) a[i][i] += 1e-9 * a[i][i] + 1e-12;
  // Non-negative least squares for four unknowns: drop the most negative coefficient and
  // solve again until none is negative (a cost is never negative).
  bool free[4] = {true, true, true, true};
  double x[4];
  for (int round = 0; round < 4; ++round) {
    if (!solve(a, b, free, x)) return;
    int worst = -1;
    for (int i = 0; i < 4; ++i)
      if (free[i] && x[i] < 0 && (worst < 0 || x[i] < x[worst])) worst = i;
    if (worst < 0) break;
    free[worst] = false;
    x[worst] = 0;
  }
  for (int i = 0; i < 4; ++i) coef_[i] = std::max(0.0, x[i]);
  ready_ = true;
}

double StepCostModel::fitted_ms(const StepFeatures& f) const {
  if (!ready_) return 0;
  const Coefficients x = features(f);
  double ms = 0;
  for (int i = 0; i < kCoefficients; ++i) ms += coef_[i] * x[i];
  return ms;
}

double StepCostModel::predict_ms(const StepFeatures& f) const {
  return fitted_ms(f) * (has_prompt_tokens(f) ? prompt_correction_ : 1.0);
}

void StepCostModel::set_coefficients(const Coefficients& c) {
  coef_ = c;
  prompt_correction_ = 1.0;
  ready_ = true;
}

}  // namespace pagoda
