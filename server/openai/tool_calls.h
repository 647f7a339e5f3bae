// Function calling: validating a chat request's `tools` and `tool_choice`, and recognising the
// tool calls a model writes in its output text, so that /v1/chat/completions can answer with
// `message.tool_calls` (and `delta.tool_calls` when streaming) instead of the raw text.
//
// Models do not agree on a format; each family writes what its chat template taught it:
//   Hermes / Qwen2.5:  <tool_call>{"name": "f", "arguments": {...}}</tool_call>   (one or several)
//   Llama 3.1 / 3.2:   {"name": "f", "parameters": {...}}    optionally after <|python_tag|>,
//                      several separated by ';'
//   Mistral (v3):      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
// The format is chosen once per server from the chat template's source (the markers it
// mentions), or named with --tool-call-parser.
//
// Parsing is incremental (ToolCallParser): text is fed as the model produces it; text that
// cannot be part of a call is released as content at once, text that may still become a call
// is held back, and each call is released once its JSON is complete. Text that turns out not to
// be a call (malformed JSON, a marker with no call after it) is released as content unchanged,
// so nothing is lost or duplicated. Whitespace directly before or after a recognised call is
// formatting and is dropped. Parsing the whole output at once (parse_tool_calls) runs the same
// code, so streamed and gathered answers agree exactly.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::server {

// ---- the request side: tools and tool_choice ---------------------------------------------

// The request's tool_choice, checked against its tools.
struct ToolChoice {
  enum class Mode { Auto, None, Required, Function };
  Mode mode = Mode::Auto;
  std::string function;  // Mode::Function: the function the client named
};

// Checks the shape of a request's `tools` ([{"type": "function", "function": {"name",
// "description", "parameters"}}]) and returns the function names, in order. Throws
// ApiError(400) naming the bad field ("tools[1].function.name").
std::vector<std::string> parse_tools(const nlohmann::ordered_json& tools);

// tool_choice: absent, "none" | "auto" | "required", or {"type": "function", "function":
// {"name": ...}} naming one of `names`. Absent means Auto with tools and None without; a
// required or named choice without tools is an error (ApiError 400, param "tool_choice...").
ToolChoice parse_tool_choice(const nlohmann::ordered_json* choice, const std::vector<std::string>& names,
                             bool has_tools);

// ---- the output side: reading calls from the model's text ---------------------------------

enum class ToolCallFormat { None, Hermes, Llama3, Mistral };

// "hermes" | "llama3" | "mistral" | "none" -> the format; anything else (including "auto",
// which is not a format but a request to detect one) -> nullopt.
std::optional<ToolCallFormat> tool_call_format_from_name(const std::string& name);
// The name tool_call_format_from_name accepts ("none" for None).
const char* tool_call_format_name(ToolCallFormat f);

// The format a chat template teaches, from the markers its source mentions: "[TOOL_CALLS]" ->
// Mistral, "<tool_call>" -> Hermes, "<|python_tag|>" or the "ipython" role -> Llama3. Any other
// template (including ones with no tool support) -> Hermes, the most widely used convention:
// it only ever matches output that spells <tool_call> explicitly.
ToolCallFormat detect_tool_call_format(const std::string& template_source);

// The --tool-call-parser option: "auto" detects from the template, otherwise the named format.
// Throws std::invalid_argument for an unknown name.
ToolCallFormat resolve_tool_call_format(const std::string& option,
                                        const std::string& template_source);

// The marker texts of format `f` ("<tool_call>" and "</tool_call>", "<|python_tag|>",
// "[TOOL_CALLS]"). Some vocabularies make them control tokens, which detokenize to nothing: the
// server feeds the marker text to the parser itself when it sees such a token.
std::vector<std::string> tool_call_markers(ToolCallFormat f);

// One call as the model wrote it.
struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON text (an object, compact, keys in the model's order)
};

// What the parser releases after a piece of input: content text to pass on, then any calls
// that completed (content always precedes the calls in the output text).
struct ToolCallEvents {
  std::string content;
  std::vector<ParsedToolCall> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// Incremental parser for one choice's output.
class ToolCallParser {
 public:
  // `known_names`: the request's function names. A call the model opens without a marker (a
  // Llama 3 or Mistral output that starts with bare JSON) counts only if it names one of them
  // and carries its arguments; otherwise that output is ordinary content. Calls after an
  // explicit marker are accepted whatever their name (the client sees what the model asked).
  explicit ToolCallParser(ToolCallFormat f, std::set<std::string> known_names = {});

  // Feeds the next piece of output text; returns what can be released now.
  ToolCallEvents feed(std::string_view text);
  // The output has ended: releases everything still held (an unfinished call as content).
  ToolCallEvents finish();
  // Whether any call has been released so far.
  bool saw_calls() const { return calls_seen_ > 0; }

 private:
  enum class Mode { Text, Body };
  void run(ToolCallEvents& out, bool final);
  bool run_text(ToolCallEvents& out, bool final);
  bool run_body(ToolCallEvents& out, bool final);
  bool run_closed_body(ToolCallEvents& out, bool final);
  void emit_text(ToolCallEvents& out, std::string_view text);
  void emit_calls(ToolCallEvents& out, std::vector<ParsedToolCall>&& calls);
  bool parse_calls(std::string_view json_text, std::vector<ParsedToolCall>& calls) const;

  ToolCallFormat format_;
  std::set<std::string> known_names_;
  std::vector<std::string> open_markers_;
  std::string close_marker_;  // empty: the body runs to the end of the output
  char bare_start_ = 0;       // a body may also open with this character at the output's start

  Mode mode_ = Mode::Text;
  std::string pending_;      // input not yet released
  std::string body_prefix_;  // Body: the held text before the body (restored if it fails)
  bool bare_body_ = false;   // Body: opened without a marker
  bool at_start_ = true;     // no non-whitespace output seen yet
  bool in_segment_ = false;  // content released since the last call
  int calls_seen_ = 0;
};

// The whole output at once: feed(text) followed by finish().
ToolCallEvents parse_tool_calls(ToolCallFormat f, std::string_view text,
                                std::set<std::string> known_names = {});

}  // namespace pagoda::server
