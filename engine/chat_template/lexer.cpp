// Tokenizer mirroring jinja2/lexer.py: the same whitespace rules (trim_blocks, lstrip_blocks,
// "-" and "+" modifiers), the same literal syntax and bracket balancing inside tags.
#include "engine/chat_template/lexer.h"

#include <cctype>
#include <cstring>

#include "engine/chat_template/chat_template.h"
#include "engine/chat_template/text.h"

namespace pagoda::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

[[noreturn]] void fail(const std::string& what, int line) {
  throw ChatTemplateError("template syntax error at line " + std::to_string(line) + ": " + what);
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(normalize(src)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      std::string text = src_.substr(pos_, tag - pos_);
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (sign != '-' && sign != '+') sign = 0;
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        text = lstrip_line(text);
      }
      emit_data(std::move(text), line_at(pos_));
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') lex_comment();
      else if (kind == '%' && try_raw(tag)) continue;
      else lex_tag(kind == '{');
    }
    tokens_.push_back({Tok::Eof, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  // jinja2 splits on \r\n, \r, \n and drops one trailing newline (keep_trailing_newline=False).
  static std::string normalize(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k] == '\r') {
        out += '\n';
        if (k + 1 < s.size() && s[k + 1] == '\n') ++k;
      } else {
        out += s[k];
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  int line_at(size_t p) {
    // Incremental: positions only move forward.
    while (line_pos_ < p && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_count_;
      ++line_pos_;
    }
    return line_count_;
  }
  size_t find_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && std::strchr("{%#", src_[p + 1])) return p;
    }
    return std::string::npos;
  }

  // lstrip_blocks: drop spaces/tabs between the last line start and a block or comment tag.
  std::string lstrip_line(const std::string& text) const {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    if (l_pos == text.size()) return text;
    for (size_t k = l_pos; k < text.size(); ++k)
      if (!is_space(text[k])) return text;
    return text.substr(0, l_pos);
  }

  void emit_data(std::string text, int line = 0) {
    if (!text.empty()) tokens_.push_back({Tok::Data, std::move(text), line ? line : line_at(pos_)});
  }

  // After a closing tag: "-" eats all following whitespace, "+" nothing, plain (trim_blocks)
  // one newline. Sets line_starting_ as jinja2 does (did the match end with a newline?).
  void after_close(char sign, bool trim_newline) {
    if (sign == '-') {
      size_t p = pos_;
      while (p < src_.size() && is_space(src_[p])) ++p;
      line_starting_ = p > pos_ && src_[p - 1] == '\n';
      pos_ = p;
    } else if (sign == 0 && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      line_starting_ = true;
    } else {
      line_starting_ = false;
    }
  }

  void lex_comment() {
    int start = line_at(pos_);
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("missing end of comment tag", start);
    char sign = 0;
    if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[end - 1];
    pos_ = end + 2;
    after_close(sign, true);
  }

  // {% raw %} ... {% endraw %}: the body is data, untouched.
  bool try_raw(size_t tag) {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    bool minus = p < src_.size() && src_[p] == '-';
    if (minus) ++p;
    if (src_.compare(p, 2, "%}") != 0) return false;
    p += 2;
    if (minus)
      while (p < src_.size() && is_space(src_[p])) ++p;
    int start = line_at(tag);
    // Find {%[-+]? endraw [-+]?%}
    for (size_t q = src_.find("{%", p); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      char close = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      std::string body = src_.substr(p, q - p);
      if (sign == '-') {
        while (!body.empty() && is_space(body.back())) body.pop_back();
      } else if (sign != '+') {
        line_starting_ = false;
        body = lstrip_line(body);
      }
      emit_data(std::move(body), line_at(p));
      pos_ = r + 2;
      after_close(close, true);
      return true;
    }
    fail("missing end of raw directive", start);
  }

  void lex_tag(bool variable) {
    tokens_.push_back({variable ? Tok::VarBegin : Tok::BlockBegin, "", line_at(pos_)});
    int start = line_at(pos_);
    std::string balance;
    while (true) {
      size_t ws = pos_;
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ > ws) line_starting_ = src_[pos_ - 1] == '\n';
      if (pos_ >= src_.size())
        fail(std::string("unexpected end of template inside ") + (variable ? "{{ }}" : "{% %}"), start);
      if (balance.empty() && close_tag(variable)) return;
      lex_token(balance);
    }
  }

  bool close_tag(bool variable) {
    const char* end = variable ? "}}" : "%}";
    char c = src_[pos_];
    if ((c == '-' || (c == '+' && !variable)) && src_.compare(pos_ + 1, 2, end) == 0) {
      pos_ += 3;
      tokens_.push_back({variable ? Tok::VarEnd : Tok::BlockEnd, "", line_at(pos_)});
      after_close(c, !variable);
      return true;
    }
    if (src_.compare(pos_, 2, end) == 0) {
      pos_ += 2;
      tokens_.push_back({variable ? Tok::VarEnd : Tok::BlockEnd, "", line_at(pos_)});
      after_close(0, !variable);
      return true;
    }
    return false;
  }

  void lex_token(std::string& balance) {
    int line = line_at(pos_);
    char c = src_[pos_];
    line_starting_ = false;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      tokens_.push_back({Tok::Name, src_.substr(b, pos_ - b), line});
      return;
    }
    if (c == '\'' || c == '"') {
      tokens_.push_back({Tok::String, lex_string(c, line), line});
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number(line);
      return;
    }
    static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                 "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(pos_, n, op) != 0) continue;
      if (n == 1 && std::strchr("([{", op[0])) balance.push_back(op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}');
      if (n == 1 && std::strchr(")]}", op[0])) {
        if (balance.empty()) fail(std::string("unexpected '") + op + "'", line);
        if (balance.back() != op[0])
          fail(std::string("unexpected '") + op + "', expected '" + balance.back() + "'", line);
        balance.pop_back();
      }
      pos_ += n;
      tokens_.push_back({Tok::Op, op, line});
      return;
    }
    fail(std::string("unexpected character '") + c + "'", line);
  }

  void lex_number(int line) {
    // 0x.. / 0o.. / 0b.. integers (with optional underscores), kept with their prefix.
    if (src_[pos_] == '0' && pos_ + 2 < src_.size() && std::strchr("xXoObB", src_[pos_ + 1]) != nullptr) {
      const char kind = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_ + 1])));
      auto valid = [kind](char ch) {
        if (kind == 'x') return std::isxdigit(static_cast<unsigned char>(ch)) != 0;
        return ch >= '0' && ch <= (kind == 'o' ? '7' : '1');
      };
      size_t p = pos_ + 2;
      std::string text = std::string("0") + kind;
      while (p < src_.size() && (valid(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && valid(src_[p + 1])))) {
        if (src_[p] != '_') text += src_[p];
        ++p;
      }
      if (text.size() > 2) {
        pos_ = p;
        tokens_.push_back({Tok::Int, text, line});
        return;
      }
    }
    size_t b = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    // A float needs digits after the dot; "1." is the integer 1 then ".". After a "." token
    // (as in foo.0) a number is never a float.
    bool after_dot = !tokens_.empty() && tokens_.back().type == Tok::Op && tokens_.back().text == ".";
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = b; k < pos_; ++k)
      if (src_[k] != '_') text += src_[k];
    tokens_.push_back({is_float ? Tok::Float : Tok::Int, text, line});
  }

  bool hex_escape(size_t len, std::string& out) {
    if (pos_ + len >= src_.size()) return false;
    uint32_t cp = 0;
    for (size_t k = 1; k <= len; ++k) {
      char h = src_[pos_ + k];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
      cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    if (cp > 0x10ffff) return false;
    text::append_utf8(out, cp);
    pos_ += len + 1;
    return true;
  }

  // Python "unicode-escape" decoding, as jinja2 applies to string literals.
  std::string lex_string(char quote, int line) {
    std::string out;
    ++pos_;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string literal", line);
      char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        return out;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= src_.size()) fail("unterminated string literal", line);
      char e = src_[++pos_];
      const char* simple = "\\'\"abfnrtv";
      const char* mapped = "\\'\"\a\b\f\n\r\t\v";
      if (const char* p = std::strchr(simple, e); p && e) {
        out += mapped[p - simple];
        ++pos_;
      } else if (e == '\n') {
        ++pos_;
      } else if (e >= '0' && e <= '7') {
        uint32_t cp = 0;
        for (int k = 0; k < 3 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
          cp = cp * 8 + (src_[pos_++] - '0');
        text::append_utf8(out, cp);
      } else if ((e == 'x' && hex_escape(2, out)) || (e == 'u' && hex_escape(4, out)) ||
                 (e == 'U' && hex_escape(8, out))) {
      } else if (e == 'x' || e == 'u' || e == 'U') {
        fail("invalid \\" + std::string(1, e) + " escape in string literal", line);
      } else {
        out += '\\';  // unknown escapes stay as written
      }
    }
  }

  std::string src_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_count_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "'end of print statement'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "'end of statement block'";
    case Tok::Eof: return "'end of template'";
    case Tok::String: return "string";
    default: return "'" + t.text + "'";
  }
}

}  // namespace pagoda::jinja
