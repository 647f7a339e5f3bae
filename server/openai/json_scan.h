// Scanning JSON text without parsing it: telling string contents apart from structure, for
// bracket counting (how deep a value nests, where an object that is still being streamed ends).
#pragma once

namespace pagoda::server {

// Follows JSON text one character at a time and says which characters are structure, i.e.
// outside every string literal. Escapes inside strings (\" and \\) are honoured.
class JsonStringSkipper {
 public:
  // Feeds the next character; true when it stands outside every string and is not a string's
  // opening or closing quote, so that a bracket here opens or closes a value.
  bool structural(char c) {
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
      return false;
    }
    if (c == '"') {
      in_string_ = true;
      return false;
    }
    return true;
  }

 private:
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace pagoda::server
