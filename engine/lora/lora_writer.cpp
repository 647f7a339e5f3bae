#include "engine/lora/lora_writer.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "engine/gguf/gguf.h"
#include "engine/lora/lora_adapter.h"
#include "kernels/cpu/quants.h"

namespace pagoda {
namespace {

const char* const kProjKeys[] = {"q", "k", "v", "o", "gate", "up", "down"};

// splitmix64: one uniform in [-1, 1) per draw.
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : s_(seed) {}
  float next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
  }

 private:
  uint64_t s_;
};

std::vector<uint8_t> encode(GgmlType type, std::vector<float>& v) {
  // Rounded through the adapter's type in place, so the merged model sees the stored values.
  std::vector<uint8_t> bytes(ggml_row_size(type, static_cast<int64_t>(v.size())));
  cpu::quantize_row(type, v.data(), bytes.data(), static_cast<int64_t>(v.size()));
  cpu::dequantize_row(type, bytes.data(), v.data(), static_cast<int64_t>(v.size()));
  return bytes;
}

// "blk.3.attn_q.weight" -> "q"; "output.weight" -> "output".
std::string projection_key(const std::string& target) {
  for (int p = 0; p < static_cast<int>(LoraProj::kCount); ++p) {
    const std::string name = lora_target_name(0, static_cast<LoraProj>(p));  // "blk.0.<proj>.weight"
    const std::string proj = name.substr(5);                                 // ".<proj>.weight"... after "blk.0"
    if (target.size() > proj.size() && target.compare(target.size() - proj.size(), proj.size(), proj) == 0)
      return kProjKeys[p];
  }
  return "output";
}

bool wanted(const LoraSpec& spec, const std::string& key) {
  if (spec.projections.empty()) return key != "output";
  for (const std::string& p : spec.projections)
    if (p == key) return true;
  return false;
}

}  // namespace

std::vector<std::string> parse_lora_projections(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    bool known = item == "output";
    for (const char* k : kProjKeys) known = known || item == k;
    if (!known)
      throw std::invalid_argument("unknown projection '" + item + "' (q, k, v, o, gate, up, down, output)");
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void write_random_lora(const gguf::GgufFile& base, const LoraSpec& spec, const std::string& adapter_path,
                       const std::string& merged_path) {
  if (spec.rank <= 0) throw std::invalid_argument("LoRA rank must be positive");
  if (!(spec.alpha >= 0) || !std::isfinite(spec.alpha)) throw std::invalid_argument("LoRA alpha must be >= 0");
  if (spec.type != GgmlType::F32 && spec.type != GgmlType::F16 && spec.type != GgmlType::BF16)
    throw std::invalid_argument("LoRA tensor type must be f32, f16 or bf16");
  const std::string arch = base.get_string("general.architecture").value_or("");
  const auto n_layers = base.get_int(arch + ".block_count");
  if (arch.empty() || !n_layers) throw std::invalid_argument(base.path() + ": no general.architecture / block_count");
  const float scale = spec.alpha > 0 ? spec.alpha / static_cast<float>(spec.rank) : 1.0f;

  gguf::GgufWriter adapter;
  adapter.set("general.architecture", gguf::Value::from_string(arch));
  adapter.set("general.type", gguf::Value::from_string("adapter"));
  adapter.set("general.name", gguf::Value::from_string("pagoda-random-lora"));
  adapter.set("adapter.type", gguf::Value::from_string("lora"));
  adapter.set("adapter.lora.alpha", gguf::Value::from_f32(spec.alpha));

  // The merged matrices, by target name.
  std::vector<std::pair<std::string, std::shared_ptr<std::vector<float>>>> merged;
  uint64_t index = 0;
  for (const LoraTarget& t : lora_targets_of(base, static_cast<int>(*n_layers))) {
    ++index;
    const std::string key = projection_key(t.name);
    if (!wanted(spec, key)) continue;
    Uniform rng(spec.seed * 0x100000001b3ull + index);
    const int64_t r = spec.rank;
    std::vector<float> a(static_cast<size_t>(r * t.cols)), b(static_cast<size_t>(t.rows * r));
    const float a_amp = std::sqrt(3.0f / static_cast<float>(t.cols));
    const float b_amp = std::sqrt(3.0f) * 0.5f / (scale * std::sqrt(static_cast<float>(r)));
    for (float& x : a) x = rng.next() * a_amp;
    for (float& x : b) x = rng.next() * b_amp;
    adapter.add_tensor(t.name + ".lora_a", {t.cols, r}, spec.type, encode(spec.type, a));
    adapter.add_tensor(t.name + ".lora_b", {r, t.rows}, spec.type, encode(spec.type, b));
    if (merged_path.empty()) continue;
    const gguf::TensorInfo& w = *base.find_tensor(t.name);
    auto m = std::make_shared<std::vector<float>>(static_cast<size_t>(t.rows * t.cols));
    cpu::dequantize_row(w.type, base.tensor_data(w), m->data(), t.rows * t.cols);
    std::vector<double> row(static_cast<size_t>(t.cols));
    for (int64_t j = 0; j < t.rows; ++j) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t k = 0; k < r; ++k) {
        const double c = static_cast<double>(b[static_cast<size_t>(j * r + k)]);
        const float* ak = a.data() + k * t.cols;
        for (int64_t i = 0; i < t.cols; ++i) row[static_cast<size_t>(i)] += c * ak[i];
      }
      float* mj = m->data() + j * t.cols;
      for (int64_t i = 0; i < t.cols; ++i)
        mj[i] = static_cast<float>(static_cast<double>(mj[i]) + scale * row[static_cast<size_t>(i)]);
    }
    merged.emplace_back(t.name, std::move(m));
  }
  if (adapter.tensors().empty()) throw std::invalid_argument(base.path() + " has none of the projections asked for");
  adapter.write(adapter_path);
  if (merged_path.empty()) return;

  gguf::GgufWriter out;
  for (const auto& [k, v] : base.metadata()) out.set(k, v);
  for (const gguf::TensorInfo& t : base.tensors()) {
    std::shared_ptr<std::vector<float>> m;
    for (const auto& [name, data] : merged)
      if (name == t.name) m = data;
    if (m) {
      out.add_tensor(t.name, t.dims, GgmlType::F32, [m](uint8_t* dst, size_t nbytes) {
        std::memcpy(dst, m->data(), nbytes);
      });
    } else {
      const uint8_t* src = base.tensor_data(t);
      out.add_tensor(t.name, t.dims, t.type, [src](uint8_t* dst, size_t nbytes) { std::memcpy(dst, src, nbytes); });
    }
  }
  out.write(merged_path);
}

}  // namespace pagoda
