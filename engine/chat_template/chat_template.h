// Runs a model's Jinja chat template (tokenizer.chat_template) the way Hugging Face
// transformers does: trim_blocks, lstrip_blocks, loop controls, tojson with ensure_ascii=False,
// raise_exception, strftime_now.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda {

// Any parse or render failure (including raise_exception); the message says what and where.
struct ChatTemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ChatTemplate {
 public:
  // Parses the template source; throws ChatTemplateError on syntax errors.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  struct Inputs {
    nlohmann::json messages = nlohmann::json::array();
    nlohmann::json tools;   // null when absent (then `tools` is undefined in the template)
    bool add_generation_prompt = true;
    std::string bos_token = "<s>";
    std::string eos_token = "</s>";
    // Optional: the same messages / tools with the client's key order kept. When not null they
    // are used instead of `messages` / `tools`, so `tojson` prints keys in the order the client
    // sent them, as Python does (nlohmann::json sorts keys).
    nlohmann::ordered_json messages_ordered;
    nlohmann::ordered_json tools_ordered;
    // Optional JSON object of extra names to put in scope (vLLM's `chat_template_kwargs`, such
    // as {"enable_thinking": false}, or `documents`). The names above take precedence.
    nlohmann::ordered_json variables;
    // The time `strftime_now` reports (fields as from localtime); the local time when empty.
    std::optional<std::tm> now;
  };
  // Renders with `messages`, `tools` (when not null), `add_generation_prompt`, `bos_token` and
  // `eos_token` in scope. Throws ChatTemplateError ("template error at line N: ...") on any
  // failure, including raise_exception() and the limits on output size, loop iterations and
  // recursion. `messages` must be an array (of anything: the template decides what it accepts).
  std::string render(const Inputs& in) const;

  // The template used when a model ships none (ChatML: <|im_start|>role\ncontent<|im_end|>\n).
  static const std::string& chatml_source();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
