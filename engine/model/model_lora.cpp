#include "engine/model/model_lora.h"

#include <algorithm>
#include <stdexcept>
#include <string>


namespace pagoda {
namespace {
constexpr int kProjs = static_cast<int>(LoraProj::kCount);
}  // namespace

void ModelLora::init(const gguf::GgufFile& file, int n_layers) {
  targets_ = lora_targets_of(file, n_layers);
  by_proj_.assign(static_cast<size_t>(n_layers) * kProjs, -1);
  output_ = -1;
  for (size_t t = 0; t < targets_.size(); ++t) {
    if (targets_[t].name == kLoraOutputTarget) output_ = static_cast<int>(t);  // absent when tied
    for (int l = 0; l < n_layers; ++l)
      for (int p = 0; p < kProjs; ++p)
        if (targets_[t].name == lora_target_name(l, static_cast<LoraProj>(p)))
          by_proj_[static_cast<size_t>(l * kProjs + p)] = static_cast<int>(t);
  }
}

void ModelLora::set(int slot, std::shared_ptr<const LoraAdapter> adapter, Backend& be) {
  if (slot < 1) throw std::invalid_argument("ModelLora: slot " + std::to_string(slot) + " is not an adapter slot");
  if (!adapter) throw std::invalid_argument("ModelLora: no adapter");
  if (!be.supports_lora())
    throw std::invalid_argument("backend '" + be.name() + "' does not serve LoRA adapters");
  Slot s;
  s.mats.resize(targets_.size());
  for (size_t t = 0; t < targets_.size(); ++t) {
    const LoraPair* p = adapter->find(targets_[t].name);
    if (!p) continue;
    if (p->rows != targets_[t].rows || p->cols != targets_[t].cols)
      throw std::invalid_argument("ModelLora: adapter pair for " + p->target + " does not fit the matrix");
    Mat& m = s.mats[t];
    m.a = be.upload_weight_f32(p->a.data(), p->rank, p->cols);
    m.b = be.upload_weight_f32(p->b.data(), p->rows, p->rank);
    m.scale = p->scale;
    m.present = true;
  }
  s.adapter = std::move(adapter);
  if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
  slots_[static_cast<size_t>(slot)] = std::move(s);
}

void ModelLora::clear(int slot) {
  if (slot >= 1 && static_cast<size_t>(slot) < slots_.size()) slots_[static_cast<size_t>(slot)] = Slot{};
}

bool ModelLora::begin_step(const StepPlan& plan, const std::vector<int32_t>& head_order) {
  token_groups_.clear();
  head_groups_.clear();
  active_ = false;
  for (const SeqInStep& s : plan.seqs) {
    if (s.lora == 0) continue;
    if (s.lora < 0 || static_cast<size_t>(s.lora) >= slots_.size() || !slots_[static_cast<size_t>(s.lora)].adapter)
      throw std::invalid_argument("Model::forward: sequence " + std::to_string(s.seq_id) + " names LoRA slot " +
                                  std::to_string(s.lora) + ", which holds no adapter");
    active_ = true;
  }
  if (!active_) return false;
  auto group_of = [](std::vector<Group>& groups, int slot) -> Group& {
    for (Group& g : groups)
      if (g.slot == slot) return g;
    groups.push_back({slot, {}});
    return groups.back();
  };
  const int32_t n = plan.n_tokens();
  for (int32_t t = 0; t < n; ++t) {
    const int slot = plan.seqs[static_cast<size_t>(plan.token_seq[static_cast<size_t>(t)])].lora;
    if (slot != 0) group_of(token_groups_, slot).rows.push_back(t);
  }
  for (size_t k = 0; k < head_order.size(); ++k) {
    const int32_t token = plan.logit_rows[static_cast<size_t>(head_order[k])];
    const int slot = plan.seqs[static_cast<size_t>(plan.token_seq[static_cast<size_t>(token)])].lora;
    if (slot != 0) group_of(head_groups_, slot).rows.push_back(static_cast<int32_t>(k));
  }
  return true;
}

void ModelLora::add_group(Backend& be, int target, const Group& g, const Tensor& x, Tensor& out, int64_t first,
                          int64_t n) {
  const Mat& m = slots_[static_cast<size_t>(g.slot)].mats[static_cast<size_t>(target)];
  if (!m.present) return;
  // The group's rows inside [first, first + n), relative to first (rows are ascending).
  const auto lo = std::lower_bound(g.rows.begin(), g.rows.end(), static_cast<int32_t>(first));
  const auto hi = std::lower_bound(lo, g.rows.end(), static_cast<int32_t>(first + n));
  if (lo == hi) return;
  scratch_rows_.assign(lo, hi);
  for (int32_t& r : scratch_rows_) r -= static_cast<int32_t>(first);
  be.lora_add(LoraRows{m.a, m.b, m.scale, scratch_rows_.data(), static_cast<int64_t>(scratch_rows_.size())}, x, out);
}

void ModelLora::apply(Backend& be, int layer, LoraProj p, const Tensor& x, Tensor& out) {
  if (!active_) return;
  const int target = by_proj_[static_cast<size_t>(layer * kProjs + static_cast<int>(p))];
  if (target < 0) return;
  for (const Group& g : token_groups_) add_group(be, target, g, x, out, 0, x.rows);
}

void ModelLora::apply_head(Backend& be, const Tensor& x, Tensor& out, int64_t first, int64_t rows) {
  if (!active_ || output_ < 0) return;
  for (const Group& g : head_groups_) add_group(be, output_, g, x, out, first, rows);
}

}  // namespace pagoda
