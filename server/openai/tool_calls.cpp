// Function calling: tools / tool_choice validation and the incremental tool-call parser (see
// tool_calls.h).
#include "server/openai/tool_calls.h"

#include <algorithm>
#include <stdexcept>

#include "server/openai/json_scan.h"
#include "server/http/api_error.h"

namespace pagoda::server {

namespace {

using ojson = nlohmann::ordered_json;  // keeps the model's key order in the arguments

// Arguments nested deeper than this are not a call (and are not worth the recursion).
constexpr int kMaxCallDepth = 32;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_separator(char c) { return is_ws(c) || c == ';' || c == ','; }

// Index just past the JSON array/object starting at s[start] ('{' or '['); npos while it is
// still open. Brackets are only counted outside strings. `*depth_ok` turns false when the value
// nests deeper than kMaxCallDepth.
size_t json_value_end(std::string_view s, size_t start, bool* depth_ok) {
  int depth = 0;
  JsonStringSkipper strings;
  *depth_ok = true;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (!strings.structural(c)) continue;
    if (c == '{' || c == '[') {
      if (++depth > kMaxCallDepth) *depth_ok = false;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// Whether a bare (marker-less) body could still be the start of a call: '{' then '"' (an
// object with keys), or '[' '{' '"' (a list of them). Lets ordinary content such as "[1] ..."
// or "{}" through at once instead of holding it until its bracket closes.
bool could_start_call(std::string_view s) {
  const char* expect = s.empty() ? "" : s[0] == '[' ? "[{\"" : "{\"";
  size_t k = 0;
  for (char c : s) {
    if (k > 0 && is_ws(c)) continue;
    if (expect[k] == '\0') return true;
    if (c != expect[k]) return false;
    ++k;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

std::string compact(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "Invalid value for '" + param + "': " + what, "invalid_request_error", param);
}

}  // namespace

std::vector<std::string> parse_tools(const nlohmann::ordered_json& tools) {
  if (!tools.is_array()) bad("tools", "expected an array of tools.");
  std::vector<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    const auto& t = tools[i];
    if (!t.is_object()) bad(param, "expected a tool object.");
    auto type = t.find("type");
    if (type != t.end() && !(type->is_string() && *type == "function"))
      bad(param + ".type", "only tools of type 'function' are supported.");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object())
      bad(param + ".function", "expected an object with the function's name and parameters.");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      bad(param + ".function.name", "expected a non-empty string.");
    auto desc = fn->find("description");
    if (desc != fn->end() && !desc->is_null() && !desc->is_string())
      bad(param + ".function.description", "expected a string.");
    auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_null() && !params->is_object())
      bad(param + ".function.parameters", "expected a JSON Schema object.");
    names.push_back(name->get<std::string>());
  }
  return names;
}

ToolChoice parse_tool_choice(const nlohmann::ordered_json* v, const std::vector<std::string>& names, bool has_tools) {
  ToolChoice c;
  if (!v) {
    if (!has_tools) c.mode = ToolChoice::Mode::None;
    return c;
  }
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "none") c.mode = ToolChoice::Mode::None;
    else if (s == "auto") c.mode = ToolChoice::Mode::Auto;
    else if (s == "required") c.mode = ToolChoice::Mode::Required;
    else bad("tool_choice", "expected 'none', 'auto', 'required' or a named function, got '" + s + "'.");
  } else if (v->is_object()) {
    auto type = v->find("type");
    if (type == v->end() || !type->is_string() || *type != "function")
      bad("tool_choice.type", "expected 'function'.");
    auto fn = v->find("function");
    if (fn == v->end() || !fn->is_object()) bad("tool_choice.function", "expected an object.");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string())
      bad("tool_choice.function.name", "expected a string.");
    c.mode = ToolChoice::Mode::Function;
    c.function = name->get<std::string>();
    if (has_tools && std::find(names.begin(), names.end(), c.function) == names.end())
      bad("tool_choice.function.name",
          "the function '" + c.function + "' is not among the request's tools.");
  } else {
    bad("tool_choice", "expected a string or an object.");
  }
  if (!has_tools && c.mode != ToolChoice::Mode::None) {
    if (c.mode == ToolChoice::Mode::Auto) return ToolChoice{ToolChoice::Mode::None, ""};
    bad("tool_choice", "a required or named tool_choice needs 'tools' in the request.");
  }
  return c;
}

std::optional<ToolCallFormat> tool_call_format_from_name(const std::string& name) {
  if (name == "hermes") return ToolCallFormat::Hermes;
  if (name == "llama3") return ToolCallFormat::Llama3;
  if (name == "mistral") return ToolCallFormat::Mistral;
  if (name == "none") return ToolCallFormat::None;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::Llama3: return "llama3";
    case ToolCallFormat::Mistral: return "mistral";
    case ToolCallFormat::None: break;
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(const std::string& src) {
  if (src.find("[TOOL_CALLS]") != std::string::npos) return ToolCallFormat::Mistral;
  if (src.find("<tool_call>") != std::string::npos) return ToolCallFormat::Hermes;
  if (src.find("<|python_tag|>") != std::string::npos || src.find("ipython") != std::string::npos)
    return ToolCallFormat::Llama3;
  return ToolCallFormat::Hermes;
}

ToolCallFormat resolve_tool_call_format(const std::string& option, const std::string& src) {
  if (option == "auto") return detect_tool_call_format(src);
  if (auto f = tool_call_format_from_name(option)) return *f;
  throw std::invalid_argument("unknown tool-call parser '" + option +
                              "'; expected auto, hermes, llama3, mistral or none");
}

std::vector<std::string> tool_call_markers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes: return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::Llama3: return {"<|python_tag|>"};
    case ToolCallFormat::Mistral: return {"[TOOL_CALLS]"};
    case ToolCallFormat::None: break;
  }
  return {};
}

ToolCallParser::ToolCallParser(ToolCallFormat f, std::set<std::string> known_names)
    : format_(f), known_names_(std::move(known_names)) {
  switch (f) {
    case ToolCallFormat::Hermes:
      open_markers_ = {"<tool_call>"};
      close_marker_ = "</tool_call>";
      break;
    case ToolCallFormat::Llama3:
      open_markers_ = {"<|python_tag|>"};
      bare_start_ = '{';
      break;
    case ToolCallFormat::Mistral:
      open_markers_ = {"[TOOL_CALLS]"};
      bare_start_ = '[';
      break;
    case ToolCallFormat::None: break;
  }
}

ToolCallEvents ToolCallParser::feed(std::string_view text) {
  ToolCallEvents out;
  pending_.append(text);
  run(out, /*final=*/false);
  return out;
}

ToolCallEvents ToolCallParser::finish() {
  ToolCallEvents out;
  run(out, /*final=*/true);
  return out;
}

void ToolCallParser::run(ToolCallEvents& out, bool final) {
  if (format_ == ToolCallFormat::None) {
    emit_text(out, pending_);
    pending_.clear();
    return;
  }
  // Each step either consumes input or changes mode with progress; it returns false when it
  // needs more input (or, when final, has released everything).
  while (mode_ == Mode::Text ? run_text(out, final)
                             : close_marker_.empty() ? run_body(out, final)
                                                     : run_closed_body(out, final)) {
  }
}

void ToolCallParser::emit_text(ToolCallEvents& out, std::string_view text) {
  if (calls_seen_ > 0 && !in_segment_) {
    while (!text.empty() && is_ws(text.front())) text.remove_prefix(1);
  }
  if (text.empty()) return;
  out.content.append(text);
  in_segment_ = true;
}

void ToolCallParser::emit_calls(ToolCallEvents& out, std::vector<ParsedToolCall>&& calls) {
  for (auto& c : calls) out.calls.push_back(std::move(c));
  calls_seen_ += (int)calls.size();
  in_segment_ = false;
}

bool ToolCallParser::run_text(ToolCallEvents& out, bool final) {
  if (at_start_) {
    size_t i = 0;
    while (i < pending_.size() && is_ws(pending_[i])) ++i;
    if (i == pending_.size()) {  // only whitespace so far: it may still precede a call
      if (final) {
        emit_text(out, pending_);
        pending_.clear();
      }
      return false;
    }
    at_start_ = false;
    if (bare_start_ && pending_[i] == bare_start_) {
      body_prefix_ = pending_.substr(0, i);
      pending_.erase(0, i);
      mode_ = Mode::Body;
      bare_body_ = true;
      return true;
    }
  }
  size_t best = std::string::npos, best_len = 0;
  for (const std::string& m : open_markers_) {
    size_t p = pending_.find(m);
    if (p < best) best = p, best_len = m.size();
  }
  if (best != std::string::npos) {
    size_t ws = best;
    while (ws > 0 && is_ws(pending_[ws - 1])) --ws;
    emit_text(out, std::string_view(pending_).substr(0, ws));
    body_prefix_ = pending_.substr(ws, best + best_len - ws);
    pending_.erase(0, best + best_len);
    mode_ = Mode::Body;
    bare_body_ = false;
    return true;
  }
  if (final) {
    emit_text(out, pending_);
    pending_.clear();
    return false;
  }
  // Hold back a tail that may grow into a marker, and the whitespace just before it.
  size_t keep = 0;
  for (const std::string& m : open_markers_) {
    for (size_t k = std::min(m.size() - 1, pending_.size()); k > keep; --k) {
      if (pending_.compare(pending_.size() - k, k, m, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  size_t cut = pending_.size() - keep;
  while (cut > 0 && is_ws(pending_[cut - 1])) --cut;
  emit_text(out, std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return false;
}

// Hermes: the body runs to the close marker and holds one JSON value.
bool ToolCallParser::run_closed_body(ToolCallEvents& out, bool final) {
  size_t p = pending_.find(close_marker_);
  if (p == std::string::npos && !final) return false;
  size_t end = p == std::string::npos ? pending_.size() : p + close_marker_.size();
  std::string_view body = std::string_view(pending_).substr(0, std::min(p, pending_.size()));
  std::vector<ParsedToolCall> calls;
  if (parse_calls(trim(body), calls)) {
    emit_calls(out, std::move(calls));
  } else {
    emit_text(out, body_prefix_);
    emit_text(out, std::string_view(pending_).substr(0, end));
  }
  pending_.erase(0, end);
  body_prefix_.clear();
  mode_ = Mode::Text;
  return true;
}

// Llama 3 / Mistral: the body is a run of JSON values (separated by whitespace, ';' or ',', and
// perhaps by repeated markers) up to the end of the output or the first text that is not one.
bool ToolCallParser::run_body(ToolCallEvents& out, bool final) {
  auto fail = [&](size_t end) {  // the held text up to `end` is content after all
    emit_text(out, body_prefix_);
    emit_text(out, std::string_view(pending_).substr(0, end));
    pending_.erase(0, end);
    body_prefix_.clear();
    mode_ = Mode::Text;
  };
  size_t i = 0;
  while (i < pending_.size() && is_separator(pending_[i])) ++i;
  std::string_view rest = std::string_view(pending_).substr(i);
  for (const std::string& m : open_markers_) {
    if (rest.substr(0, m.size()) == m) {  // a repeated marker belongs to the body
      body_prefix_.append(pending_, 0, i + m.size());
      pending_.erase(0, i + m.size());
      bare_body_ = false;
      return true;
    }
    if (!final && rest.size() < m.size() && m.compare(0, rest.size(), rest) == 0 && !rest.empty())
      return false;  // may still become a marker
  }
  // An empty body_prefix_ means the last thing released was a call: separators after it are
  // formatting. Otherwise the held marker had no call after it and is content.
  if (rest.empty()) {
    if (!final) return false;
    if (body_prefix_.empty()) pending_.clear();
    fail(pending_.size());
    return false;
  }
  if (rest[0] != '{' && rest[0] != '[') {  // the body has ended; the rest is text again
    if (body_prefix_.empty()) pending_.erase(0, i);
    fail(body_prefix_.empty() ? 0 : i);
    return true;
  }
  if (bare_body_ && !could_start_call(rest)) {
    fail(i + 1);  // ordinary content that happens to start with a bracket
    return true;
  }
  bool depth_ok = true;
  size_t end = json_value_end(pending_, i, &depth_ok);
  if (end == std::string::npos) {
    if (final) fail(pending_.size());
    return false;
  }
  std::vector<ParsedToolCall> calls;
  if (depth_ok && parse_calls(std::string_view(pending_).substr(i, end - i), calls)) {
    emit_calls(out, std::move(calls));
    pending_.erase(0, end);
    body_prefix_.clear();
  } else {
    fail(end);
  }
  return true;
}

bool ToolCallParser::parse_calls(std::string_view text, std::vector<ParsedToolCall>& calls) const {
  bool depth_ok = true;
  if (text.empty() || (text[0] != '{' && text[0] != '[') ||
      json_value_end(text, 0, &depth_ok) != text.size() || !depth_ok)
    return false;
  const ojson v = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return false;
  const bool strict = bare_body_;
  auto one = [&](const ojson& o) {
    if (!o.is_object()) return false;
    const ojson* fn = &o;
    // Some models echo the OpenAI shape: {"type": "function", "function": {...}}.
    if (auto f = o.find("function"); f != o.end() && f->is_object()) fn = &*f;
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      return false;
    const ojson* args = nullptr;
    for (const char* key : {"arguments", "parameters"}) {
      if (auto a = fn->find(key); a != fn->end()) {
        args = &*a;
        break;
      }
    }
    ParsedToolCall c;
    c.name = name->get<std::string>();
    if (!args || args->is_null()) {
      if (strict) return false;
      c.arguments = "{}";
    } else if (args->is_object()) {
      c.arguments = compact(*args);
    } else if (args->is_string()) {  // arguments already encoded as a JSON string
      const std::string& s = args->get_ref<const std::string&>();
      const ojson inner = ojson::parse(s, nullptr, false);
      if (inner.is_discarded() || !inner.is_object()) return false;
      c.arguments = compact(inner);
    } else {
      return false;
    }
    if (strict && !known_names_.count(c.name)) return false;
    calls.push_back(std::move(c));
    return true;
  };
  size_t before = calls.size();
  bool ok = true;
  if (v.is_array()) {
    ok = !v.empty();
    for (const ojson& e : v) ok = ok && one(e);
  } else {
    ok = one(v);
  }
  if (!ok) calls.resize(before);
  return ok;
}

ToolCallEvents parse_tool_calls(ToolCallFormat f, std::string_view text,
                                std::set<std::string> known_names) {
  ToolCallParser p(f, std::move(known_names));
  ToolCallEvents out = p.feed(text);
  ToolCallEvents rest = p.finish();
  out.content += rest.content;
  for (auto& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace pagoda::server
