// Incremental detokenization for streaming and stop-string matching across token boundaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda {

class Tokenizer;

// Turns a stream of token ids into text pieces that are always complete UTF-8 and, joined,
// equal tokenizer.decode(all ids) (each character emitted exactly once).
class IncrementalDetokenizer {
 public:
  // `prompt` gives context (e.g. SPM's leading-space rule); it is never emitted.
  IncrementalDetokenizer(const Tokenizer& tok, const std::vector<int32_t>& prompt);
  // Appends one token; returns the newly completed text (possibly empty).
  std::string push(int32_t token);
  // Text still held back (an incomplete UTF-8 tail), rendered with replacement characters.
  std::string flush();

 private:
  const Tokenizer& tok_;
  // Whether a token with visible text has been seen (prompt or output). The first such token
  // is rendered as decode({token}) so that start-of-text rules (SPM's dropped leading space)
  // apply exactly as in Tokenizer::decode.
  bool text_started_ = false;
  std::string pending_;  // bytes of a UTF-8 character not yet complete
};

// Finds stop strings in streamed text without leaking any part of a stop string to the client.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  // Feeds new text; returns the text that is now safe to emit. After a match, returns the text
  // before the stop string and matched() is true; further input is ignored.
  std::string feed(const std::string& text);
  // At the end of generation: whatever is still held back (no stop matched).
  std::string flush();
  bool matched() const { return matched_; }
  // The stop string that matched ("" before a match): the earliest in the text, the first
  // listed when two begin at the same place.
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace pagoda
