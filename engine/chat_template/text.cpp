// Unicode handling kept deliberately small: UTF-8 coding, Python's whitespace set and the
// case mappings of the Latin-1, Latin Extended-A, Greek and Cyrillic blocks.
#include "engine/chat_template/text.h"

#include <algorithm>
#include <cstdio>

#include "engine/chat_template/chat_template.h"

namespace pagoda::jinja::text {

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    unsigned char c = s[k];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t cp = n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : n == 4 ? (c & 0x07) : c;
    bool ok = n != 0 && k + n <= s.size();
    for (size_t m = 1; ok && m < n; ++m) {
      unsigned char cc = s[k + m];
      if ((cc >> 6) != 2) ok = false;
      else cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      // Keep a stray byte as a "code point" >= 0x110000 so that encode() restores the byte.
      out.push_back(0x110000u + c);
      ++k;
      continue;
    }
    out.push_back(cp);
    k += n;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0x110000) {
    out += static_cast<char>(cp - 0x110000);
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  end = std::min(end, cps.size());
  for (size_t k = begin; k < end; ++k) append_utf8(out, cps[k]);
  return out;
}

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

size_t length(const std::string& s) {
  if (is_ascii(s)) return s.size();
  return decode(s).size();
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

uint32_t to_upper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if ((cp >= 0xe0 && cp <= 0xfe && cp != 0xf7)) return cp - 32;
  if (cp == 0xff) return 0x178;
  if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17f) {
    // Latin Extended-A alternates upper/lower, with the parity flipped in 0x139..0x148 and 0x179..0x17e.
    bool flipped = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e);
    bool is_lower = flipped ? (cp % 2 == 0) : (cp % 2 == 1);
    return is_lower ? cp - 1 : cp;
  }
  if (cp >= 0x3b1 && cp <= 0x3c9 && cp != 0x3c2) return cp - 32;
  if (cp == 0x3c2) return 0x3a3;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
  return cp;
}

uint32_t to_lower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) return cp + 32;
  if (cp == 0x178) return 0xff;
  if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17f) {
    bool flipped = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e);
    bool is_upper = flipped ? (cp % 2 == 1) : (cp % 2 == 0);
    return is_upper ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
  return cp;
}

bool is_alnum(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (cp >= 0x110000) return false;
  // Letters outside ASCII: anything with a case mapping, plus CJK and other scripts treated as
  // letters (Python's str.title() treats them as cased only when they have case; close enough).
  return to_upper(cp) != cp || to_lower(cp) != cp || cp == 0xdf;
}

static std::string map_cps(const std::string& s, uint32_t (*f)(uint32_t)) {
  if (is_ascii(s)) {
    std::string out = s;
    for (auto& c : out) c = static_cast<char>(f(static_cast<unsigned char>(c)));
    return out;
  }
  auto cps = decode(s);
  for (auto& cp : cps) cp = f(cp);
  return encode(cps);
}

std::string upper(const std::string& s) {
  if (s.find("\xc3\x9f") == std::string::npos) return map_cps(s, to_upper);
  // German sharp s has no single-letter capital: Python upper-cases it to "SS".
  auto cps = decode(s);
  std::string out;
  for (uint32_t cp : cps) {
    if (cp == 0xdf) out += "SS";
    else append_utf8(out, to_upper(cp));
  }
  return out;
}
std::string lower(const std::string& s) { return map_cps(s, to_lower); }

std::string title(const std::string& s) {
  auto cps = decode(s);
  bool prev_cased = false;
  for (auto& cp : cps) {
    bool cased = is_alnum(cp) && !(cp >= '0' && cp <= '9');
    if (cased) cp = prev_cased ? to_lower(cp) : to_upper(cp);
    prev_cased = cased;
  }
  return encode(cps);
}

std::string capitalize(const std::string& s) {
  auto cps = decode(s);
  for (size_t k = 0; k < cps.size(); ++k) cps[k] = k == 0 ? to_upper(cps[k]) : to_lower(cps[k]);
  return encode(cps);
}

std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto cps = decode(s);
  std::vector<uint32_t> set;
  if (chars) set = decode(*chars);
  auto drop = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_space(cp);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && drop(cps[b])) ++b;
  if (right)
    while (e > b && drop(cps[e - 1])) --e;
  return encode(cps, b, e);
}

std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw ChatTemplateError("split: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t p = s.find(*sep, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + sep->size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  auto cps = decode(s);
  size_t k = 0, n = cps.size();
  while (true) {
    while (k < n && is_space(cps[k])) ++k;
    if (k >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > k && is_space(cps[e - 1])) --e;
      out.push_back(encode(cps, k, e));
      break;
    }
    size_t b = k;
    while (k < n && !is_space(cps[k])) ++k;
    out.push_back(encode(cps, b, k));
  }
  return out;
}

std::vector<std::string> rsplit(const std::string& s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);  // same result when nothing is limited
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw ChatTemplateError("rsplit: empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t p = s.rfind(*sep, end - sep->size());
      if (p == std::string::npos) break;
      out.push_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.push_back(s.substr(0, end));
  } else {
    auto cps = decode(s);
    size_t e = cps.size();
    while (true) {
      while (e > 0 && is_space(cps[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(encode(cps, 0, e));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_space(cps[b - 1])) --b;
      out.push_back(encode(cps, b, e));
      e = b;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count, size_t limit) {
  std::string out;
  auto check = [&] {
    if (out.size() > limit) throw ChatTemplateError("replace: result larger than the output limit");
  };
  if (from.empty()) {
    // Python inserts `to` between every code point and at both ends.
    auto cps = decode(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cps.size()) append_utf8(out, cps[k]);
      check();
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    check();
    start = p + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  check();
  return out;
}

std::string ascii_escape(const std::string& s) {
  std::string out;
  for (uint32_t cp : decode(s)) {
    char buf[16];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
      continue;
    }
    if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
    else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
    out += buf;
  }
  return out;
}

}  // namespace pagoda::jinja::text
