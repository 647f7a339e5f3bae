// ChatTemplate: parse once (lexer -> parser -> name check), render many times.
#include "engine/chat_template/chat_template.h"

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/evaluator.h"
#include "engine/chat_template/lexer.h"
#include "engine/chat_template/parser.h"

namespace pagoda {

using namespace jinja;

namespace {

// jinja2 rejects unknown filters and tests when compiling, even in branches never taken.
void check_names(const Expr* e) {
  if (!e) return;
  if (e->kind == Expr::Kind::Filter && !find_filter(e->name))
    throw ChatTemplateError("template syntax error at line " + std::to_string(e->line) + ": no filter named '" + e->name + "'");
  if (e->kind == Expr::Kind::Test && !find_test(e->name))
    throw ChatTemplateError("template syntax error at line " + std::to_string(e->line) + ": no test named '" + e->name + "'");
  for (const auto& a : e->args) check_names(a.get());
  for (const auto& kv : e->kwargs) check_names(kv.second.get());
}

void check_names(const Body& body) {
  for (const auto& s : body) {
    check_names(s->expr.get());
    check_names(s->cond.get());
    for (const auto& [cond, b] : s->branches) {
      check_names(cond.get());
      check_names(b);
    }
    for (const auto& p : s->params) check_names(p.default_value.get());
    check_names(s->body);
    check_names(s->else_body);
  }
}

}  // namespace

struct ChatTemplate::Impl {
  Body body;
};

ChatTemplate::ChatTemplate(const std::string& source) : impl_(std::make_unique<Impl>()) {
  impl_->body = parse(tokenize(source));
  check_names(impl_->body);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const Inputs& in) const {
  Value messages = in.messages_ordered.is_null() ? from_json(in.messages) : from_json(in.messages_ordered);
  if (!messages.is_list()) throw ChatTemplateError(std::string("messages must be an array, not ") + messages.type_name());
  Value globals = make_globals(in.now);
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
