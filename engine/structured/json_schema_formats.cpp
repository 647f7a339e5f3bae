// JSON Schema string formats as GBNF rules over the characters inside the quotes: date, time,
// date-time (RFC 3339), uuid, hostname, email, ipv4, uri. Each is a strict subset of what the
// format allows (e.g. no leap seconds, no quoted e-mail local parts, URIs with an authority),
// so whatever is generated validates.
#include "engine/structured/json_schema_internal.h"

namespace pagoda::structured::schema_detail {

namespace {

// Formats: GBNF over ASCII characters (none needs a JSON escape), with the length range of
// what they generate so minLength/maxLength can be checked against it.
struct Format {
  const char* name;
  const char* gbnf;  // rules; the format's own rule is named `fmt-<name>`
  uint64_t min_len;
  std::optional<uint64_t> max_len;
};

const Format kFormats[] = {
    {"date",
     "fmt-date ::= fmt-year \"-\" ( fmt-mon31 \"-\" fmt-day31 | fmt-mon30 \"-\" fmt-day30 | \"02-\" fmt-day28 )"
     " | fmt-leap-year \"-02-29\"\n"
     "fmt-year ::= [0-9]{4}\n"
     // Divisible by 4 and not by 100, or by 400.
     "fmt-leap-year ::= [0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) \"00\"\n"
     "fmt-mon31 ::= \"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\"\n"
     "fmt-mon30 ::= \"04\" | \"06\" | \"09\" | \"11\"\n"
     "fmt-day28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
     "fmt-day30 ::= fmt-day28 | \"29\" | \"30\"\n"
     "fmt-day31 ::= fmt-day30 | \"31\"\n",
     10, 10},
    // RFC 3339 full-time; leap seconds (:60) left out.
    {"time",
     "fmt-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )?"
     " ( \"Z\" | [+\\x2D] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n",
     9, 24},
    {"date-time", "fmt-date-time ::= fmt-date \"T\" fmt-time\n", 20, 35},
    {"uuid",
     "fmt-uuid ::= fmt-hex{8} \"-\" fmt-hex{4} \"-\" fmt-hex{4} \"-\" fmt-hex{4} \"-\" fmt-hex{12}\n"
     "fmt-hex ::= [0-9a-fA-F]\n",
     36, 36},
    // Labels of at most 63 characters, at most 4 of them (total under 253).
    {"hostname",
     "fmt-hostname ::= fmt-label ( \".\" fmt-label ){0,3}\n"
     "fmt-label ::= [a-zA-Z0-9] ( [a-zA-Z0-9\\x2D]{0,61} [a-zA-Z0-9] )?\n",
     1, std::nullopt},
    {"email",
     "fmt-email ::= fmt-atom ( \".\" fmt-atom )* \"@\" fmt-hostname\n"
     "fmt-atom ::= [a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\x2D]+\n",
     3, std::nullopt},
    {"ipv4",
     "fmt-ipv4 ::= fmt-octet \".\" fmt-octet \".\" fmt-octet \".\" fmt-octet\n"
     "fmt-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]\n",
     7, 15},
    // scheme://host[:port]/path?query#fragment with RFC 3986 characters (no escapes needed in
    // JSON: no quote or backslash among them).
    {"uri",
     "fmt-uri ::= [a-zA-Z] [a-zA-Z0-9+.\\x2D]* \"://\" fmt-hostname ( \":\" [0-9]{1,5} )? ( \"/\" fmt-pchar* )*"
     " ( \"?\" ( fmt-pchar | [/?] )* )? ( \"#\" ( fmt-pchar | [/?] )* )?\n"
     "fmt-pchar ::= [a-zA-Z0-9._~!$&'()*+,;=:@\\x2D] | \"%\" fmt-hex fmt-hex\n"
     "fmt-hex ::= [0-9a-fA-F]\n",
     4, std::nullopt},
};

const Format* find_format(const std::string& name) {
  for (const auto& f : kFormats)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace

std::optional<SchemaConverter::FormatRule> SchemaConverter::format_rule(const std::string& name) {
  const Format* format = find_format(name);
  if (!format) return std::nullopt;
  // Format rules are fixed text: each line is registered once, under its own name.
  auto add_format = [&](const Format& fmt) {
    std::string text = fmt.gbnf;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      std::string line = text.substr(start, end - start);
      size_t eq = line.find(" ::= ");
      std::string rule = line.substr(0, eq);
      if (primitives_.insert(rule).second) {
        used_names_.insert(rule);
        rules_.emplace_back(rule, line.substr(eq + 5));
        grammar_bytes_ += line.size() + 1;
      }
      start = end + 1;
    }
  };
  if (name == "date-time") add_format(*find_format("date")), add_format(*find_format("time"));
  if (name == "email" || name == "uri") add_format(*find_format("hostname"));
  add_format(*format);
  return FormatRule{std::string("fmt-") + name, format->min_len, format->max_len};
}

}  // namespace pagoda::structured::schema_detail
