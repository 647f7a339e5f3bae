// LoraRegistry: the adapters a server has loaded, by name, and the model slots they sit in.
//
// Slot 0 is the base model; an adapter takes one of slots 1..max_loras while it is loaded or
// still used. A handle (LoraHandle) is shared by the registry and by every request that chose
// the adapter: unloading removes the name (new requests no longer find it) while requests
// already running keep their handle and finish under the adapter; the slot is released when
// the last handle goes, and becomes free again once the owner of the model has cleared it
// (reclaim), so a slot is never reused while any sequence still computes with it.
//
// Thread safety: find/list/names from any thread; reserve/install/reclaim on the thread that
// owns the model (the engine thread), which is the only one that changes slots.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/lora/lora_adapter.h"

namespace pagoda {

struct LoraHandle {
  std::string name;
  int slot = 0;
  std::shared_ptr<const LoraAdapter> adapter;
};

class LoraRegistry {
 public:
  explicit LoraRegistry(int max_loras);
  ~LoraRegistry();
  LoraRegistry(const LoraRegistry&) = delete;
  LoraRegistry& operator=(const LoraRegistry&) = delete;

  int max_loras() const { return max_loras_; }

  // The loaded adapter called `name`, or null.
  std::shared_ptr<const LoraHandle> find(const std::string& name) const;
  // Every loaded adapter, in load order.
  std::vector<std::shared_ptr<const LoraHandle>> list() const;

  // Owner thread: frees the slots whose last handle went, calling clear(slot) for each first.
  void reclaim(const std::function<void(int slot)>& clear);
  // Owner thread: loads `adapter` as `name` into a free slot, calling install(slot) before the
  // name becomes visible (the caller puts the weights in the model there). Throws LoraError when
  // the name is taken or every slot is held.
  std::shared_ptr<const LoraHandle> add(const std::string& name, std::shared_ptr<const LoraAdapter> adapter,
                                        const std::function<void(int slot)>& install);
  // Removes `name`; false when no adapter has it. Its slot is released when its last user ends.
  bool remove(const std::string& name);

 private:
  struct State;
  int max_loras_;
  std::shared_ptr<State> state_;
};

}  // namespace pagoda
