// `pagoda make-model`: writes a random-weight GGUF model (see engine/model_writer.h).
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "engine/encoder/bert_writer.h"
#include "engine/model/model_config.h"
#include "engine/gguf/gguf.h"
#include "engine/lora/lora_writer.h"
#include "engine/model/model_writer.h"
#include "server/cli/commands.h"

namespace pagoda::cli {

namespace {

const char* const kUsage =
    "usage: pagoda make-model --output FILE [options]\n"
    "\n"
    "Writes a GGUF model with seeded random weights (same flags -> identical bytes).\n"
    "\n"
    "  --output FILE         where to write the model (required)\n"
    "  --preset NAME         demo (default) | tinyllama-1.1b | llama3-8b | llama3.1-8b |\n"
    "                        llama3-70b (Llama 3.1 70B's shape, q4_k_m: about 42 GB) | qwen3-8b;\n"
    "                        flags below override it\n"
    "  --arch A              llama | qwen2 | qwen3 | gemma2 | gemma3 | phi3 | qwen2moe |\n"
    "                        qwen3moe (qwen2moe: experts and a shared expert; qwen3moe:\n"
    "                        experts only; 8 experts, 2 used unless set below) |\n"
    "                        bert | nomic-bert | xlm-roberta (encoders for embeddings and rerank:\n"
    "                        a generated WordPiece vocabulary, Unigram for xlm-roberta, or\n"
    "                        --vocab-from; defaults 2 layers, dim 64, ff 128, 4 heads, ctx 128;\n"
    "                        reads --layers --dim --ff --heads --ctx --type --seed --name and\n"
    "                        --pooling mean|cls|rank: rank adds a reranker's classification head)\n"
    "  --experts N           experts per layer (llama: a Mixtral-style MoE; default 0 = dense)\n"
    "  --experts-used K      experts each token is routed to (default 2)\n"
    "  --expert-ff N         each expert's FFN width (default: --ff; a llama MoE writes it as\n"
    "                        feed_forward_length, as Mixtral files do)\n"
    "  --shared-expert-ff N  qwen2moe's shared expert FFN width (default: --ff)\n"
    "  --layers N --dim N --ff N --heads N --kv-heads N --ctx N\n"
    "  --head-dim N          attention head width (default dim / heads)\n"
    "  --vocab-size N        pads the built-in vocabulary with pseudo-word tokens\n"
    "  --type T              f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k |\n"
    "                        q4_k | q5_k | q6_k | iq4_nl | iq4_xs (norms and biases stay f32) |\n"
    "                        q4_k_m (llama.cpp's mix: q4_k, with q6_k for the output matrix and\n"
    "                        the V and FFN-down matrices of some layers)\n"
    "  --rope-base F         RoPE frequency base\n"
    "  --rope-freqs F        none | llama3: write rope_freqs.weight with Llama 3.1's factors\n"
    "                        (factor 8, low/high frequency factors 1/4, original context 8192)\n"
    "                        | longrope (phi3): rope_factors_short/long, original context ctx/4\n"
    "  --sliding-window N    attention window of the local layers (gemma2 4096, gemma3 512 and\n"
    "                        phi3 ctx-1 by default; 0: none for phi3)\n"
    "  --seed N              random seed (default 0)\n"
    "  --pooling P           mean | cls | rank (encoders): written as <arch>.pooling_type (bert default mean)\n"
    "  --vocab-from FILE     copy every tokenizer.* key (and the vocab size) from another GGUF\n"
    "  --name NAME           general.name\n"
    "  --threads N           generator threads (default: all cores; never changes the bytes)\n"
    "  --quiet               no progress output\n"
    "\n"
    "usage: pagoda make-model --lora-for BASE.gguf --output ADAPTER.gguf [--merged-output FILE]\n"
    "                         [--lora-rank R] [--lora-alpha A] [--lora-targets LIST] [--lora-type T] [--seed N]\n"
    "\n"
    "Writes a seeded random LoRA adapter for BASE (llama.cpp's adapter GGUF layout) and, with\n"
    "--merged-output, the merged model (adapted matrices W + alpha/rank * B A in f32), to test\n"
    "an adapter's outputs against.\n"
    "  --lora-rank R         rank (default 8)\n"
    "  --lora-alpha A        alpha; scale = alpha / rank (default 16)\n"
    "  --lora-targets LIST   comma-separated: q,k,v,o,gate,up,down,output (default: all but output)\n"
    "  --lora-type T         f32 | f16 | bf16 (default f32)\n";

struct ArgError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

long long parse_int(const std::string& flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') throw ArgError(flag + ": not an integer: '" + s + "'");
  return v;
}

int parse_size(const std::string& flag, const char* s) {
  long long v = parse_int(flag, s);
  if (v <= 0 || v > 1 << 30) throw ArgError(flag + ": must be a positive size, got " + s);
  return int(v);
}

// The bert spec: its own defaults, overridden by the flags given that apply to an encoder.
encoder::BertSpec bert_spec_from(const ModelSpec& spec, const std::set<std::string>& given,
                                 const encoder::BertSpec& arch) {
  encoder::BertSpec b;
  b.arch = arch.arch;
  b.xlm_roberta = arch.xlm_roberta;
  for (const char* flag : {"--preset", "--kv-heads", "--head-dim", "--vocab-size", "--rope-base", "--rope-freqs",
                           "--sliding-window", "--experts", "--experts-used", "--expert-ff", "--shared-expert-ff"})
    if (given.count(flag)) throw ArgError(std::string(flag) + " does not apply to an encoder (--arch bert, nomic-bert, xlm-roberta)");
  if (given.count("--layers")) b.n_layers = spec.n_layers;
  if (given.count("--dim")) b.dim = spec.dim;
  if (given.count("--ff")) b.ff_dim = spec.ff_dim;
  if (given.count("--heads")) b.n_heads = spec.n_heads;
  if (given.count("--ctx")) b.ctx = spec.ctx;
  if (given.count("--type")) {
    if (spec.mix != WeightMix::None) throw ArgError("--type: weight mixes do not apply to an encoder (--arch bert, nomic-bert, xlm-roberta)");
    b.type = spec.type;
  }
  if (given.count("--seed")) b.seed = spec.seed;
  if (given.count("--name")) b.name = spec.name;
  if (given.count("--pooling")) b.pooling = static_cast<encoder::Pooling>(spec.pooling_type);
  b.vocab_from = spec.vocab_from;
  return b;
}

// make-model --lora-for: a random adapter (and the merged model) for an existing base model.
int make_lora(int argc, char** argv) {
  std::string base, output, merged;
  LoraSpec spec;
  bool quiet = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--quiet") {
        quiet = true;
        continue;
      }
      if (i + 1 >= argc) throw ArgError(flag + ": missing value");
      const char* v = argv[++i];
      if (flag == "--lora-for") base = v;
      else if (flag == "--output" || flag == "-o") output = v;
      else if (flag == "--merged-output") merged = v;
      else if (flag == "--lora-rank") spec.rank = parse_size(flag, v);
      else if (flag == "--lora-alpha") {
        char* end = nullptr;
        spec.alpha = std::strtof(v, &end);
        if (end == v || *end != '\0' || !(spec.alpha >= 0)) throw ArgError(std::string("--lora-alpha: not a number >= 0: '") + v + "'");
      } else if (flag == "--lora-targets") spec.projections = parse_lora_projections(v);
      else if (flag == "--lora-type") spec.type = parse_weight_type(v);
      else if (flag == "--seed") spec.seed = uint64_t(parse_int(flag, v));
      else throw ArgError("unknown flag '" + flag + "' with --lora-for");
    }
    if (output.empty()) throw ArgError("--output FILE is required");
    const gguf::GgufFile file = gguf::GgufFile::open(base);
    write_random_lora(file, spec, output, merged);
  } catch (const std::exception& e) {  // ArgError, ModelSpecError, GgufError, invalid_argument
    std::fprintf(stderr, "pagoda make-model: %s (see pagoda make-model --help)\n", e.what());
    return 2;
  }
  if (!quiet)
    std::fprintf(stderr, "wrote %s (rank %d, alpha %g)%s%s\n", output.c_str(), spec.rank, spec.alpha,
               merged.empty() ? "" : " and ", merged.c_str());
  return 0;
}

}  // namespace

int make_model(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--lora-for") == 0) return make_lora(argc, argv);
  // The preset is applied first so that every other flag overrides it, wherever it appears.
  std::string preset = "demo";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--preset") == 0) preset = argv[i + 1];

  std::string output;
  bool quiet = false;
  bool vocab_size_given = false;
  int threads = 0;
  ModelSpec spec;
  bool bert = false;
  std::set<std::string> given;  // the flags on the command line (a bert spec reads only those)
  encoder::BertSpec bert_spec;
  try {
    spec = model_preset(preset);
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      }
      if (flag == "--quiet") {
        quiet = true;
        continue;
      }
      static const char* const kValued[] = {
          "--output", "-o", "--preset", "--arch", "--sliding-window", "--layers", "--dim", "--ff", "--heads",
          "--kv-heads", "--head-dim", "--ctx", "--vocab-size", "--type", "--rope-base", "--rope-freqs", "--seed",
          "--vocab-from", "--name", "--threads", "--experts", "--experts-used", "--expert-ff",
          "--shared-expert-ff", "--pooling"};
      bool known = false;
      for (const char* k : kValued) known = known || flag == k;
      if (!known) throw ArgError("unknown flag '" + flag + "'");
      if (i + 1 >= argc) throw ArgError(flag + ": missing value");
      const char* v = argv[++i];
      given.insert(flag);
      if (flag == "--output" || flag == "-o") output = v;
      else if (flag == "--preset") continue;  // applied above
      else if (flag == "--arch" && (std::strcmp(v, "bert") == 0 || std::strcmp(v, "nomic-bert") == 0 ||
                                    std::strcmp(v, "xlm-roberta") == 0)) {
        bert = true;
        bert_spec.arch = std::strcmp(v, "nomic-bert") == 0 ? encoder::EncoderArch::NomicBert : encoder::EncoderArch::Bert;
        bert_spec.xlm_roberta = std::strcmp(v, "xlm-roberta") == 0;
      }
      else if (flag == "--pooling") {
        if (std::strcmp(v, "mean") == 0) spec.pooling_type = 1;
        else if (std::strcmp(v, "cls") == 0) spec.pooling_type = 2;
        else if (std::strcmp(v, "rank") == 0) spec.pooling_type = 4;
        else throw ArgError(std::string("--pooling: mean, cls or rank, got '") + v + "'");
      } else if (flag == "--arch") {
        spec.arch = parse_arch_name(v);
      } else if (flag == "--layers") spec.n_layers = parse_size(flag, v);
      else if (flag == "--dim") spec.dim = parse_size(flag, v);
      else if (flag == "--ff") spec.ff_dim = parse_size(flag, v);
      else if (flag == "--heads") spec.n_heads = parse_size(flag, v);
      else if (flag == "--kv-heads") spec.n_kv_heads = parse_size(flag, v);
      else if (flag == "--head-dim") spec.head_dim = parse_size(flag, v);
      else if (flag == "--ctx") spec.ctx = parse_size(flag, v);
      else if (flag == "--vocab-size") {
        spec.vocab_size = parse_size(flag, v);
        vocab_size_given = true;
      } else if (flag == "--type") {
        const WeightChoice c = parse_weight_choice(v);
        spec.type = c.type, spec.mix = c.mix;
      }
      else if (flag == "--rope-base") {
        char* end = nullptr;
        spec.rope_freq_base = std::strtof(v, &end);
        if (end == v || *end != '\0' || !(spec.rope_freq_base > 0))
          throw ArgError(std::string("--rope-base: not a positive number: '") + v + "'");
      } else if (flag == "--rope-freqs") spec.rope_freqs = parse_rope_freqs(v);
      else if (flag == "--sliding-window") spec.sliding_window = int(parse_int(flag, v));
      else if (flag == "--seed") spec.seed = uint64_t(parse_int(flag, v));
      else if (flag == "--vocab-from") spec.vocab_from = v;
      else if (flag == "--name") spec.name = v;
      else if (flag == "--threads") threads = parse_size(flag, v);
      else if (flag == "--experts") spec.n_experts = parse_size(flag, v);
      else if (flag == "--experts-used") spec.n_experts_used = parse_size(flag, v);
      else if (flag == "--expert-ff") spec.expert_ff_dim = parse_size(flag, v);
      else if (flag == "--shared-expert-ff") spec.shared_expert_ff_dim = parse_size(flag, v);
    }
    if (output.empty()) throw ArgError("--output FILE is required");
    if (bert) bert_spec = bert_spec_from(spec, given, bert_spec);
    if (!bert && spec.pooling_type == 4) throw ArgError("--pooling rank applies to an encoder only");
  } catch (const std::runtime_error& e) {  // ArgError, ModelSpecError
    std::fprintf(stderr, "pagoda make-model: %s (see pagoda make-model --help)\n", e.what());
    return 2;
  }
  // The copied vocabulary decides the size unless --vocab-size was asked for explicitly.
  if (!spec.vocab_from.empty() && !vocab_size_given) spec.vocab_size = 0;

  if (bert) {
    try {
      encoder::write_bert_model(bert_spec, output);
    } catch (const encoder::EncoderError& e) {
      std::fprintf(stderr, "pagoda make-model: %s\n", e.what());
      return 2;
    }
    if (!quiet)
      std::fprintf(stderr, "wrote %s (%s, %d layers, dim %d, %s)\n", output.c_str(),
                   bert_spec.xlm_roberta ? "xlm-roberta"
                   : bert_spec.arch == encoder::EncoderArch::Bert ? "bert" : "nomic-bert",
                   bert_spec.n_layers,
                   bert_spec.dim, ggml_type_info(bert_spec.type).name);
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int last_percent = -1;
  const bool tty = isatty(fileno(stderr)) != 0;
  ProgressFn progress = [&](uint64_t done, uint64_t total) {
    if (quiet || total < (64u << 20)) return;  // small models are instant
    // A terminal gets a live percentage; a log gets a line every 10%.
    int percent = int(done * 100 / total);
    if (!tty) percent = percent / 10 * 10;
    if (percent == last_percent) return;
    last_percent = percent;
    if (tty) {
      std::fprintf(stderr, "\rwriting %s: %3d%%", output.c_str(), percent);
      if (done == total) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "writing %s: %d%%\n", output.c_str(), percent);
    }
  };
  try {
    write_model(spec, output, progress, threads);
  } catch (const ModelSpecError& e) {  // an impossible shape: a usage error, nothing written
    std::fprintf(stderr, "pagoda make-model: %s\n", e.what());
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet)
    std::fprintf(stderr, "wrote %s (%s, %d layers, dim %d, %s) in %.1f s\n", output.c_str(), arch_name(spec.arch),
                 spec.n_layers, spec.dim,
                 spec.mix != WeightMix::None ? weight_mix_name(spec.mix) : ggml_type_info(spec.type).name, secs);
  return 0;
}

}  // namespace pagoda::cli
