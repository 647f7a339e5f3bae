#include "engine/lora/lora_adapter.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>

#include "engine/gguf/gguf.h"
#include "kernels/cpu/quants.h"
#include "kernels/ggml_type.h"

namespace pagoda {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

// splitmix64's finaliser, chained over 64-bit words.
uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t mix_floats(uint64_t h, const std::vector<float>& v) {
  for (float f : v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    h = mix(h, bits);
  }
  return h;
}

uint64_t mix_string(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = mix(h, c);
  return mix(h, s.size());
}

}  // namespace

std::string lora_target_name(int layer, LoraProj p) {
  static const char* const kNames[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  return "blk." + std::to_string(layer) + "." + kNames[static_cast<int>(p)] + ".weight";
}

std::vector<LoraTarget> lora_targets_of(const gguf::GgufFile& file, int n_layers) {
  std::vector<LoraTarget> out;
  auto add = [&](const std::string& name) {
    const gguf::TensorInfo* t = file.find_tensor(name);
    if (t && t->dims.size() == 2) out.push_back({name, t->dims[1], t->dims[0]});
  };
  for (int l = 0; l < n_layers; ++l)
    for (int p = 0; p < static_cast<int>(LoraProj::kCount); ++p) add(lora_target_name(l, static_cast<LoraProj>(p)));
  add(kLoraOutputTarget);
  return out;
}

const LoraPair* LoraAdapter::find(const std::string& target) const {
  for (const LoraPair& p : pairs_)
    if (p.target == target) return &p;
  return nullptr;
}

std::shared_ptr<const LoraAdapter> LoraAdapter::load(const std::string& path, const std::string& arch,
                                                     const std::vector<LoraTarget>& targets, int max_rank) {
  gguf::GgufFile file = [&] {
    try {
      return gguf::GgufFile::open(path);
    } catch (const gguf::GgufError& e) {
      throw LoraError(std::string("LoRA adapter: ") + e.what());
    }
  }();
  return from_file(file, arch, targets, max_rank);
}

std::shared_ptr<const LoraAdapter> LoraAdapter::from_file(const gguf::GgufFile& file, const std::string& arch,
                                                          const std::vector<LoraTarget>& targets, int max_rank) {
  const std::string where = "LoRA adapter " + file.path() + ": ";
  auto fail = [&](const std::string& what) -> LoraError { return LoraError(where + what); };
  auto text_key = [&](const char* key) -> std::string {
    try {
      return file.get_string(key).value_or("");
    } catch (const gguf::GgufError&) {
      throw fail(std::string("key ") + key + " is not a string");
    }
  };
  if (const std::string t = text_key("general.type"); t != "adapter")
    throw fail("key general.type is '" + t + "', expected 'adapter' (is this a model rather than an adapter?)");
  if (const std::string t = text_key("adapter.type"); t != "lora")
    throw fail("key adapter.type is '" + t + "', expected 'lora'");
  if (const std::string a = text_key("general.architecture"); a != arch)
    throw fail("key general.architecture is '" + a + "', the base model's is '" + arch + "'");

  auto adapter = std::make_shared<LoraAdapter>();
  adapter->path_ = file.path();
  try {
    adapter->alpha_ = static_cast<float>(file.get_float("adapter.lora.alpha").value_or(0.0));
  } catch (const gguf::GgufError&) {
    throw fail("key adapter.lora.alpha is not a number");
  }
  if (!std::isfinite(adapter->alpha_) || adapter->alpha_ < 0)
    throw fail("key adapter.lora.alpha is " + std::to_string(adapter->alpha_) + ", expected a finite number >= 0");

  // Pair the tensors by base name.
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> by_target;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (ends_with(t.name, ".lora_a")) by_target[t.name.substr(0, t.name.size() - 7)].first = &t;
    else if (ends_with(t.name, ".lora_b")) by_target[t.name.substr(0, t.name.size() - 7)].second = &t;
    else if (ends_with(t.name, "_norm.weight")) continue;
    else throw fail("tensor '" + t.name + "' is neither a .lora_a nor a .lora_b tensor");
  }
  if (by_target.empty()) throw fail("no .lora_a / .lora_b tensors");
  for (const auto& [name, ab] : by_target) {
    if (!ab.first) throw fail("tensor '" + name + ".lora_a' is missing (its .lora_b is there)");
    if (!ab.second) throw fail("tensor '" + name + ".lora_b' is missing (its .lora_a is there)");
    bool known = false;
    for (const LoraTarget& t : targets) known = known || t.name == name;
    if (!known)
      throw fail("tensor '" + name + ".lora_a': the base model has no matrix '" + name +
                 "' that takes an adapter (wrong base model, or a fused or expert matrix)");
  }

  uint64_t key = mix(0x5eedf00dull, std::bit_cast<uint32_t>(adapter->alpha_));
  for (const LoraTarget& target : targets) {
    auto it = by_target.find(target.name);
    if (it == by_target.end()) continue;
    const gguf::TensorInfo& ta = *it->second.first;
    const gguf::TensorInfo& tb = *it->second.second;
    for (const gguf::TensorInfo* t : {&ta, &tb}) {
      if (t->dims.size() != 2) throw fail("tensor '" + t->name + "' has dims " + dims_text(t->dims) + ", expected 2");
      if (!ggml_type_info(t->type).supported)
        throw fail("tensor '" + t->name + "' has unsupported type " + ggml_type_info(t->type).name);
    }
    const int64_t rank = ta.dims[1];
    if (ta.dims[0] != target.cols || tb.dims[1] != target.rows)
      throw fail("tensor '" + ta.name + "' " + dims_text(ta.dims) + " / '" + tb.name + "' " + dims_text(tb.dims) +
                 " do not fit the base matrix '" + target.name + "' {" + std::to_string(target.cols) + ", " +
                 std::to_string(target.rows) + "} (expected {" + std::to_string(target.cols) + ", rank} and {rank, " +
                 std::to_string(target.rows) + "})");
    if (tb.dims[0] != rank)
      throw fail("tensor '" + ta.name + "' has rank " + std::to_string(rank) + " but '" + tb.name + "' has " +
                 std::to_string(tb.dims[0]) + " (is lora_a transposed?)");
    if (rank <= 0 || rank > max_rank)
      throw fail("tensor '" + ta.name + "' has rank " + std::to_string(rank) + ", above --max-lora-rank " +
                 std::to_string(max_rank));
    LoraPair p;
    p.target = target.name;
    p.rank = static_cast<int>(rank);
    p.rows = target.rows;
    p.cols = target.cols;
    p.scale = adapter->alpha_ > 0 ? adapter->alpha_ / static_cast<float>(rank) : 1.0f;
    p.a.resize(static_cast<size_t>(rank * target.cols));
    p.b.resize(static_cast<size_t>(target.rows * rank));
    cpu::dequantize_row(ta.type, file.tensor_data(ta), p.a.data(), static_cast<int64_t>(p.a.size()));
    cpu::dequantize_row(tb.type, file.tensor_data(tb), p.b.data(), static_cast<int64_t>(p.b.size()));
    for (const auto& [t, v] : {std::pair{&ta, &p.a}, std::pair{&tb, &p.b}})
      for (float f : *v)
        if (!std::isfinite(f)) throw fail("tensor '" + t->name + "' holds a non-finite value");
    key = mix_floats(mix(mix(mix_string(key, p.target), static_cast<uint64_t>(rank)), std::bit_cast<uint32_t>(p.scale)),
                     p.a);
    key = mix_floats(key, p.b);
    adapter->max_rank_ = std::max(adapter->max_rank_, p.rank);
    adapter->pairs_.push_back(std::move(p));
  }
  adapter->key_ = key == 0 ? 1 : key;
  return adapter;
}

}  // namespace pagoda
