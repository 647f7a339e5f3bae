#include "server/bench/workload.h"

#include "server/bench/sharegpt.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <stdexcept>

namespace pagoda::bench {
namespace {

// Common English words: with BPE vocabularies each is usually one token (with its space).
const char* const kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family",
    "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company",
    "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study",
    "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service"};

std::string random_words(std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[pick(rng)];
  }
  return s;
}

int spread(std::mt19937_64& rng, int len, double s) {
  if (s <= 0) return len;
  std::uniform_real_distribution<double> u(1.0 - s, 1.0 + s);
  return std::max(1, static_cast<int>(len * u(rng) + 0.5));
}

std::vector<BenchPrompt> read_prompts_file(const BenchOptions& opt) {
  std::ifstream in(opt.prompts_file);
  if (!in) throw std::runtime_error("cannot open prompts file " + opt.prompts_file);
  std::vector<BenchPrompt> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw std::runtime_error(opt.prompts_file + ":" + std::to_string(lineno) + ": not a JSON object");
    BenchPrompt p;
    p.max_tokens = j.value("max_tokens", opt.output_len);
    if (j.contains("messages") && j["messages"].is_array()) {
      p.messages = j["messages"];
      for (const auto& m : p.messages)  // completions endpoint: join the contents
        if (m.is_object() && m.contains("content") && m["content"].is_string())
          p.user += (p.user.empty() ? "" : "\n") + m["content"].get<std::string>();
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      p.user = j["prompt"].get<std::string>();
    } else {
      throw std::runtime_error(opt.prompts_file + ":" + std::to_string(lineno) +
                               ": needs a \"prompt\" string or a \"messages\" array");
    }
    for (const auto& [key, value] : j.items())
      if (key != "prompt" && key != "messages" && key != "max_tokens") p.extra[key] = value;
    out.push_back(std::move(p));
  }
  if (out.empty()) throw std::runtime_error("prompts file " + opt.prompts_file + " has no prompts");
  return out;
}

}  // namespace

Workload::Workload(const BenchOptions& opt) {
  if (!opt.prompts_file.empty()) {
    prompts_ = read_prompts_file(opt);
    return;
  }
  if (!opt.sharegpt_file.empty()) {
    prompts_ = read_sharegpt(opt.sharegpt_file);
    return;
  }
  std::mt19937_64 rng(opt.seed);
  const std::string system = opt.system_prompt_len > 0 ? random_words(rng, opt.system_prompt_len) : "";
  // Enough distinct prompts that no two requests of a run repeat unless the run is huge.
  const size_t n = 4096;
  prompts_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    BenchPrompt p;
    p.system = system;
    p.user = random_words(rng, spread(rng, opt.input_len, opt.len_spread));
    p.max_tokens = spread(rng, opt.output_len, opt.len_spread);
    prompts_.push_back(std::move(p));
  }
}

nlohmann::json make_request_body(const BenchOptions& opt, const std::string& model,
                                 const BenchPrompt& p) {
  nlohmann::json body = {{"model", model},
                         {"max_tokens", p.max_tokens},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"temperature", 0}};
  if (opt.ignore_eos) body["ignore_eos"] = true;
  if (opt.endpoint == Endpoint::Chat) {
    if (!p.messages.is_null()) {
      body["messages"] = p.messages;
    } else {
      auto msgs = nlohmann::json::array();
      if (!p.system.empty()) msgs.push_back({{"role", "system"}, {"content", p.system}});
      msgs.push_back({{"role", "user"}, {"content", p.user}});
      body["messages"] = msgs;
    }
  } else {
    body["prompt"] = p.system.empty() ? p.user : p.system + "\n" + p.user;
  }
  for (const auto& [key, value] : p.extra.items()) body[key] = value;
  return body;
}

}  // namespace pagoda::bench
