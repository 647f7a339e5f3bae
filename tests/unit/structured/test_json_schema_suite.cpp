// Conformance against Debian's json-schema-test-suite (draft 7, the newest draft the package
// ships): for every test group whose schema the converter accepts, each instance, written
// compactly with object keys in the order the grammar writes them, is walked byte by byte
// through the grammar core's token mask (a byte-level vocabulary) and must be accepted exactly
// when the suite says it is valid. Groups the converter refuses are counted as skipped.
// When ../shared/testdata has deepseek-llm's vocabulary (100k byte-level BPE tokens), each
// instance is also tokenized and walked token by token through that vocabulary's mask, which
// must agree with the byte walk; mask and compile times are printed (figures, not limits).
// Each schema is also converted with flexible whitespace, which must accept the same instances
// written compactly and pretty-printed. Prints a per-file (= per keyword) coverage table.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>

#include "engine/sampling/output_constraint.h"
#include "engine/gguf/gguf.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/structured.h"
#include "engine/tokenizer/tokenizer.h"

using namespace pagoda::structured;
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

const char* const kSuiteDir = "/usr/share/json-schema-test-suite/tests/draft7";

// 256 single-byte tokens plus one end-of-generation token (id 256).
std::shared_ptr<const TokenVocabulary> byte_vocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  bytes.push_back("");
  std::vector<bool> eog(257, false), special(257, false);
  eog[256] = true;
  special[256] = true;
  return TokenVocabulary::build(bytes, eog, special);
}

bool mask_allows(const GrammarMatcher& m, int32_t id) {
  std::vector<uint32_t> bits = m.mask();
  return (bits[size_t(id) / 32] >> (id % 32)) & 1u;
}

// The instance is accepted when every byte is allowed by the mask at its step and the end
// (EOG) is allowed after the last one.
bool walk(const std::shared_ptr<const CompiledGrammar>& grammar, const std::string& text) {
  GrammarMatcher m(grammar);
  for (unsigned char c : text) {
    if (!mask_allows(m, c)) return false;
    if (!m.accept_token(c)) FAIL("mask allowed byte " << int(c) << " that accept_token refused");
  }
  bool end = mask_allows(m, 256);
  CHECK(end == m.can_end());
  return end;
}

struct RealVocabulary {
  std::unique_ptr<pagoda::Tokenizer> tokenizer;
  std::shared_ptr<const TokenVocabulary> vocab;
};

RealVocabulary load_real_vocabulary(const std::string& path) {
  RealVocabulary out;
  if (!fs::exists(path)) return out;
  auto file = pagoda::gguf::GgufFile::open(path);
  out.tokenizer = pagoda::Tokenizer::from_gguf(file);
  out.vocab = pagoda::token_vocabulary(*out.tokenizer);  // as the server builds it
  return out;
}

// Token walk: each token must be in the mask at its step, then an EOG token at the end.
bool walk_tokens(const std::shared_ptr<const CompiledGrammar>& grammar, const std::vector<int32_t>& ids,
                 std::vector<double>& mask_us) {
  GrammarMatcher m(grammar);
  std::vector<uint32_t> bits(grammar->vocabulary()->mask_words());
  auto timed_mask = [&] {
    auto t0 = std::chrono::steady_clock::now();
    m.fill_mask(bits.data());
    mask_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  };
  for (int32_t id : ids) {
    timed_mask();
    if (!((bits[size_t(id) / 32] >> (id % 32)) & 1u)) return false;
    if (!m.accept_token(id)) FAIL("mask allowed token " << id << " that accept_token refused");
  }
  timed_mask();
  const auto& vocab = *grammar->vocabulary();
  for (int32_t id = 0; id < vocab.size(); ++id)
    if (vocab.is_eog(id) && ((bits[size_t(id) / 32] >> (id % 32)) & 1u)) return true;
  return false;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

const Json* resolve_local(const Json& root, const Json& schema) {
  const Json* s = &schema;
  for (int guard = 0; guard < 16 && s->is_object() && s->contains("$ref"); ++guard) {
    std::string ref = (*s)["$ref"].get<std::string>();
    if (ref.empty() || ref[0] != '#') return s;
    try {
      s = &root.at(Json::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      return s;
    }
  }
  return s;
}

// Whole floats as integers (1.0 -> 1: the same number to JSON Schema, written the way a model
// writes it), object keys in the schema's order: `properties`, then `required`, then the rest.
Json canonical(const Json& root, const Json& schema_in, const Json& instance, int depth = 0) {
  if (instance.is_number_float()) {
    double d = instance.get<double>();
    if (d == double(static_cast<long long>(d)) && d > -9e18 && d < 9e18)
      return Json(static_cast<long long>(d));
    return instance;
  }
  const Json* schema = resolve_local(root, schema_in);
  Json empty = Json::object();
  if (!schema->is_object() || depth > 32) schema = &empty;
  // Property names and item schemas also come from allOf branches (merged by the converter).
  std::vector<const Json*> parts = {schema};
  if (schema->contains("allOf") && (*schema)["allOf"].is_array())
    for (const auto& b : (*schema)["allOf"]) parts.push_back(resolve_local(root, b));
  if (instance.is_object()) {
    std::vector<std::string> order;
    // const / enum objects are written in the order the schema spells them.
    if (schema->contains("const") && (*schema)["const"].is_object())
      for (const auto& [k, v] : (*schema)["const"].items()) order.push_back(k);
    if (schema->contains("enum") && (*schema)["enum"].is_array())
      for (const auto& value : (*schema)["enum"])
        if (value.is_object() && value.size() == instance.size() && order.empty())
          for (const auto& [k, v] : value.items()) order.push_back(k);
    order.erase(std::remove_if(order.begin(), order.end(), [&](const std::string& k) { return !instance.contains(k); }),
                order.end());
    auto take = [&](const std::string& k) {
      if (instance.contains(k) && std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
    };
    for (const Json* p : parts)
      if (p->is_object() && p->contains("properties") && (*p)["properties"].is_object())
        for (const auto& [k, v] : (*p)["properties"].items()) take(k);
    for (const Json* p : parts)
      if (p->is_object() && p->contains("required") && (*p)["required"].is_array())
        for (const auto& k : (*p)["required"]) if (k.is_string()) take(k.get<std::string>());
    for (const auto& [k, v] : instance.items()) take(k);
    Json out = Json::object();
    for (const auto& k : order) {
      Json sub = true;
      for (const Json* p : parts) {
        if (!p->is_object()) continue;
        if (p->contains("properties") && (*p)["properties"].is_object() && (*p)["properties"].contains(k)) {
          sub = (*p)["properties"][k];
          break;
        }
        if (p->contains("additionalProperties")) sub = (*p)["additionalProperties"];
      }
      out[k] = canonical(root, sub, instance[k], depth + 1);
    }
    return out;
  }
  if (instance.is_array()) {
    Json out = Json::array();
    for (size_t i = 0; i < instance.size(); ++i) {
      Json sub = true;
      if (schema->contains("items")) {
        const Json& items = (*schema)["items"];
        if (items.is_array()) {
          if (i < items.size()) sub = items[i];
          else if (schema->contains("additionalItems")) sub = (*schema)["additionalItems"];
        } else {
          sub = items;
        }
      }
      out.push_back(canonical(root, sub, instance[i], depth + 1));
    }
    return out;
  }
  return instance;
}

struct FileStats {
  int groups = 0, groups_supported = 0;
  int instances = 0, passed = 0;
  int valid_rejected = 0, invalid_accepted = 0;
  std::map<std::string, int> refusals;  // refused keyword -> groups
};

std::string refused_keyword(const std::string& path) {
  if (path.empty()) return "(no value)";  // the schema accepts no value at all
  size_t slash = path.find_last_of('/');
  std::string last = slash == std::string::npos ? path : path.substr(slash + 1);
  if (last.empty() || std::isdigit(static_cast<unsigned char>(last[0]))) return path;
  return last;
}

}  // namespace

TEST_CASE("json-schema-test-suite draft7: accepted schemas accept valid and reject invalid instances") {
  if (!fs::is_directory(kSuiteDir)) {
    WARN("skipped: " << kSuiteDir << " not found (apt-get install json-schema-test-suite)");
    return;
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kSuiteDir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  // Formats we generate: our grammars are strict subsets there (see below).
  for (const char* f : {"date", "time", "date-time", "email", "hostname", "ipv4", "uri"})
    files.push_back(fs::path(kSuiteDir) / "optional" / "format" / (std::string(f) + ".json"));
  std::sort(files.begin(), files.end());

  auto vocab = byte_vocabulary();
  RealVocabulary real = load_real_vocabulary(std::string(PAGODA_TESTDATA_DIR) + "/vocab/ggml-vocab-deepseek-llm.gguf");
  if (!real.vocab) WARN("deepseek-llm vocabulary not found under " PAGODA_TESTDATA_DIR ": token walks skipped");
  std::vector<double> mask_us, convert_us, compile_us;
  int token_walks = 0;
  SchemaOptions options;
  options.ref_ignores_siblings = true;  // draft 7 semantics
  std::map<std::string, FileStats> table;
  std::vector<std::string> failures, subset_misses;
  for (const auto& file : files) {
    std::ifstream in(file);
    REQUIRE(in.good());
    Json groups = Json::parse(in);
    bool is_format = file.parent_path().filename() == "format";
    std::string keyword = (is_format ? "format:" : "") + file.stem().string();
    FileStats& stats = table[keyword];
    for (const auto& group : groups) {
      ++stats.groups;
      const Json& schema = group["schema"];
      std::string gbnf;
      auto t0 = std::chrono::steady_clock::now();
      try {
        gbnf = json_schema_to_gbnf(schema, options);
        convert_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        if (std::getenv("SUITE_VERBOSE") && convert_us.back() > 1000)
          std::cout << keyword << ": converted in " << convert_us.back() << " us: " << schema.dump() << "\n";
      } catch (const SchemaError& e) {
        stats.refusals[refused_keyword(e.path)]++;
        if (std::getenv("SUITE_VERBOSE")) std::cout << keyword << ": " << e.what() << "\n";
        continue;
      }
      std::shared_ptr<const CompiledGrammar> grammar;
      try {
        grammar = compile_gbnf(gbnf, vocab);
      } catch (const GrammarError& e) {
        FAIL_CHECK(keyword << " / " << group["description"] << ": grammar does not compile: " << e.what()
                           << "\n" << gbnf);
        continue;
      }
      std::shared_ptr<const CompiledGrammar> real_grammar;
      if (real.vocab) {
        auto t1 = std::chrono::steady_clock::now();
        real_grammar = compile_gbnf(gbnf, real.vocab);
        compile_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count());
      }
      // The same schema with flexible whitespace must accept the pretty-printed instances.
      SchemaOptions flexible_options = options;
      flexible_options.flexible_whitespace = true;
      auto flexible = compile_gbnf(json_schema_to_gbnf(schema, flexible_options), vocab);
      ++stats.groups_supported;
      for (const auto& test : group["tests"]) {
        ++stats.instances;
        std::string text = canonical(schema, schema, test["data"]).dump();
        bool valid = test["valid"].get<bool>();
        bool accepted = walk(grammar, text);
        std::string pretty = canonical(schema, schema, test["data"]).dump(2);
        if (walk(flexible, pretty) != accepted || walk(flexible, text) != accepted)
          FAIL_CHECK(keyword << ": flexible whitespace disagrees on " << pretty);
        if (real_grammar) {
          std::vector<int32_t> ids = real.tokenizer->encode(text, false, false);
          bool token_accepted = walk_tokens(real_grammar, ids, mask_us);
          ++token_walks;
          if (token_accepted != accepted)
            FAIL_CHECK(keyword << ": token walk " << token_accepted << " but byte walk " << accepted << " for " << text);
        }
        if (accepted == valid) {
          ++stats.passed;
          continue;
        }
        std::string what = keyword + " / " + group["description"].get<std::string>() + " / " +
                           test["description"].get<std::string>() + ": " + text +
                           (valid ? " is valid but rejected" : " is invalid but accepted");
        if (valid) ++stats.valid_rejected; else ++stats.invalid_accepted;
        // Formats: the grammar generates a strict subset (e.g. no leap seconds, no quoted
        // e-mail local parts), so a valid instance outside it is reported, not failed.
        if (valid && is_format) subset_misses.push_back(what);
        else failures.push_back(what + "\n  schema " + schema.dump() + "\n" + gbnf);
      }
    }
  }

  int groups = 0, supported = 0, instances = 0, passed = 0;
  std::cout << "\njson-schema-test-suite draft7 coverage (groups supported / total, instances passed / run):\n";
  for (const auto& [keyword, s] : table) {
    std::string refused;
    for (const auto& [k, n] : s.refusals) refused += (refused.empty() ? "" : ", ") + k + " x" + std::to_string(n);
    std::cout << "  " << std::left << std::setw(28) << keyword << std::right << std::setw(3)
              << s.groups_supported << " / " << std::setw(3) << s.groups << "   " << std::setw(4)
              << s.passed << " / " << std::setw(4) << s.instances
              << (refused.empty() ? "" : "   refused: " + refused) << "\n";
    groups += s.groups;
    supported += s.groups_supported;
    instances += s.instances;
    passed += s.passed;
  }
  std::cout << "  total: " << supported << " / " << groups << " groups, " << passed << " / " << instances
            << " instances\n";
  if (real.vocab)
    std::cout << "  deepseek-llm token walks: " << token_walks << " instances, " << mask_us.size()
              << " masks; mask us p50 " << percentile(mask_us, 0.5) << " p90 " << percentile(mask_us, 0.9)
              << " p99 " << percentile(mask_us, 0.99) << " max " << percentile(mask_us, 1.0)
              << "; schema->GBNF us p50 " << percentile(convert_us, 0.5) << " max " << percentile(convert_us, 1.0)
              << "; GBNF compile us p50 " << percentile(compile_us, 0.5) << " max " << percentile(compile_us, 1.0)
              << " (wall clock on this machine, under whatever load it has)\n";
  for (const auto& m : subset_misses) std::cout << "  outside the generated format subset: " << m << "\n";
  for (const auto& f : failures) FAIL_CHECK(f);
  CHECK(failures.empty());
}
