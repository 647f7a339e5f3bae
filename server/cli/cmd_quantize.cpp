// `pagoda quantize IN.gguf OUT.gguf --type T`: re-encodes a model's weights (see
// engine/model/model_quantize.h), telling the user about every tensor that does not get T.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/model/model_quantize.h"
#include "server/cli/commands.h"

namespace pagoda::cli {

namespace {

const char* const kUsage =
    "usage: pagoda quantize IN.gguf OUT.gguf --type T [--threads N] [--quiet]\n"
    "\n"
    "Re-encodes the 2-D weight matrices of a GGUF model (token embeddings and output included) to\n"
    "type T; norms and other 1-D tensors are copied as they are, and so is every metadata key\n"
    "(general.file_type is updated). A matrix whose rows do not fit T's block falls back to the\n"
    "nearest type that fits (as llama.cpp does), and the tool says so.\n"
    "\n"
    "  --type T       f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k | q4_k |\n"
    "                 q5_k | q6_k | iq4_nl | iq4_xs | q4_k_m (required; q4_k_m: llama.cpp's mix, q4_k\n"
    "                 with q6_k for the output matrix and the V and FFN-down matrices of some\n"
    "                 layers, each such tensor listed)\n"
    "  --threads N    converter threads (default: all cores; never changes the bytes)\n"
    "  --quiet        no per-tensor notes or progress\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "pagoda quantize: %s (see pagoda quantize --help)\n", msg.c_str());
  return 2;
}

}  // namespace

int quantize(int argc, char** argv) {
  std::vector<std::string> paths;
  std::string type_name;
  bool quiet = false;
  QuantizeOptions opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--quiet") {
      quiet = true;
    } else if (a == "--type" || a == "--threads") {
      if (i + 1 >= argc) return usage_error(a + ": missing value");
      const std::string v = argv[++i];
      if (a == "--type") {
        type_name = v;
      } else {
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (end == v.c_str() || *end != '\0' || n <= 0 || n > 4096) return usage_error("--threads: not a positive count: '" + v + "'");
        opt.threads = static_cast<int>(n);
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("unknown flag '" + a + "'");
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() != 2) return usage_error("expected IN.gguf and OUT.gguf");
  if (type_name.empty()) return usage_error("--type T is required");
  if (paths[0] == paths[1]) return usage_error("OUT.gguf must differ from IN.gguf");
  try {
    const WeightChoice c = parse_weight_choice(type_name);
    opt.type = c.type, opt.mix = c.mix;
  } catch (const ModelSpecError& e) {
    return usage_error(std::string("--type: ") + e.what());
  }

  const auto t0 = std::chrono::steady_clock::now();
  const bool tty = isatty(fileno(stderr)) != 0;
  int last_percent = -1;
  size_t others = 0;  // tensors not of opt.type: fallbacks, the mix's choices, kept ones
  auto on_tensor = [&](const TensorPlan& p) {
    if (p.note.empty()) return;
    ++others;
    if (!quiet) std::fprintf(stderr, "%s: %s\n", p.name.c_str(), p.note.c_str());
  };
  ProgressFn progress = [&](uint64_t done, uint64_t total) {
    if (quiet || total < (64u << 20)) return;  // small models are instant
    int percent = total ? int(done * 100 / total) : 100;
    if (!tty) percent = percent / 10 * 10;
    if (percent == last_percent) return;
    last_percent = percent;
    if (tty) {
      std::fprintf(stderr, "\rwriting %s: %3d%%", paths[1].c_str(), percent);
      if (done == total) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "writing %s: %d%%\n", paths[1].c_str(), percent);
    }
  };
  try {
    quantize_model(paths[0], paths[1], opt, on_tensor, progress);
  } catch (const gguf::GgufError& e) {
    std::fprintf(stderr, "pagoda quantize: %s\n", e.what());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet) {
    const char* name = ggml_type_info(opt.type).name;
    if (others == 0)
      std::fprintf(stderr, "wrote %s (every weight matrix %s) in %.1f s\n", paths[1].c_str(), name, secs);
    else
      std::fprintf(stderr, "wrote %s (%s; %zu tensor(s) listed above are not) in %.1f s\n", paths[1].c_str(), name,
                   others, secs);
  }
  return 0;
}

}  // namespace pagoda::cli
