// Reasoning blocks: format choice and the incremental <think> splitter (see reasoning.h).
#include "server/openai/reasoning.h"

#include <stdexcept>

namespace pagoda::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = kReasoningEnd;
constexpr std::string_view kSpace = " \t\r\n";

// The length of the longest suffix of `text` that is a proper prefix of `tag` (text that may
// become the tag once more arrives).
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format_from_name(const std::string& name) {
  if (name == "deepseek_r1") return ReasoningFormat::DeepSeekR1;
  if (name == "qwen3") return ReasoningFormat::Qwen3;
  if (name == "none") return ReasoningFormat::None;
  return std::nullopt;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::DeepSeekR1: return "deepseek_r1";
    case ReasoningFormat::Qwen3: return "qwen3";
    case ReasoningFormat::None: break;
  }
  return "none";
}

ReasoningFormat resolve_reasoning_format(const std::string& option, const std::string& source) {
  if (option != "auto") {
    if (auto f = reasoning_format_from_name(option)) return *f;
    throw std::invalid_argument("unknown reasoning parser '" + option +
                                "'; expected auto, deepseek_r1, qwen3 or none");
  }
  if (source.find(kOpen) == std::string::npos) return ReasoningFormat::None;
  if (source.find("<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>") != std::string::npos)  // <｜Assistant｜>
    return ReasoningFormat::DeepSeekR1;
  if (source.find("<|im_start|>") != std::string::npos) return ReasoningFormat::Qwen3;
  return ReasoningFormat::None;
}

ReasoningStart reasoning_start(std::string_view prompt) {
  size_t end = prompt.find_last_not_of(kSpace);
  if (end == std::string_view::npos) return ReasoningStart::Open;
  std::string_view trimmed = prompt.substr(0, end + 1);
  if (trimmed.size() >= kClose.size() && trimmed.substr(trimmed.size() - kClose.size()) == kClose)
    return ReasoningStart::Answer;
  if (trimmed.size() >= kOpen.size() && trimmed.substr(trimmed.size() - kOpen.size()) == kOpen)
    return ReasoningStart::Thinking;
  return ReasoningStart::Open;
}

ReasoningParser::ReasoningParser(ReasoningFormat format, ReasoningStart start)
    : format_(format),
      state_(format == ReasoningFormat::None || start == ReasoningStart::Answer ? State::Content
             : start == ReasoningStart::Thinking                                ? State::Reasoning
                                                                                : State::Start) {}

ReasoningSplit ReasoningParser::feed(std::string_view text) {
  ReasoningSplit out;
  held_.append(text);
  run(out, false);
  return out;
}

ReasoningSplit ReasoningParser::finish() {
  ReasoningSplit out;
  run(out, true);
  return out;
}

void ReasoningParser::run(ReasoningSplit& out, bool final) {
  for (;;) {
    switch (state_) {
      case State::Start: {
        size_t first = held_.find_first_not_of(kSpace);
        std::string_view rest = first == std::string::npos ? std::string_view() : std::string_view(held_).substr(first);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, first + kOpen.size());
          state_ = State::Reasoning;
          continue;
        }
        if (!final && kOpen.substr(0, rest.size()) == rest) return;  // may still open a block
        // No block opened: R1 thinks without the tag, Qwen3 answers.
        state_ = format_ == ReasoningFormat::DeepSeekR1 ? State::Reasoning : State::Content;
        continue;
      }
      case State::Reasoning: {
        size_t at = held_.find(kClose);
        if (at != std::string::npos) {
          out.reasoning.append(held_, 0, at);
          held_.erase(0, at + kClose.size());
          state_ = State::AfterReasoning;
          continue;
        }
        size_t keep = final ? 0 : partial_tag_suffix(held_, kClose);
        out.reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case State::AfterReasoning: {
        size_t first = held_.find_first_not_of(kSpace);
        if (first == std::string::npos) {
          held_.clear();  // formatting between the block and the answer
          return;
        }
        held_.erase(0, first);
        state_ = State::Content;
        continue;
      }
      case State::Content:
        out.content += held_;
        held_.clear();
        return;
    }
  }
}

}  // namespace pagoda::server
