// `pagoda quantize` (see model_quantize.h): each tensor is dequantized to floats a row at a time
// and re-encoded with the reference quantizers of kernels/cpu/quants, rows spread over threads.
#include "engine/model/model_quantize.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "engine/gguf/gguf.h"
#include "kernels/cpu/quants.h"

namespace pagoda {

using gguf::GgufFile;
using gguf::GgufWriter;

namespace {

// Re-encodes rows [r0, r1) of a tensor from `from` to `to`.
void convert_rows(const uint8_t* src, GgmlType from, uint8_t* dst, GgmlType to, int64_t cols, int64_t r0, int64_t r1) {
  const size_t in_row = ggml_row_size(from, cols), out_row = ggml_row_size(to, cols);
  std::vector<float> buf(static_cast<size_t>(cols));
  for (int64_t r = r0; r < r1; ++r) {
    cpu::dequantize_row(from, src + static_cast<size_t>(r) * in_row, buf.data(), cols);
    cpu::quantize_row(to, buf.data(), dst + static_cast<size_t>(r) * out_row, cols);
  }
}

// The mix's view of the source model, from its metadata (any architecture: what a key lacks
// stays 0).
WeightMixModel mix_model(const GgufFile& src) {
  WeightMixModel m;
  m.arch = src.get_string("general.architecture").value_or("");
  const auto key = [&](const char* k) { return static_cast<int>(src.get_int(m.arch + "." + k).value_or(0)); };
  m.n_layers = key("block_count");
  m.n_heads = key("attention.head_count");
  m.n_kv_heads = key("attention.head_count_kv");
  if (m.n_kv_heads == 0) m.n_kv_heads = m.n_heads;
  m.n_experts = key("expert_count");
  m.has_output = src.find_tensor("output.weight") != nullptr;
  return m;
}

TensorPlan plan_tensor(const gguf::TensorInfo& t, const WeightChoice& choice, const WeightMixModel& model) {
  TensorPlan p{t.name, t.type, t.type, {}};
  const GgmlTypeInfo& from = ggml_type_info(t.type);
  if (t.dims.size() < 2) return p;  // norms, biases, rope factors: kept
  // MoE routers (ffn_gate_inp, ffn_gate_inp_shexp) are kept too, as llama.cpp keeps them: they
  // are small and decide which experts run.
  if (t.name.find(".ffn_gate_inp") != std::string::npos) return p;
  if (!from.supported) {
    p.note = std::string("kept as ") + from.name + " (pagoda cannot read that type)";
    return p;
  }
  const GgmlType wanted = weight_type_wanted(choice, t.name, t.dims[0], model);
  p.to = quantize_fallback_type(wanted, t.dims[0]);
  if (p.to != wanted)
    p.note = "rows of " + std::to_string(t.dims[0]) + " do not fit " + ggml_type_info(wanted).name + "'s block of " +
             std::to_string(ggml_type_info(wanted).block_size) + ": " + ggml_type_info(p.to).name + " instead";
  else if (wanted != choice.type)
    p.note = std::string(ggml_type_info(wanted).name) + " (the " + weight_mix_name(choice.mix) + " mix)";
  return p;
}

}  // namespace

void quantize_model(const std::string& in, const std::string& out, const QuantizeOptions& opt,
                    const std::function<void(const TensorPlan&)>& on_tensor, ProgressFn progress) {
  const GgmlTypeInfo* target = ggml_type_info(static_cast<uint32_t>(opt.type));
  if (target == nullptr || !target->supported) throw ModelSpecError("quantize: unsupported target type");
  const auto src = std::make_shared<GgufFile>(GgufFile::open(in));
  GgufWriter w(src->alignment());
  for (const auto& [key, value] : src->metadata()) w.set(key, value);
  w.set("general.file_type", gguf::Value::from_u32(gguf_file_type(opt.type)));
  w.set("general.quantization_version", gguf::Value::from_u32(2));

  uint64_t total = 0;
  std::vector<TensorPlan> plans;
  const WeightChoice choice{opt.type, opt.mix};
  const WeightMixModel model = mix_model(*src);
  for (const auto& t : src->tensors()) {
    plans.push_back(plan_tensor(t, choice, model));
    int64_t rows = 1;
    for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
    total += ggml_row_size(plans.back().to, t.dims[0]) * static_cast<uint64_t>(rows);
    if (on_tensor) on_tensor(plans.back());
  }
  const int threads = opt.threads > 0 ? opt.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  auto done = std::make_shared<uint64_t>(0);
  for (size_t i = 0; i < plans.size(); ++i) {
    const gguf::TensorInfo& t = src->tensors()[i];
    const TensorPlan p = plans[i];
    const int64_t cols = t.dims[0];
    w.add_tensor(t.name, t.dims, p.to, [=](uint8_t* dst, size_t nbytes) {
      const uint8_t* data = src->tensor_data(t);
      if (p.to == p.from) {
        std::copy(data, data + nbytes, dst);
      } else {
        const int64_t rows = static_cast<int64_t>(nbytes / ggml_row_size(p.to, cols));
        const int n = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, rows), 1, 1 + int64_t(nbytes >> 18)));
        std::vector<std::thread> pool;
        for (int k = 1; k < n; ++k)
          pool.emplace_back(convert_rows, data, p.from, dst, p.to, cols, rows * k / n, rows * (k + 1) / n);
        convert_rows(data, p.from, dst, p.to, cols, 0, rows / n);
        for (auto& th : pool) th.join();
      }
      *done += nbytes;
      if (progress) progress(*done, total);
    });
  }
  w.write(out);
}

}  // namespace pagoda
