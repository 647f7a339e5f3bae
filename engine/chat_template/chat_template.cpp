// ChatTemplate: parse once (lexer -> parser), render many times. Unknown filters and tests
// are reported when reached, as jinja2 3.1 does for untaken branches.
#include "engine/chat_template/chat_template.h"

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/evaluator.h"
#include "engine/chat_template/lexer.h"
#include "engine/chat_template/parser.h"

namespace pagoda {

using namespace jinja;

struct ChatTemplate::Impl {
  Body body;
};

ChatTemplate::ChatTemplate(const std::string& source) : impl_(std::make_unique<Impl>()) {
  impl_->body = parse(tokenize(source));
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const Inputs& in) const {
  Value messages = in.messages_ordered.is_null() ? from_json(in.messages) : from_json(in.messages_ordered);
  if (!messages.is_list()) throw ChatTemplateError(std::string("messages must be an array, not ") + messages.type_name());
  Value globals = make_globals(in.now);
  if (!in.variables.is_null()) {
    if (!in.variables.is_object()) throw ChatTemplateError("template variables must be a JSON object");
    for (const auto& [name, v] : in.variables.items()) globals.dict->set(Value::string(name), from_json(v));
  }
  globals.dict->set(Value::string("messages"), messages);
  if (!in.tools_ordered.is_null()) globals.dict->set(Value::string("tools"), from_json(in.tools_ordered));
  else if (!in.tools.is_null()) globals.dict->set(Value::string("tools"), from_json(in.tools));
  globals.dict->set(Value::string("add_generation_prompt"), Value::boolean(in.add_generation_prompt));
  globals.dict->set(Value::string("bos_token"), Value::string(in.bos_token));
  globals.dict->set(Value::string("eos_token"), Value::string(in.eos_token));
  return Evaluator(globals).render(impl_->body);
}

const std::string& ChatTemplate::chatml_source() {
  static const std::string kChatml =
      "{% for message in messages %}"
      "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
      "{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return kChatml;
}

}  // namespace pagoda
