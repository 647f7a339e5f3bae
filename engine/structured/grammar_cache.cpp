// CompiledGrammarCache: bounded LRU of compiled grammars by content key, thread-safe.
#include <list>
#include <mutex>
#include <unordered_map>

#include "engine/structured/structured.h"

namespace pagoda::structured {

struct CompiledGrammarCache::Impl {
  size_t capacity = 64;
  mutable std::mutex mutex;
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru;
  std::unordered_map<std::string, decltype(lru)::iterator> index;
  size_t hits = 0, misses = 0;
};

CompiledGrammarCache::CompiledGrammarCache(size_t capacity) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = capacity ? capacity : 1;
}
CompiledGrammarCache::~CompiledGrammarCache() = default;

std::string CompiledGrammarCache::make_key(std::string_view kind, std::string_view key_text,
                                           const TokenVocabulary* vocab) {
  // The full text is the key (no collisions to worry about); the vocabulary by identity.
  std::string key;
  key.reserve(kind.size() + key_text.size() + 24);
  key += std::to_string(reinterpret_cast<uintptr_t>(vocab));
  key += '\0';
  key += kind;
  key += '\0';
  key += key_text;
  return key;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammarCache::lookup(const std::string& key) {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->index.find(key);
  if (it == impl_->index.end()) {
    ++impl_->misses;
    return nullptr;
  }
  ++impl_->hits;
  impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
  return it->second->second;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammarCache::insert(
    const std::string& key, std::shared_ptr<const CompiledGrammar> grammar) {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->index.find(key);
  if (it != impl_->index.end()) {
    // Another thread compiled it first: share that one (and its mask cache).
    impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
    return it->second->second;
  }
  impl_->lru.emplace_front(key, grammar);
  impl_->index.emplace(key, impl_->lru.begin());
  while (impl_->lru.size() > impl_->capacity) {
    impl_->index.erase(impl_->lru.back().first);
    impl_->lru.pop_back();
  }
  return grammar;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammarCache::get_or_compile_gbnf(
    std::string_view text, std::shared_ptr<const TokenVocabulary> vocab, const GrammarLimits& limits,
    std::string_view start_rule) {
  std::string key_text;
  key_text.reserve(text.size() + start_rule.size() + 64);
  key_text += start_rule;
  key_text += '\0';
  for (size_t v : {limits.max_text_bytes, limits.max_rules, limits.max_elements,
                   size_t{limits.max_repeat_count}, limits.max_nesting, limits.max_stacks,
                   limits.max_cached_positions}) {
    key_text += std::to_string(v);
    key_text += ',';
  }
  key_text += text;
  return get_or_compile("gbnf", key_text, vocab,
                        [&] { return compile_gbnf(text, vocab, limits, start_rule); });
}

size_t CompiledGrammarCache::size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->lru.size();
}
size_t CompiledGrammarCache::hits() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->hits;
}
size_t CompiledGrammarCache::misses() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->misses;
}
void CompiledGrammarCache::clear() {
  std::lock_guard lock(impl_->mutex);
  impl_->lru.clear();
  impl_->index.clear();
}

}  // namespace pagoda::structured
