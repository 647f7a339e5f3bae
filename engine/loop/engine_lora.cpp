// LlmEngine's LoRA adapters: loading (file checked on the caller's thread, slot filled on the
// engine thread between steps), unloading and slot reclaim. (The adapter stats are in
// engine.cpp, beside the requests they read.)
#include <algorithm>

#include "engine/loop/engine.h"
#include "engine/model/model_config.h"

namespace pagoda {

std::vector<LoraInfo> LlmEngine::lora_adapters() const {
  std::vector<LoraInfo> out;
  for (const auto& h : loras_->list())
    out.push_back({h->name, h->adapter->path(), h->adapter->max_rank(), h->adapter->alpha()});
  return out;
}

LoraOpResult LlmEngine::load_lora(const std::string& name, const std::string& path) {
  if (cfg_.max_loras <= 0)
    return {false, "LoRA adapters are off: the server runs with --max-loras 0", "lora_unsupported"};
  if (name.empty()) return {false, "a LoRA adapter needs a name", "lora_invalid"};
  if (loras_->find(name)) return {false, "a LoRA adapter named '" + name + "' is already loaded", "lora_exists"};
  std::shared_ptr<const LoraAdapter> adapter;
  try {
    adapter = LoraAdapter::load(path, arch_name(model_.config().arch), model_.lora_targets(), cfg_.max_lora_rank);
  } catch (const LoraError& e) {
    return {false, e.what(), "lora_invalid"};
  }
  LoraOpResult r{true, "", ""};
  try {
    run_on_engine_thread([&](Model& m, KvCacheManager&) {
      reclaim_lora_slots();
      loras_->add(name, adapter, [&](int slot) { m.set_lora(slot, adapter); });
    });
  } catch (const LoraError& e) {
    r = {false, e.what(), loras_->find(name) ? "lora_exists" : "lora_slots_full"};
  } catch (const std::exception& e) {
    r = {false, e.what(), "lora_unsupported"};
  }
  return r;
}

LoraOpResult LlmEngine::unload_lora(const std::string& name) {
  if (!loras_->remove(name)) return {false, "no LoRA adapter named '" + name + "' is loaded", "lora_not_found"};
  return {true, "", ""};
}

void LlmEngine::reclaim_lora_slots() {
  loras_->reclaim([&](int slot) { model_.clear_lora(slot); });
}

}  // namespace pagoda
