// JSON Schema strings (minLength/maxLength, pattern, format via json_schema_formats.cpp) and
// numbers (integer ranges as exact digit grammars, bounded decimals) as GBNF.
#include <algorithm>

#include "engine/structured/json_schema_internal.h"
#include "engine/structured/regex.h"

namespace pagoda::structured::schema_detail {

namespace {

// ---- decimal numbers as digit strings --------------------------------------------------

// |value| = int_digits.frac_digits, int without leading zeros ("0" for zero), frac without
// trailing zeros.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
};

Decimal parse_decimal(const Json& value, const std::string& path) {
  if (!value.is_number()) throw SchemaError(path, "must be a number");
  std::string text = value.dump();
  Decimal d;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') d.negative = true, ++i;
  std::string mantissa;
  long long point = -1, exponent = 0;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') point = (long long)mantissa.size();
    else mantissa += text[i];
  }
  if (point < 0) point = (long long)mantissa.size();
  if (i < text.size()) exponent = std::stoll(text.substr(i + 1));
  if (exponent > 40 || exponent < -40) throw SchemaError(path, "number bound out of the supported range");
  point += exponent;
  while (point < 0) mantissa.insert(mantissa.begin(), '0'), ++point;
  while ((long long)mantissa.size() < point) mantissa += '0';
  d.int_digits = mantissa.substr(0, size_t(point));
  d.frac_digits = mantissa.substr(size_t(point));
  while (d.int_digits.size() > 1 && d.int_digits[0] == '0') d.int_digits.erase(0, 1);
  if (d.int_digits.empty()) d.int_digits = "0";
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.is_zero()) d.negative = false;
  return d;
}

// Signed comparison of two decimals: -1, 0, 1.
int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int mag;
  if (a.int_digits.size() != b.int_digits.size()) mag = a.int_digits.size() < b.int_digits.size() ? -1 : 1;
  else if (a.int_digits != b.int_digits) mag = a.int_digits < b.int_digits ? -1 : 1;
  else if (a.frac_digits != b.frac_digits) mag = a.frac_digits < b.frac_digits ? -1 : 1;
  else mag = 0;
  return a.negative ? -mag : mag;
}

constexpr long long kIntLimit = 1000000000000000000LL;  // 1e18: bounds kept within int64

long long int_part(const Decimal& d, const std::string& path) {
  if (d.int_digits.size() > 18) throw SchemaError(path, "number bound above 1e18 is not supported");
  long long v = std::stoll(d.int_digits);
  return d.negative ? -v : v;
}

struct Bound {
  Decimal value;
  bool exclusive = false;
};

std::string digits_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return std::string("[") + lo + "-" + hi + "]";
}

std::string any_digits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return "[0-9]" + repeat_suffix(n, n);
}

// Digit strings of equal length between lo and hi (inclusive), leading zeros allowed.
std::string same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  size_t rest = lo.size() - 1;
  if (lo[0] == hi[0]) return seq({digits_class(lo[0], lo[0]), same_length_range(lo.substr(1), hi.substr(1))});
  bool lo_rest_min = lo.find_first_not_of('0', 1) == std::string::npos;
  bool hi_rest_max = hi.find_first_not_of('9', 1) == std::string::npos;
  if (lo_rest_min && hi_rest_max) return seq({digits_class(lo[0], hi[0]), any_digits(rest)});
  std::vector<std::string> alts;
  char first_full = lo_rest_min ? lo[0] : char(lo[0] + 1);
  char last_full = hi_rest_max ? hi[0] : char(hi[0] - 1);
  if (!lo_rest_min)
    alts.push_back(seq({digits_class(lo[0], lo[0]), same_length_range(lo.substr(1), std::string(rest, '9'))}));
  if (first_full <= last_full) alts.push_back(seq({digits_class(first_full, last_full), any_digits(rest)}));
  if (!hi_rest_max)
    alts.push_back(seq({digits_class(hi[0], hi[0]), same_length_range(std::string(rest, '0'), hi.substr(1))}));
  return *alternatives(alts);
}

// Non-negative integers in [lo, hi] (hi nullopt = unbounded), written without leading zeros.
std::string natural_range(long long lo, std::optional<long long> hi) {
  std::string a = std::to_string(lo);
  std::vector<std::string> alts;
  size_t last_len = hi ? std::to_string(*hi).size() : a.size();
  for (size_t len = a.size(); len <= last_len; ++len) {
    std::string from = a;
    if (len != a.size()) from = std::string(1, '1').append(len - 1, '0');
    std::string to = (hi && len == last_len) ? std::to_string(*hi) : std::string(len, '9');
    alts.push_back(same_length_range(from, to));
  }
  if (!hi) alts.push_back(seq({"[1-9]", std::string("[0-9]") + repeat_suffix(a.size(), std::nullopt)}));
  return *alternatives(alts);
}

// Integers in [lo, hi]; either end may be open. nullopt when empty.
Expr integer_range(std::optional<long long> lo, std::optional<long long> hi) {
  if (lo && hi && *lo > *hi) return std::nullopt;
  std::vector<std::string> alts;
  // Non-negative part.
  if (!hi || *hi >= 0) alts.push_back(natural_range(lo ? std::max(*lo, 0LL) : 0, hi));
  // Negative part: magnitudes in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    long long mag_lo = (hi && *hi < 0) ? -*hi : 1;
    std::optional<long long> mag_hi;
    if (lo) mag_hi = -*lo;
    alts.push_back(seq({"\"-\"", std::string("(") + natural_range(mag_lo, mag_hi) + ")"}));
  }
  return alternatives(alts);
}

const std::string kAnyFraction = "( \".\" [0-9]+ )?";

// Digits D[k..] (possibly none) with 0.D[k..] >= 0.F[k..] (> when strict).
std::string digits_at_least(const std::string& f, size_t k0, bool strict) {
  std::string tail = strict ? "[0-9]* [1-9] [0-9]*" : "[0-9]*";
  for (size_t k = f.size(); k-- > k0;) {
    std::vector<std::string> alts;
    if (f[k] < '9') alts.push_back(seq({digits_class(char(f[k] + 1), '9'), "[0-9]*"}));
    alts.push_back(seq({digits_class(f[k], f[k]), tail}));
    tail = *alternatives(alts);
  }
  return tail;
}

// Digits D[k..] with 0.D[k..] <= 0.F[k..] (< when strict); the digits may stop anywhere after
// k0 when `stop_at_k0` (the rest of F is then larger than the zeros D leaves), or from k0 + 1
// on otherwise. nullopt when nothing fits.
Expr digits_at_most(const std::string& f, size_t k0, bool strict, bool stop_at_k0) {
  Expr tail = strict ? Expr(std::nullopt) : Expr("\"0\"*");
  for (size_t k = f.size(); k-- > k0;) {
    std::vector<std::string> alts;
    if (f[k] > '0') alts.push_back(seq({digits_class('0', char(f[k] - 1)), "[0-9]*"}));
    if (tail) alts.push_back(seq({digits_class(f[k], f[k]), *tail}));
    if (k > k0 || stop_at_k0) alts.push_back("");
    tail = alternatives(alts);
  }
  return tail;
}

// Fraction (".ddd" or nothing) whose value is >= (or >) 0.F.
std::string fraction_at_least(const std::string& f, bool strict) {
  if (f.empty() && !strict) return kAnyFraction;
  return seq({"\".\"", digits_at_least(f, 0, strict)});
}

// Fraction whose value is <= (or <) 0.F. nullopt when none is (strict and F = 0).
Expr fraction_at_most(const std::string& f, bool strict) {
  if (f.empty()) return strict ? Expr(std::nullopt) : Expr("( \".\" \"0\"+ )?");
  return "( " + seq({"\".\"", *digits_at_most(f, 0, strict, false)}) + " )?";
}

// Fraction whose value lies between 0.L and 0.H (bounds strict or not). nullopt if none.
Expr fraction_between(const std::string& l, bool l_strict, const std::string& h, bool h_strict) {
  if (l == h) {
    if (l_strict || h_strict) return std::nullopt;
    return l.empty() ? Expr("( \".\" \"0\"+ )?") : Expr(seq({std::string("\".") + l + "\"", "\"0\"*"}));
  }
  auto digit = [](const std::string& f, size_t k) { return k < f.size() ? f[k] : '0'; };
  size_t j = 0;
  while (digit(l, j) == digit(h, j)) ++j;  // they differ before h ends (h has no trailing 0s)
  if (digit(l, j) > digit(h, j)) return std::nullopt;
  // Stopping after k digits (value L exactly) is fine when L has ended by then.
  auto may_stop = [&](size_t k) { return !l_strict && k >= l.size() && k >= 1; };
  std::vector<std::string> alts;
  alts.push_back(seq({digits_class(digit(l, j), digit(l, j)), digits_at_least(l, j + 1, l_strict)}));
  if (digit(l, j) + 1 <= digit(h, j) - 1)
    alts.push_back(seq({digits_class(char(digit(l, j) + 1), char(digit(h, j) - 1)), "[0-9]*"}));
  if (Expr upper = digits_at_most(h, j + 1, h_strict, true))
    alts.push_back(seq({digits_class(h[j], h[j]), *upper}));
  if (may_stop(j)) alts.push_back("");
  std::string node = *alternatives(alts);
  for (size_t k = j; k-- > 0;) {
    std::vector<std::string> prefix_alts = {seq({digits_class(h[k], h[k]), node})};
    if (may_stop(k)) prefix_alts.push_back("");
    node = *alternatives(prefix_alts);
  }
  std::string fraction = seq({"\".\"", node});
  if (!l_strict && l.empty()) return "( " + fraction + " )?";
  return fraction;
}

// Non-negative decimals y = M.F (no exponent) with lower <= y <= upper (either optional).
Expr magnitude_range(const std::optional<Bound>& lower, const std::optional<Bound>& upper,
                     const std::string& path) {
  long long lo_int = lower ? int_part(lower->value, path) : 0;
  std::optional<long long> hi_int;
  if (upper) hi_int = int_part(upper->value, path);
  std::vector<std::string> alts;
  auto whole = [](long long v) { return gbnf_literal(std::to_string(v)); };
  if (hi_int && *hi_int < lo_int) return std::nullopt;
  if (hi_int && *hi_int == lo_int) {
    Expr frac = fraction_between(lower ? lower->value.frac_digits : "", lower && lower->exclusive,
                                 upper->value.frac_digits, upper->exclusive);
    if (!frac) return std::nullopt;
    return seq({whole(lo_int), *frac});
  }
  // M == lo_int with the fraction at least the lower bound's.
  alts.push_back(seq({whole(lo_int), lower ? fraction_at_least(lower->value.frac_digits, lower->exclusive)
                                           : kAnyFraction}));
  // lo_int < M < hi_int: any fraction.
  if (!hi_int || *hi_int - 1 >= lo_int + 1) {
    std::optional<long long> mid_hi;
    if (hi_int) mid_hi = *hi_int - 1;
    alts.push_back(seq({std::string("(") + natural_range(lo_int + 1, mid_hi) + ")", kAnyFraction}));
  }
  // M == hi_int with the fraction at most the upper bound's.
  if (hi_int) {
    Expr frac = fraction_at_most(upper->value.frac_digits, upper->exclusive);
    if (frac) alts.push_back(seq({whole(*hi_int), *frac}));
  }
  return alternatives(alts);
}

Decimal negate(Decimal d) {
  if (!d.is_zero()) d.negative = !d.negative;
  return d;
}

}  // namespace

Expr SchemaConverter::build_string(const Json& schema, const std::string& path) {
  std::optional<uint64_t> min_len = count_keyword(schema, "minLength", path, options_.max_repeat);
  std::optional<uint64_t> max_len = count_keyword(schema, "maxLength", path, options_.max_repeat);
  if (min_len && max_len && *min_len > *max_len) return std::nullopt;
  const std::string quote = "\"\\\"\"";
  auto lengths_implied = [&](uint64_t lo, std::optional<uint64_t> hi) {
    return (!min_len || *min_len <= lo) && (!max_len || (hi && *hi <= *max_len));
  };
  if (schema.contains("format")) {
    const Json& f = schema["format"];
    if (!f.is_string()) throw SchemaError(path + "/format", "format must be a string");
    std::optional<FormatRule> format = format_rule(f.get<std::string>());
    if (!format)
      throw SchemaError(path + "/format", std::string("format '") + f.get<std::string>() +
                                              "' is not supported (date, time, date-time, email, "
                                              "hostname, ipv4, uuid, uri are)");
    // Beside a pattern, exclusions or bounds it does not imply: the automata intersected.
    if (schema.contains("pattern") || schema.contains(kExcludedStrings) || schema.contains(kExcludedPatterns) ||
        !lengths_implied(format->min_len, format->max_len))
      return pattern_string(schema, min_len, max_len, path);
    return add_rule(path + "-" + f.get<std::string>(), seq({quote, format->rule, quote}));
  }
  if (schema.contains(kExcludedStrings) || schema.contains(kExcludedPatterns))
    return pattern_string(schema, min_len, max_len, path);
  if (schema.contains("pattern")) {
    const Json& p = schema["pattern"];
    if (!p.is_string()) throw SchemaError(path + "/pattern", "pattern must be a string");
    RegexNode tree;
    std::vector<std::string> alts;
    try {
      tree = parse_regex(p.get<std::string>(), options_.max_repeat, RegexClasses::Narrow);
      uint64_t expanded = regex_expanded_size(tree);
      if (expanded > kMaxRegexExpandedSize)
        throw RegexError("pattern too large once its repetitions are expanded", 0);
      expanded_cost_ += expanded;
      charge_repeat(0, "", path + "/pattern");  // checks the running total
      for (auto& branch : split_anchors(tree)) {
        auto [lo, hi] = regex_length_range(branch.body);
        if (!branch.anchored_start || !branch.anchored_end) hi = std::nullopt;
        if (!lengths_implied(lo, hi)) {
          // ^[set]{m,n}$ style: fold the length bounds into the one repeat.
          RegexNode& body = branch.body;
          RegexNode* rep = nullptr;
          uint64_t fixed = 0;
          bool simple = branch.anchored_start && branch.anchored_end;
          std::vector<RegexNode*> parts;
          if (body.kind == RegexNode::Kind::Concat) for (auto& c : body.children) parts.push_back(&c);
          else parts.push_back(&body);
          for (RegexNode* part : parts) {
            auto [plo, phi] = regex_length_range(*part);
            if (part->kind == RegexNode::Kind::Repeat && part->children[0].kind == RegexNode::Kind::Chars && !rep) {
              rep = part;
            } else if (phi && *phi == plo) {
              fixed += plo;
            } else {
              simple = false;
            }
          }
          // Otherwise the exact intersection, as an automaton.
          if (!simple || !rep) return pattern_string(schema, min_len, max_len, path);
          uint64_t new_min = rep->min, new_max = rep->max ? *rep->max : UINT64_MAX;
          if (min_len && *min_len > fixed) new_min = std::max<uint64_t>(new_min, *min_len - fixed);
          if (max_len) new_max = std::min<uint64_t>(new_max, *max_len >= fixed ? *max_len - fixed : 0);
          if ((max_len && *max_len < fixed) || new_min > new_max) continue;  // branch can't fit
          if (new_max != UINT64_MAX) charge_repeat(new_max, "x", path + "/maxLength");
          rep->min = uint32_t(new_min);
          rep->max = new_max == UINT64_MAX ? std::nullopt : std::optional<uint32_t>(uint32_t(new_max));
        }
        std::string any = branch.anchored_start && branch.anchored_end ? "" : primitive("json-char") + "*";
        alts.push_back(seq({branch.anchored_start ? "" : any,
                            regex_tree_to_gbnf(branch.body, RegexTarget::JsonStringContent),
                            branch.anchored_end ? "" : any}));
      }
    } catch (const RegexError& e) {
      // Anchors inside the pattern: the automaton treats them as assertions.
      if (std::string(e.what()).find("anchor") != std::string::npos)
        return pattern_string(schema, min_len, max_len, path);
      throw SchemaError(path + "/pattern", std::string("pattern: ") + e.what() + " (at byte " +
                                               std::to_string(e.offset) + ")");
    }
    Expr body = alternatives(alts);
    if (!body) return std::nullopt;
    return add_rule(path + "-pattern", seq({quote, body->empty() ? "" : std::string("(") + *body + ")", quote}));
  }
  if (!min_len && !max_len) return primitive("json-string");
  uint64_t lo = min_len.value_or(0);
  if (max_len && *max_len == 0) return add_rule(path + "-string", seq({quote, quote}));
  std::string count = repeat_suffix(lo, max_len);
  charge_repeat(max_len.value_or(lo), "x", path + (max_len ? "/maxLength" : "/minLength"));
  return add_rule(path + "-string", seq({quote, primitive("json-char") + count, quote}));
}

// Integers that are multiples of k within [lo, hi] (either end open). Unbounded sides use
// decimal digits tracked by their remainder mod k: one rule per remainder (state r, digit d ->
// (10 r + d) mod k), the end allowed at remainder 0. The multiples between the bound and zero
// are listed (at most kMaxListedMultiples of them); a positive lower or negative upper bound
// needs a finite range.
Expr SchemaConverter::multiple_of(const Json& schema, const std::string& path, std::optional<long long> lo,
                                  std::optional<long long> hi) {
  constexpr long long kMaxListedMultiples = 256;
  const Json& m = schema["multipleOf"];
  const std::string at = path + "/multipleOf";
  bool whole = (m.is_number_integer() && m.get<long long>() > 0) ||
               (m.is_number_float() && m.get<double>() > 0 && m.get<double>() == double(int64_t(m.get<double>())));
  if (!whole) throw SchemaError(at, "multipleOf is only supported as a positive integer (integers are written)");
  uint64_t k = m.is_number_float() ? uint64_t(m.get<double>()) : m.get<uint64_t>();
  if (k > 1000) throw SchemaError(at, "multipleOf above 1000 is not supported");
  long long kk = (long long)k;
  auto floor_div = [](long long a, long long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  // The listed multiples q*k for q in [q_lo, q_hi].
  auto listed = [&](long long q_lo, long long q_hi, std::vector<std::string>& alts) {
    if (q_hi < q_lo) return;
    if (q_hi - q_lo + 1 > kMaxListedMultiples)
      throw SchemaError(at, "multipleOf together with bounds that leave more than " +
                                std::to_string(kMaxListedMultiples) + " multiples between a bound and 0 is not supported");
    for (long long q = q_lo; q <= q_hi; ++q) alts.push_back("\"" + std::to_string(q * kk) + "\"");
  };
  std::vector<std::string> alts;
  if (lo && hi) {
    listed(-floor_div(-*lo, kk), floor_div(*hi, kk), alts);
    return alternatives(alts);
  }
  if ((lo && *lo > 0) || (hi && *hi < 0))
    throw SchemaError(at, "multipleOf with a positive minimum or negative maximum and no bound on the other side "
                          "is not supported");
  std::string magnitude;  // a positive multiple of k, digits by remainder
  if (k == 1) {
    magnitude = "[1-9] [0-9]*";
  } else {
    std::vector<std::string> names;
    for (uint64_t r = 0; r < k; ++r)
      names.push_back(fresh_name(path + "-mod" + std::to_string(k) + "-r" + std::to_string(r)));
    for (uint64_t r = 0; r < k; ++r) {
      std::vector<std::string> digits;
      if (r == 0) digits.push_back("");
      for (int d = 0; d <= 9; ++d)
        digits.push_back(seq({"\"" + std::to_string(d) + "\"", names[(10 * r + uint64_t(d)) % k]}));
      std::string body = *alternatives(digits);
      rules_.emplace_back(names[r], body);
      grammar_bytes_ += names[r].size() + body.size() + 6;
    }
    std::vector<std::string> first;
    for (int d = 1; d <= 9; ++d) first.push_back(seq({"\"" + std::to_string(d) + "\"", names[uint64_t(d) % k]}));
    magnitude = *alternatives(first);
  }
  std::string positive = add_rule(path + "-multiple-pos", magnitude);
  alts.push_back("\"0\"");
  if (lo) listed(-floor_div(-*lo, kk), -1, alts);  // lo <= 0: the negatives down to it
  else alts.push_back(seq({"\"-\"", positive}));
  if (hi) listed(1, floor_div(*hi, kk), alts);     // hi >= 0: the positives up to it
  else alts.push_back(positive);
  return add_rule(path + "-multiple", *alternatives(alts));
}

Expr SchemaConverter::build_number(const Json& schema, const std::string& path, bool integer_only) {
  if (schema.contains(kNonInteger) && integer_only) return std::nullopt;
  if (schema.contains(kNonInteger)) {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
      if (schema.contains(k))
        throw SchemaError(path + "/" + k, std::string("non-integer numbers beside '") + k + "' are not supported");
    // At most 15 digits in all, so the double a validator reads keeps a fraction.
    std::vector<std::string> alts;
    for (int whole = 1; whole <= 14; ++whole)
      alts.push_back(seq({whole == 1 ? "[0-9]" : "[1-9] [0-9]" + repeat_suffix(whole - 1, whole - 1), "\".\"",
                          whole == 14 ? "" : "[0-9]" + repeat_suffix(0, 14 - whole), "[1-9]"}));
    return add_rule(path + "-fraction", seq({"\"-\"?", "(" + *alternatives(alts) + ")"}));
  }
  // Only integers are written for a multipleOf (a subset of the numbers it allows).
  if (schema.contains("multipleOf")) integer_only = true;
  std::optional<Bound> lower, upper;
  auto tighten = [&](const char* key, bool is_lower, bool exclusive) {
    if (!schema.contains(key)) return;
    const Json& v = schema[key];
    if (v.is_boolean())
      throw SchemaError(path + "/" + key, "boolean exclusiveMinimum/exclusiveMaximum (draft 4) is not supported");
    Bound b{parse_decimal(v, path + "/" + key), exclusive};
    std::optional<Bound>& slot = is_lower ? lower : upper;
    if (!slot) { slot = b; return; }
    int c = compare(b.value, slot->value);
    if ((is_lower && c > 0) || (!is_lower && c < 0) || (c == 0 && exclusive)) slot = b;
  };
  tighten("minimum", true, false);
  tighten("exclusiveMinimum", true, true);
  tighten("maximum", false, false);
  tighten("exclusiveMaximum", false, true);
  if (!lower && !upper && schema.contains("multipleOf")) return multiple_of(schema, path, std::nullopt, std::nullopt);
  if (!lower && !upper) return primitive(integer_only ? "json-integer" : "json-number");
  std::string bpath = path + "/" + (lower ? "minimum" : "maximum");

  if (integer_only) {
    std::optional<long long> lo, hi;
    if (lower) {
      const Decimal& d = lower->value;
      if (d.int_digits.size() > 18) {
        if (!d.negative) throw SchemaError(bpath, "integer bound above 1e18 is not supported");
        lo = -kIntLimit;  // a subset: nothing below -1e18
      } else {
        long long v = int_part(d, bpath);  // truncated toward zero
        bool whole = d.frac_digits.empty();
        lo = (whole || d.negative) ? v : v + 1;          // ceil
        if (whole && lower->exclusive) lo = *lo + 1;
      }
    }
    if (upper) {
      const Decimal& d = upper->value;
      if (d.int_digits.size() > 18) {
        if (d.negative) throw SchemaError(bpath, "integer bound below -1e18 is not supported");
        hi = kIntLimit;
      } else {
        long long v = int_part(d, bpath);
        bool whole = d.frac_digits.empty();
        hi = (whole || !d.negative) ? v : v - 1;          // floor
        if (whole && upper->exclusive) hi = *hi - 1;
      }
    }
    if (schema.contains("multipleOf")) return multiple_of(schema, path, lo, hi);
    Expr e = integer_range(lo, hi);
    if (!e) return std::nullopt;
    return add_rule(path + "-int", *e);
  }

  // Decimals without exponent: written without '-' (y = x >= 0) or with it (y = -x > 0).
  for (const auto* b : {&lower, &upper})
    if (*b && (*b)->value.int_digits.size() > 18)
      throw SchemaError(bpath, "number bound beyond 1e18 is not supported");
  std::vector<std::string> alts;
  Decimal zero;
  bool nonneg_possible = !upper || compare(upper->value, zero) > 0 ||
                         (compare(upper->value, zero) == 0 && !upper->exclusive);
  if (nonneg_possible) {
    std::optional<Bound> y_lower;
    if (lower && !lower->value.negative && !(lower->value.is_zero() && !lower->exclusive)) y_lower = lower;
    Expr e = magnitude_range(y_lower, upper, bpath);
    if (e) alts.push_back(std::string("(") + *e + ")");
  }
  bool neg_possible = !lower || lower->value.negative;
  if (neg_possible) {
    // x < 0: y = -x with -upper <= y (or y > 0) and y <= -lower.
    std::optional<Bound> y_lower = Bound{zero, true};
    if (upper && upper->value.negative) y_lower = Bound{negate(upper->value), upper->exclusive};
    std::optional<Bound> y_upper;
    if (lower) y_upper = Bound{negate(lower->value), lower->exclusive};
    Expr e = magnitude_range(y_lower, y_upper, bpath);
    if (e) alts.push_back(seq({"\"-\"", std::string("(") + *e + ")"}));
  }
  Expr e = alternatives(alts);
  if (!e) return std::nullopt;
  return add_rule(path + "-num", *e);
}

}  // namespace pagoda::structured::schema_detail
