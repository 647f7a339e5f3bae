// Reasoning models (DeepSeek-R1 distills, Qwen3, QwQ) think inside <think>...</think> before
// they answer. This file reads that block out of their output, incrementally, so that chat
// completions answer with `reasoning_content` (and `delta.reasoning_content` when streaming)
// and the Responses API with a `reasoning` item; content and tool calls are read from what
// follows the block.
//
// Where the output starts matters: DeepSeek-R1 distills' templates (and QwQ's) open `<think>`
// in the prompt itself, so the output begins inside the block; Qwen3's template closes an empty
// block in the prompt when `enable_thinking` is false, so the output is all content; otherwise
// the model opens the block itself. reasoning_start() reads which from the rendered prompt.
//
// The parsers differ where the output does not open a block: `deepseek_r1` treats everything
// up to `</think>` as reasoning (R1 sometimes leaves out the opening tag), `qwen3` treats it as
// content. Text streamed as reasoning stays reasoning: an unclosed block (output cut short) is
// all reasoning, in the streamed and the gathered answer alike.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pagoda::server {

enum class ReasoningFormat { None, DeepSeekR1, Qwen3 };

// "deepseek_r1" | "qwen3" | "none" -> the format; anything else (including "auto") -> nullopt.
std::optional<ReasoningFormat> reasoning_format_from_name(const std::string& name);
const char* reasoning_format_name(ReasoningFormat f);

// The --reasoning-parser option: "auto" reads the template's source (DeepSeek's
// <｜Assistant｜> with <think> -> deepseek_r1; ChatML with <think> (Qwen3, QwQ) -> qwen3;
// anything else -> none); otherwise the named format. Throws std::invalid_argument.
ReasoningFormat resolve_reasoning_format(const std::string& option,
                                         const std::string& template_source);

// Where a reply to `prompt` (the rendered chat) starts.
enum class ReasoningStart {
  Open,      // the model may open a block first (the parser decides)
  Thinking,  // the prompt opened <think>: the output starts inside the block
  Answer,    // the prompt closed the block (thinking turned off): the output is all content
};
ReasoningStart reasoning_start(std::string_view prompt);

// The literal that ends a reasoning block.
inline constexpr const char* kReasoningEnd = "</think>";

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// Splits one choice's output as it arrives. Text that may still be (part of) a tag is held
// back until it is known; the tags themselves are dropped, as is whitespace between the end
// of the block and the content.
class ReasoningParser {
 public:
  ReasoningParser(ReasoningFormat format, ReasoningStart start);
  ReasoningSplit feed(std::string_view text);
  // The output has ended: releases whatever is held.
  ReasoningSplit finish();

 private:
  enum class State { Start, Reasoning, AfterReasoning, Content };
  void run(ReasoningSplit& out, bool final);

  ReasoningFormat format_;
  State state_;
  std::string held_;
};

}  // namespace pagoda::server
