// Regex parser and regex -> GBNF text (before the matcher exists: checks the text).
#include <catch2/catch.hpp>

#include "engine/structured/regex.h"

using namespace pagoda::structured;

TEST_CASE("regex_to_gbnf smoke") {
  for (const char* p : {"abc", "^a+b*$", "[a-z]{2,4}", "(foo|bar)?baz", "\\d{3}-\\d{4}", "[^\"\\\\]", "a|", "."})
    WARN(p << " => " << regex_to_gbnf(p));
}
