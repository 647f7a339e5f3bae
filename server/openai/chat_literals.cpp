#include "server/openai/chat_literals.h"

#include <algorithm>

namespace pagoda::server {

namespace {

constexpr std::string_view kOpen = "\xF3\xB0\x80\x80";   // U+F0000
constexpr std::string_view kClose = "\xF3\xB0\x80\x81";  // U+F0001

void append_placeholder(std::string_view bytes, std::string& out) {
  static const char* const kHex = "0123456789abcdef";
  out += kOpen;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  out += kClose;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;  // a template may upper-case the text
  return -1;
}

// Decodes the placeholder starting at `pos` (at kOpen) into `bytes`; its length, or 0 when
// the text there is not a whole placeholder.
size_t decode_placeholder(std::string_view s, size_t pos, std::string& bytes) {
  size_t p = pos + kOpen.size();
  bytes.clear();
  while (p + 1 < s.size() && s.compare(p, kClose.size(), kClose) != 0) {
    const int hi = hex_value(s[p]), lo = hex_value(s[p + 1]);
    if (hi < 0 || lo < 0) return 0;
    bytes += static_cast<char>(hi * 16 + lo);
    p += 2;
  }
  if (s.compare(p, kClose.size(), kClose) != 0 || bytes.empty()) return 0;
  return p + kClose.size() - pos;
}

}  // namespace

ChatLiterals::ChatLiterals(const std::vector<std::string>& control_texts) {
  for (const std::string& t : control_texts) {
    if (t.empty()) continue;
    texts_.push_back(t);
    max_len_ = std::max(max_len_, t.size());
    for (size_t k = 1; k < t.size(); ++k) {
      prefixes_.insert(t.substr(0, k));
      suffixes_.insert(t.substr(t.size() - k));
    }
  }
  std::sort(texts_.begin(), texts_.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  texts_.erase(std::unique(texts_.begin(), texts_.end()), texts_.end());
}

size_t ChatLiterals::match_at(std::string_view s, size_t pos) const {
  for (const std::string& t : texts_)
    if (s.compare(pos, t.size(), t) == 0) return t.size();
  return 0;
}

std::string ChatLiterals::escape_string(std::string_view s) const {
  if (texts_.empty()) return std::string(s);
  const size_t n = s.size();
  // The longest head that ends a control text, the longest tail that starts one.
  size_t head = 0, tail = 0;
  for (size_t k = std::min(n, max_len_ - 1); k > 0 && head == 0; --k)
    if (suffixes_.count(std::string(s.substr(0, k)))) head = k;
  for (size_t k = std::min(n, max_len_ - 1); k > 0 && tail == 0; --k)
    if (prefixes_.count(std::string(s.substr(n - k)))) tail = k;
  std::string out;
  out.reserve(n + 16);
  size_t i = 0;
  if (head > 0) {
    append_placeholder(s.substr(0, head), out);
    i = head;
  }
  const size_t body_end = n - std::min(tail, n - i);
  while (i < body_end) {
    size_t len = match_at(s, i);
    if (len == 0 && s.compare(i, kOpen.size(), kOpen) == 0) len = kOpen.size();
    if (len > 0) {
      append_placeholder(s.substr(i, len), out);
      i += len;
    } else {
      out += s[i++];
    }
  }
  if (i < n) append_placeholder(s.substr(i), out);
  return out;
}

nlohmann::ordered_json ChatLiterals::escape(const nlohmann::ordered_json& v) const {
  if (v.is_string()) return escape_string(v.get_ref<const std::string&>());
  if (v.is_array()) {
    nlohmann::ordered_json out = v;
    for (auto& item : out) item = escape(item);
    return out;
  }
  if (v.is_object()) {
    // A role or a part's type is a name the template compares, never free text (the parser
    // admits known values only).
    nlohmann::ordered_json out = v;
    for (auto& [key, item] : out.items())
      if (key != "role" && key != "type") item = escape(item);
    return out;
  }
  return v;
}

ChatLiterals::Restored ChatLiterals::restore(std::string_view rendered) const {
  Restored r;
  r.text.reserve(rendered.size());
  std::string bytes;
  for (size_t i = 0; i < rendered.size();) {
    if (rendered.compare(i, kOpen.size(), kOpen) == 0) {
      if (const size_t len = decode_placeholder(rendered, i, bytes)) {
        const size_t begin = r.text.size();
        r.text += bytes;
        if (!r.plain.empty() && r.plain.back().second == begin) r.plain.back().second = r.text.size();
        else r.plain.emplace_back(begin, r.text.size());
        i += len;
        continue;
      }
    }
    r.text += rendered[i++];
  }
  return r;
}

}  // namespace pagoda::server
