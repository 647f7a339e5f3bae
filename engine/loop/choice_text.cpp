#include "engine/loop/choice_text.h"

#include "engine/tokenizer/detokenizer.h"

namespace pagoda {

ChoiceText::ChoiceText(const Tokenizer* tok, const std::vector<int32_t>& prompt,
                       const std::vector<std::string>& stop) {
  if (!tok) return;
  detok_ = std::make_unique<IncrementalDetokenizer>(*tok, prompt);
  if (!stop.empty()) stop_ = std::make_unique<StopStringMatcher>(stop);
}

ChoiceText::~ChoiceText() = default;
ChoiceText::ChoiceText(ChoiceText&&) noexcept = default;
ChoiceText& ChoiceText::operator=(ChoiceText&&) noexcept = default;

std::string ChoiceText::push(int32_t token, bool stop_token) {
  std::string text;
  if (detok_ && !stop_token) text = detok_->push(token);
  if (stop_ && !text.empty()) text = stop_->feed(text);
  return text;
}

bool ChoiceText::stopped() const { return stop_ && stop_->matched(); }

std::string ChoiceText::stop_string() const { return stop_ ? stop_->matched_stop() : std::string(); }

std::string ChoiceText::finish() {
  if (!detok_ || stopped()) return "";
  std::string tail = detok_->flush();
  if (!stop_) return tail;
  std::string text = stop_->feed(tail);
  if (!stop_->matched()) text += stop_->flush();
  return text;
}

}  // namespace pagoda
