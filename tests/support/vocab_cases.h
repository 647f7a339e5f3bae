// Reading the tokenizer cases of ../shared/testdata: beside each vocabulary VOCAB.gguf,
// VOCAB.gguf.inp holds the texts (separated by a marker line) and VOCAB.gguf.out their ids, one
// line each; and the ids printed back for a failure message.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/test_files.h"

namespace pagoda::testing {

// Splits on every occurrence of `sep` (so a trailing separator gives a final empty item).
inline std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos; (pos = s.find(sep, start)) != std::string::npos; start = pos + sep.size())
    out.push_back(s.substr(start, pos - start));
  out.push_back(s.substr(start));
  return out;
}

inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t v; in >> v;) ids.push_back(v);
  return ids;
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// The cases of the vocabulary file at `gguf_path`; throws when the two files disagree in count.
inline std::vector<VocabCase> read_vocab_cases(const std::string& gguf_path) {
  const auto inputs = split(read_file(gguf_path + ".inp"), "\n__ggml_vocab_test__\n");
  const auto outputs = split(read_file(gguf_path + ".out"), "\n");
  if (inputs.size() != outputs.size())
    throw std::runtime_error(gguf_path + ": " + std::to_string(inputs.size()) + " texts but " +
                             std::to_string(outputs.size()) + " id lines");
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < inputs.size(); ++i) cases.push_back({inputs[i], parse_ids(outputs[i])});
  return cases;
}

inline std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

}  // namespace pagoda::testing
