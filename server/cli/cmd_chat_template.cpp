// `pagoda chat-template`: renders a chat template for a conversation and prints the prompt
// exactly (no newline added), the way the server would build it.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/chat_template/chat_template.h"
#include "engine/gguf/gguf.h"
#include "server/cli/commands.h"

namespace pagoda::cli {
namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: pagoda chat-template (--model M.gguf | --template FILE) --messages FILE.json\n"
               "                            [--no-generation-prompt] [--tools FILE.json]\n"
               "                            [--bos-token S] [--eos-token S] [--var NAME=JSON ...]\n"
               "  Prints the rendered prompt exactly, with no newline added.\n"
               "  --model     use the model's tokenizer.chat_template (ChatML when it has none;\n"
               "              tokenizer.chat_template.tool_use when --tools is given and the\n"
               "              model has it, as transformers picks named templates) and its\n"
               "              BOS/EOS token texts\n"
               "  --template  use this Jinja template file (BOS/EOS default to <s> and </s>)\n"
               "  --messages  a JSON array of messages, or an object with \"messages\" (and\n"
               "              optionally \"tools\"); \"-\" reads standard input\n"
               "  --tools     a JSON array of tool definitions\n"
               "  --var       an extra template variable, e.g. --var enable_thinking=false\n"
               "              (the value is JSON; a bare word that is not JSON is a string)\n");
}

// Reads a whole file; "-" means standard input.
std::string read_file(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

nlohmann::ordered_json read_json(const std::string& path) {
  try {
    return nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
}

// Text of the token whose id is stored under `id_key`, if the vocabulary has it.
std::optional<std::string> token_text(const gguf::GgufFile& f, const char* id_key) {
  auto id = f.get_int(id_key);
  const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!id || !tokens || *id < 0 || static_cast<size_t>(*id) >= tokens->size()) return std::nullopt;
  return (*tokens)[static_cast<size_t>(*id)];
}

}  // namespace

int chat_template(int argc, char** argv) {
  std::string model, template_path, messages_path, tools_path;
  std::optional<std::string> bos, eos;
  bool generation_prompt = true;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      print_usage();
      return 0;
    } else if (a == "--model") {
      model = value();
    } else if (a == "--template") {
      template_path = value();
    } else if (a == "--messages") {
      messages_path = value();
    } else if (a == "--tools") {
      tools_path = value();
    } else if (a == "--bos-token") {
      bos = value();
    } else if (a == "--eos-token") {
      eos = value();
    } else if (a == "--var") {
      std::string kv = value();
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw std::runtime_error("--var expects NAME=JSON, got '" + kv + "'");
      std::string text = kv.substr(eq + 1);
      auto parsed = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      variables[kv.substr(0, eq)] = parsed.is_discarded() ? nlohmann::ordered_json(text) : parsed;
    } else if (a == "--no-generation-prompt") {
      generation_prompt = false;
    } else {
      std::fprintf(stderr, "pagoda chat-template: unknown option '%s'\n", a.c_str());
      print_usage();
      return 2;
    }
  }
  if ((model.empty() && template_path.empty()) || messages_path.empty()) {
    print_usage();
    return 2;
  }

  ChatTemplate::Inputs in;
  nlohmann::ordered_json doc = read_json(messages_path);
  if (doc.is_object() && doc.contains("messages")) {
    if (doc.contains("tools")) in.tools_ordered = doc["tools"];
    doc = nlohmann::ordered_json(doc["messages"]);
  }
  if (!doc.is_array()) throw std::runtime_error(messages_path + ": expected a JSON array of messages");
  in.messages_ordered = std::move(doc);
  if (!tools_path.empty()) in.tools_ordered = read_json(tools_path);
  in.add_generation_prompt = generation_prompt;
  in.variables = std::move(variables);
  const bool has_tools = !in.tools_ordered.is_null();

  std::string source;
  if (!model.empty()) {
    auto f = gguf::GgufFile::open(model);
    auto tool_use = has_tools ? f.get_string("tokenizer.chat_template.tool_use") : std::nullopt;
    if (tool_use) {
      source = *tool_use;
    } else if (auto t = f.get_string("tokenizer.chat_template")) {
      source = *t;
    } else if (template_path.empty()) {
      std::fprintf(stderr, "pagoda chat-template: %s has no tokenizer.chat_template; using ChatML\n",
                   model.c_str());
      source = ChatTemplate::chatml_source();
    }
    if (auto b = token_text(f, "tokenizer.ggml.bos_token_id")) in.bos_token = *b;
    if (auto e = token_text(f, "tokenizer.ggml.eos_token_id")) in.eos_token = *e;
  }
  if (!template_path.empty()) source = read_file(template_path);
  if (bos) in.bos_token = *bos;
  if (eos) in.eos_token = *eos;

  std::string prompt = ChatTemplate(source).render(in);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace pagoda::cli
