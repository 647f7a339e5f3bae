// `pagoda generate` end to end: a demo model written by `pagoda make-model`, greedy and seeded
// runs, chunked prefill, the speed report, and clear errors for bad flags.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/test_files.h"

using pagoda::testing::read_file;

namespace fs = std::filesystem;

namespace {

struct Run {
  int rc;
  std::string out, err;
};

struct Fixture {
  fs::path dir = fs::temp_directory_path() / ("pagoda_gen_" + std::to_string(::getpid()));
  fs::path model = dir / "demo.gguf";

  Fixture() {
    fs::create_directories(dir);
    REQUIRE(fs::exists(PAGODA_BINARY));
    REQUIRE(run("make-model --preset demo --quiet --output '" + model.string() + "'").rc == 0);
  }
  ~Fixture() { fs::remove_all(dir); }

  // Runs `pagoda <args>` with stdout and stderr captured.
  Run run(const std::string& args) const {
    const fs::path out = dir / "stdout", err = dir / "stderr";
    const std::string cmd = std::string("'") + PAGODA_BINARY + "' " + args + " > '" + out.string() + "' 2> '" +
                            err.string() + "'";
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
  }
  Run generate(const std::string& args) const {
    return run("generate --model '" + model.string() + "' --prompt 'Once upon a time' " + args);
  }
};

}  // namespace

TEST_CASE("pagoda generate prints text, then prefill and decode speeds", "[generate]") {
  Fixture fx;
  const Run greedy = fx.generate("-n 12 --threads 2 --ignore-eos");
  REQUIRE(greedy.rc == 0);
  CHECK(!greedy.out.empty());
  CHECK(greedy.err.find("prefill: ") != std::string::npos);
  CHECK(greedy.err.find("decode: 11 tokens") != std::string::npos);
  CHECK(greedy.err.find("tok/s") != std::string::npos);

  // The text ends its line, and reaches the terminal before the stats: with both streams on
  // one file, the stats start a line of their own.
  CHECK(greedy.out.back() == '\n');
  const fs::path both = fx.dir / "both";
  REQUIRE(std::system((std::string("'") + PAGODA_BINARY + "' generate --model '" + fx.model.string() +
                       "' --prompt 'Once upon a time' -n 12 --threads 2 --ignore-eos > '" + both.string() +
                       "' 2>&1")
                          .c_str()) == 0);
  const std::string merged = read_file(both);
  CHECK(merged.find(greedy.out + "prefill: ") != std::string::npos);

  // Greedy is deterministic, whatever the thread count or prefill chunking.
  CHECK(fx.generate("-n 12 --threads 1 --ignore-eos").out == greedy.out);
  CHECK(fx.generate("-n 12 --threads 2 --batch 3 --ignore-eos").out == greedy.out);

  // K and V types apart: the per-half option wins over --kv-cache-type, in either order (an
  // f32 K with an f16 V is not the f32 cache's run, so the two spellings must agree).
  const Run mixed = fx.generate("-n 12 --threads 2 --ignore-eos --kv-cache-type-k f32 --kv-cache-type f16");
  REQUIRE(mixed.rc == 0);
  CHECK(fx.generate("-n 12 --threads 2 --ignore-eos --kv-cache-type f32 --kv-cache-type-v f16").out == mixed.out);
  CHECK(fx.generate("-n 12 --threads 2 --ignore-eos -ctk f32").out == mixed.out);

  // Seeded sampling is reproducible.
  const Run a = fx.generate("-n 16 --temp 1.5 --seed 42 --ignore-eos");
  REQUIRE(a.rc == 0);
  CHECK(fx.generate("-n 16 --temp 1.5 --seed 42 --ignore-eos --threads 1").out == a.out);
}

TEST_CASE("pagoda generate refuses bad arguments with a message", "[generate]") {
  Fixture fx;
  const Run no_model = fx.run("generate --prompt hi");
  CHECK(no_model.rc != 0);
  CHECK(no_model.err.find("--model") != std::string::npos);
  const Run bad_temp = fx.generate("--temp -1");
  CHECK(bad_temp.rc != 0);
  CHECK(bad_temp.err.find("--temp") != std::string::npos);
  const Run too_long = fx.generate("-n 100 --ctx 16");
  CHECK(too_long.rc != 0);
  CHECK(too_long.err.find("--ctx") != std::string::npos);
  const Run bad_kv = fx.generate("--kv-cache-type-k q4_0");
  CHECK(bad_kv.rc != 0);
  CHECK(bad_kv.err.find("--kv-cache-type-k expects f16, f32 or q8_0, got 'q4_0'") != std::string::npos);
  const Run bad_ctv = fx.generate("-ctv f8");
  CHECK(bad_ctv.rc != 0);
  CHECK(bad_ctv.err.find("-ctv expects f16, f32 or q8_0, got 'f8'") != std::string::npos);
  const Run missing = fx.run("generate --model /nonexistent.gguf --prompt hi");
  CHECK(missing.rc != 0);
  CHECK(!missing.err.empty());
  CHECK(fx.run("generate --help").rc == 0);
}

TEST_CASE("make-model --type T and pagoda generate run for every weight type added with quantize", "[generate]") {
  Fixture fx;
  for (const char* type : {"q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs"}) {
    INFO(type);
    const fs::path m = fx.dir / (std::string(type) + ".gguf");
    REQUIRE(fx.run(std::string("make-model --layers 1 --dim 256 --ff 512 --quiet --type ") + type + " --output '" +
                   m.string() + "'").rc == 0);
    const Run r = fx.run("generate --model '" + m.string() + "' --prompt 'Once upon a time' -n 6 --threads 2 --ignore-eos");
    CHECK(r.rc == 0);
    CHECK(!r.out.empty());
    CHECK(r.err.find("decode: 5 tokens") != std::string::npos);
  }
}

TEST_CASE("pagoda quantize re-encodes a model, says what fell back, refuses bad arguments", "[generate]") {
  Fixture fx;
  const fs::path f32 = fx.dir / "f32.gguf", q = fx.dir / "q4_k.gguf";
  // ff 96: ffn_down's rows are too short for Q4_K's 256-element block.
  REQUIRE(fx.run("make-model --layers 1 --dim 256 --ff 96 --type f32 --quiet --output '" + f32.string() + "'").rc == 0);
  const Run r = fx.run("quantize '" + f32.string() + "' '" + q.string() + "' --type q4_k --threads 2");
  REQUIRE(r.rc == 0);
  CHECK(r.err.find("blk.0.ffn_down.weight: rows of 96 do not fit q4_k's block of 256: q5_0 instead") != std::string::npos);
  CHECK(r.err.find("wrote ") != std::string::npos);
  const Run g = fx.run("generate --model '" + q.string() + "' --prompt hi -n 4 --threads 2 --ignore-eos");
  CHECK(g.rc == 0);

  CHECK(fx.run("quantize '" + f32.string() + "' '" + q.string() + "'").rc == 2);  // no --type
  const Run bad = fx.run("quantize '" + f32.string() + "' '" + q.string() + "' --type q9_9");
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("iq4_xs") != std::string::npos);  // lists the known types
  const Run missing = fx.run("quantize /nonexistent.gguf '" + q.string() + "' --type q8_0");
  CHECK(missing.rc == 1);
  CHECK(!missing.err.empty());
  CHECK(fx.run("quantize --help").rc == 0);
}
