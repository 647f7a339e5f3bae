// `pagoda chat-template` end to end: the binary renders testdata templates byte-for-byte, reads
// the template and BOS/EOS texts from a GGUF file, falls back to ChatML, and fails cleanly.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/chat_template/chat_template.h"
#include "engine/gguf/gguf.h"
#include "tests/support/test_files.h"
#include "tests/support/testdata.h"

using pagoda::testing::read_file;

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

const fs::path kData = fs::path(PAGODA_TESTDATA_DIR) / "chat-templates";

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

struct Run {
  int rc;
  std::string out, err;
};

// Runs `pagoda chat-template <args>` with stdout and stderr captured in files.
Run run_cli(const fs::path& dir, const std::string& args) {
  fs::path out = dir / "stdout", err = dir / "stderr";
  std::string cmd = std::string("'") + PAGODA_BINARY + "' chat-template " + args + " > '" + out.string() +
                    "' 2> '" + err.string() + "'";
  int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("pagoda_ct_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

ojson find_case(const std::string& name) {
  for (const auto& c : ojson::parse(read_file(kData / "cases.json")))
    if (c["name"] == name) return c;
  FAIL("no case " << name);
  return {};
}

void write_gguf(const fs::path& p, const std::string* chat_template, const std::string* tool_use = nullptr) {
  pagoda::gguf::GgufWriter w;
  w.set("general.architecture", pagoda::gguf::Value::from_string("llama"));
  w.set("tokenizer.ggml.model", pagoda::gguf::Value::from_string("gpt2"));
  w.set("tokenizer.ggml.tokens", pagoda::gguf::Value::string_array({"<unk>", "<BOS>", "<EOS>", "a"}));
  w.set("tokenizer.ggml.bos_token_id", pagoda::gguf::Value::from_u32(1));
  w.set("tokenizer.ggml.eos_token_id", pagoda::gguf::Value::from_u32(2));
  if (chat_template) w.set("tokenizer.chat_template", pagoda::gguf::Value::from_string(*chat_template));
  if (tool_use) w.set("tokenizer.chat_template.tool_use", pagoda::gguf::Value::from_string(*tool_use));
  w.write(p.string());
}

}  // namespace

TEST_CASE("chat-template CLI renders testdata templates exactly", "[testdata]") {
  if (!pagoda::testing::testdata_available("chat-templates")) return;
  REQUIRE(fs::exists(PAGODA_BINARY));
  TempDir tmp;
  for (const char* case_name : {"c2_multi", "c6_tool_call", "c3_no_gen"}) {
    ojson c = find_case(case_name);
    spit(tmp.path / "messages.json", c["messages"].dump());
    std::string extra = c["add_generation_prompt"].get<bool>() ? "" : " --no-generation-prompt";
    if (c.contains("tools")) {
      spit(tmp.path / "tools.json", c["tools"].dump());
      extra += " --tools '" + (tmp.path / "tools.json").string() + "'";
    }
    for (const char* name : {"chatml", "Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
                             "microsoft-Phi-3.5-mini-instruct"}) {
      INFO(name << " / " << case_name);
      Run r = run_cli(tmp.path, "--template '" + (kData / "templates" / (std::string(name) + ".jinja")).string() +
                                    "' --messages '" + (tmp.path / "messages.json").string() + "'" + extra);
      REQUIRE(r.rc == 0);
      CHECK(r.out == read_file(kData / "expected" / name / (std::string(case_name) + ".txt")));
    }
  }
}

TEST_CASE("chat-template CLI reads the template and BOS/EOS from a GGUF model") {
  TempDir tmp;
  std::string tmpl = "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}";
  std::string tool_tmpl = "tools:{{ tools|length }}";
  write_gguf(tmp.path / "with.gguf", &tmpl, &tool_tmpl);
  write_gguf(tmp.path / "without.gguf", nullptr);
  spit(tmp.path / "m.json", R"({"messages": [{"role": "user", "content": "hi"}]})");
  std::string msgs = " --messages '" + (tmp.path / "m.json").string() + "'";

  Run r = run_cli(tmp.path, "--model '" + (tmp.path / "with.gguf").string() + "'" + msgs);
  REQUIRE(r.rc == 0);
  CHECK(r.out == "<BOS>user:hi<EOS>");

  r = run_cli(tmp.path, "--model '" + (tmp.path / "with.gguf").string() + "'" + msgs + " --bos-token B --eos-token E");
  CHECK(r.out == "Buser:hiE");

  spit(tmp.path / "vars.jinja", "{{ enable_thinking }} {{ mode }} {{ n + 1 }} {{ bos_token }}");
  r = run_cli(tmp.path, "--template '" + (tmp.path / "vars.jinja").string() + "'" + msgs +
                            " --var enable_thinking=false --var mode=fast --var n=41 --var bos_token=X");
  REQUIRE(r.rc == 0);
  CHECK(r.out == "False fast 42 <s>");

  // The named tool_use template is picked when tools are given; messages can come on stdin.
  spit(tmp.path / "t.json", R"([{"type": "function", "function": {"name": "f"}}])");
  r = run_cli(tmp.path, "--model '" + (tmp.path / "with.gguf").string() + "' --messages - --tools '" +
                            (tmp.path / "t.json").string() + "' < '" + (tmp.path / "m.json").string() + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.out == "tools:1");

  r = run_cli(tmp.path, "--model '" + (tmp.path / "without.gguf").string() + "'" + msgs);
  REQUIRE(r.rc == 0);
  CHECK(r.out == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(r.err.find("ChatML") != std::string::npos);
}

TEST_CASE("chat-template CLI fails cleanly", "[testdata]") {
  if (!pagoda::testing::testdata_available("chat-templates/templates/google-gemma-2-2b-it.jinja")) return;
  TempDir tmp;
  spit(tmp.path / "sys.json", R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])");
  spit(tmp.path / "bad.json", R"([{"role": "user", "content": "u"})");
  spit(tmp.path / "bad.jinja", "{% for %}");
  std::string gemma = (kData / "templates" / "google-gemma-2-2b-it.jinja").string();

  Run r = run_cli(tmp.path, "--template '" + gemma + "' --messages '" + (tmp.path / "sys.json").string() + "'");
  CHECK(r.rc == 1);
  CHECK(r.out.empty());
  CHECK(r.err.find("System role not supported") != std::string::npos);

  r = run_cli(tmp.path, "--template '" + gemma + "' --messages '" + (tmp.path / "bad.json").string() + "'");
  CHECK(r.rc == 1);
  CHECK(r.err.find("invalid JSON") != std::string::npos);

  r = run_cli(tmp.path, "--template '" + (tmp.path / "bad.jinja").string() + "' --messages '" +
                            (tmp.path / "sys.json").string() + "'");
  CHECK(r.rc == 1);
  CHECK(r.err.find("line 1") != std::string::npos);

  r = run_cli(tmp.path, "--messages '" + (tmp.path / "sys.json").string() + "'");
  CHECK(r.rc == 2);
  r = run_cli(tmp.path, "--model /nonexistent.gguf --messages '" + (tmp.path / "sys.json").string() + "'");
  CHECK(r.rc == 1);
}
