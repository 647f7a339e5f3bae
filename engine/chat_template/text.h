// UTF-8 text helpers giving Python str semantics (code points, Unicode whitespace, simple
// case mapping) to std::string values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::jinja::text {

// Code points of s (an invalid byte decodes to itself, so nothing is lost).
std::vector<uint32_t> decode(const std::string& s);
std::string encode(const std::vector<uint32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
void append_utf8(std::string& out, uint32_t cp);
bool is_ascii(const std::string& s);
// Number of code points (Python len()).
size_t length(const std::string& s);

// Python str.isspace() for one code point.
bool is_space(uint32_t cp);
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);
bool is_alnum(uint32_t cp);

std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string title(const std::string& s);       // Python str.title()
std::string capitalize(const std::string& s);  // Python str.capitalize()

// Python ascii() of an already repr()-ed string: non-ASCII code points as \xhh, \uhhhh or
// \Uhhhhhhhh escapes.
std::string ascii_escape(const std::string& s);

// Python str.strip/lstrip/rstrip; `chars` null means whitespace.
std::string strip(const std::string& s, const std::string* chars, bool left, bool right);
// Python str.split(sep, maxsplit); `sep` null means runs of whitespace.
std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit);
// Python str.rsplit(sep, maxsplit): like split, but the splits happen from the right.
std::vector<std::string> rsplit(const std::string& s, const std::string* sep, int64_t maxsplit);
// Python str.replace(old, new, count); throws when the result would exceed `limit` bytes.
std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count, size_t limit);

}  // namespace pagoda::jinja::text
