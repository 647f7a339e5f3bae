// TokenVocabulary: building the sorted index of token byte strings (token_vocabulary.h).
#include "engine/structured/token_vocabulary.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "engine/structured/loop_split.h"
#include "engine/structured/utf8_classes.h"

namespace pagoda::structured {

TokenVocabulary::TokenVocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenVocabulary::~TokenVocabulary() = default;

std::shared_ptr<const TokenVocabulary> TokenVocabulary::build(std::vector<std::string> token_bytes,
                                                              std::vector<bool> is_eog,
                                                              std::vector<bool> is_special) {
  size_t n = token_bytes.size();
  if (is_eog.size() != n || is_special.size() != n)
    throw std::invalid_argument("TokenVocabulary::build: is_eog/is_special sizes differ from the token count");
  if (n > static_cast<size_t>(INT32_MAX) / 2)
    throw std::invalid_argument("TokenVocabulary::build: too many tokens");
  auto impl = std::make_unique<Impl>();
  impl->token_bytes = std::move(token_bytes);
  impl->eog.resize(n);
  impl->special.resize(n);
  impl->unique_of_id.assign(n, -1);
  impl->words = (n + 31) / 32;
  std::vector<int32_t> order;
  for (size_t i = 0; i < n; ++i) {
    impl->eog[i] = is_eog[i];
    impl->special[i] = is_special[i];
    if (is_eog[i]) impl->eog_ids.push_back(static_cast<int32_t>(i));
    if (!is_eog[i] && !is_special[i] && !impl->token_bytes[i].empty())
      order.push_back(static_cast<int32_t>(i));
  }
  const auto& tb = impl->token_bytes;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    int c = tb[a].compare(tb[b]);
    return c != 0 ? c < 0 : a < b;
  });
  for (size_t k = 0; k < order.size(); ++k) {
    int32_t id = order[k];
    if (impl->unique.empty() || impl->unique.back() != tb[id]) {
      uint32_t l = 0;
      if (!impl->unique.empty()) {
        const std::string& prev = impl->unique.back();
        size_t m = std::min(prev.size(), tb[id].size());
        while (l < m && prev[l] == tb[id][l]) ++l;
      }
      impl->unique.push_back(tb[id]);
      impl->lcp.push_back(l);
      impl->ids_begin.push_back(static_cast<uint32_t>(impl->ids.size()));
    }
    impl->ids.push_back(id);
    impl->unique_of_id[id] = static_cast<int32_t>(impl->unique.size() - 1);
  }
  impl->ids_begin.push_back(static_cast<uint32_t>(impl->ids.size()));
  for (size_t u = 0; u < impl->unique.size(); ++u) {
    impl->tail_begin.push_back(static_cast<uint32_t>(impl->tails.size()));
    impl->tails.append(impl->unique[u], impl->lcp[u], std::string::npos);
  }
  impl->tail_begin.push_back(static_cast<uint32_t>(impl->tails.size()));
  impl->lcp_drop = lcp_drops(impl->lcp);
  fold_strings(impl->unique, impl->folded);
  impl->ascii_bytes.assign(2 * impl->unique.size(), 0);
  for (size_t k = 0; k < impl->unique.size(); ++k)
    for (unsigned char c : impl->unique[k])
      if (c < 0x80) impl->ascii_bytes[2 * k + (c >> 6)] |= uint64_t{1} << (c & 63);
  // First-byte groups.
  size_t u = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    impl->first_byte_begin[b] = static_cast<uint32_t>(u);
    while (u < impl->unique.size() && static_cast<uint8_t>(impl->unique[u][0]) == b) ++u;
  }
  impl->first_byte_begin[256] = static_cast<uint32_t>(u);
  prewarm_loop_splits(*impl);
  return std::make_shared<const TokenVocabulary>(std::move(impl));
}

int32_t TokenVocabulary::size() const { return static_cast<int32_t>(impl_->token_bytes.size()); }
size_t TokenVocabulary::mask_words() const { return impl_->words; }
const std::string& TokenVocabulary::token_bytes(int32_t id) const { return impl_->token_bytes.at(id); }
bool TokenVocabulary::is_eog(int32_t id) const { return impl_->eog.at(id) != 0; }
bool TokenVocabulary::is_special(int32_t id) const { return impl_->special.at(id) != 0; }
bool TokenVocabulary::extends(std::string_view bytes) const {
  const std::vector<std::string>& u = impl_->unique;
  auto it = std::upper_bound(u.begin(), u.end(), bytes, [](std::string_view b, const std::string& s) { return b < s; });
  // The strings after `bytes` in sorted order that start with it come first.
  return it != u.end() && it->size() > bytes.size() && it->compare(0, bytes.size(), bytes) == 0;
}

}  // namespace pagoda::structured
