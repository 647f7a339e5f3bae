// Internal: the vocabulary with its non-ASCII bytes folded into UTF-8 byte classes, for walks
// of grammars that cannot tell the bytes of a class apart. A walk of the whole vocabulary over
// a bounded string (`maxLength`, a short key) visits every token it accepts, and most of those
// are other scripts' characters (a CJK character is three bytes); folded, the tens of
// thousands of such tokens become a few hundred distinct strings.
//
// Classes: each ASCII byte alone; above it the ranges a UTF-8 decoder tells apart (continuation
// 80-8F, 90-9F, A0-BF; leads C0-C1, C2-DF, E0, E1-EC, ED, EE-EF, F0, F1-F3, F4, F5-FF), each
// folded to its first byte. A grammar whose byte edges all start and end on class boundaries
// (every code point class that excludes no single non-ASCII character) steps every byte of a
// class alike, so a folded string gets the verdict of every token folding to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/structured/compiled_grammar.h"

namespace pagoda::structured {

// The byte class of `b`, as its first byte.
uint8_t utf8_class(uint8_t b);

// Whether every byte edge of `g` starts and ends on a class boundary.
bool edges_fold_utf8(const CompiledGrammar::Impl& g);

// The vocabulary's unique strings folded: distinct, sorted, with the unique strings folding to
// each (TokenVocabulary::Impl::folded).
struct FoldedStrings {
  std::vector<std::string> s;
  std::vector<uint32_t> lcp, lcp_drop;  // as TokenVocabulary::Impl's
  std::vector<uint32_t> begin;          // s[i]'s unique strings: unique[begin[i], begin[i + 1])
  std::vector<uint32_t> unique;
};
void fold_strings(const std::vector<std::string>& unique, FoldedStrings& out);

// Next smaller common prefix of a sorted list (TokenVocabulary::Impl::lcp_drop).
std::vector<uint32_t> lcp_drops(const std::vector<uint32_t>& lcp);

}  // namespace pagoda::structured
