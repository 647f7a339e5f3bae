// ChoiceText: the text side of one choice's output. Token ids become UTF-8-complete text
// (IncrementalDetokenizer), and text that may still begin a stop string is held back
// (StopStringMatcher), so the engine's deltas never carry a partial character or any part of a
// matched stop string. Runs on the engine thread; one per choice.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pagoda {

class Tokenizer;
class IncrementalDetokenizer;
class StopStringMatcher;

class ChoiceText {
 public:
  // `tok` null: no text at all (every piece is empty). `prompt` is the detokenizer's context;
  // `stop` the request's stop strings (may be empty).
  ChoiceText(const Tokenizer* tok, const std::vector<int32_t>& prompt, const std::vector<std::string>& stop);
  ~ChoiceText();
  ChoiceText(ChoiceText&&) noexcept;
  ChoiceText& operator=(ChoiceText&&) noexcept;

  // The text a new token makes safe to emit. `stop_token`: the token ended the sequence
  // (EOS/EOG or stop_token_ids) and is not part of the text.
  std::string push(int32_t token, bool stop_token);
  // True once a stop string matched: the sequence ends with "stop", and no more text follows.
  bool stopped() const;
  // The stop string that matched ("" when none did).
  std::string stop_string() const;
  // The sequence has ended: whatever is still held back (the detokenizer's incomplete tail,
  // text that no stop string completed), unless a stop string matched before. A stop string
  // completed by the tail cuts it there (then stopped() turns true).
  std::string finish();

 private:
  std::unique_ptr<IncrementalDetokenizer> detok_;
  std::unique_ptr<StopStringMatcher> stop_;
};

}  // namespace pagoda
