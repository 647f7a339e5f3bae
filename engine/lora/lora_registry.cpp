#include "engine/lora/lora_registry.h"

#include <algorithm>

namespace pagoda {

struct LoraRegistry::State {
  mutable std::mutex mu;
  std::vector<std::shared_ptr<const LoraHandle>> loaded;  // load order
  std::vector<int> free_slots;                            // ready for add()
  std::vector<int> released;                              // last handle gone; clear before reuse
};

LoraRegistry::LoraRegistry(int max_loras) : max_loras_(std::max(0, max_loras)), state_(std::make_shared<State>()) {
  for (int s = max_loras_; s >= 1; --s) state_->free_slots.push_back(s);
}

LoraRegistry::~LoraRegistry() = default;

std::shared_ptr<const LoraHandle> LoraRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& h : state_->loaded)
    if (h->name == name) return h;
  return nullptr;
}

std::vector<std::shared_ptr<const LoraHandle>> LoraRegistry::list() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->loaded;
}

void LoraRegistry::reclaim(const std::function<void(int slot)>& clear) {
  std::vector<int> released;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    released.swap(state_->released);
  }
  for (int s : released) clear(s);
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->free_slots.insert(state_->free_slots.end(), released.begin(), released.end());
  std::sort(state_->free_slots.rbegin(), state_->free_slots.rend());  // lowest slot taken first
}

std::shared_ptr<const LoraHandle> LoraRegistry::add(const std::string& name, std::shared_ptr<const LoraAdapter> adapter,
                                                    const std::function<void(int slot)>& install) {
  int slot = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (const auto& h : state_->loaded)
      if (h->name == name) throw LoraError("a LoRA adapter named '" + name + "' is already loaded");
    if (state_->free_slots.empty())
      throw LoraError("cannot load LoRA adapter '" + name + "': " + std::to_string(max_loras_) +
                      " adapters are loaded or still in use (--max-loras)");
    slot = state_->free_slots.back();
    state_->free_slots.pop_back();
  }
  try {
    install(slot);
  } catch (...) {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->free_slots.push_back(slot);
    throw;
  }
  // The last owner of the handle hands its slot back for reclaim().
  std::weak_ptr<State> weak = state_;
  std::shared_ptr<const LoraHandle> h(new LoraHandle{name, slot, std::move(adapter)}, [weak](const LoraHandle* p) {
    if (auto st = weak.lock()) {
      std::lock_guard<std::mutex> lock(st->mu);
      st->released.push_back(p->slot);
    }
    delete p;
  });
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->loaded.push_back(h);
  return h;
}

bool LoraRegistry::remove(const std::string& name) {
  std::shared_ptr<const LoraHandle> gone;  // released outside the lock (its deleter takes it)
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = std::find_if(state_->loaded.begin(), state_->loaded.end(),
                           [&](const auto& h) { return h->name == name; });
    if (it == state_->loaded.end()) return false;
    gone = std::move(*it);
    state_->loaded.erase(it);
  }
  return true;
}

}  // namespace pagoda
