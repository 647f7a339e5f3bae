// Runs a model's Jinja chat template (tokenizer.chat_template) the way Hugging Face
// transformers does: trim_blocks, lstrip_blocks, loop controls, tojson with ensure_ascii=False,
// raise_exception, strftime_now.
#pragma once

#include <memory>
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
  };
  std::string render(const Inputs& in) const;

  // The template used when a model ships none.
  static const std::string& chatml_source();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
