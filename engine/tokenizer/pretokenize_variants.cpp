// The pre-tokenizer variants by tokenizer.ggml.pre value: which split stages each model
// family's tokenizer uses (the matchers themselves are in pretokenize.cpp).
#include <utility>

#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace pagoda::tok {
namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kPunct;
using unicode::kWhitespace;

PreTokenizer::CharClass ranges(std::vector<std::pair<uint32_t, uint32_t>> r, uint16_t mask = 0) {
  PreTokenizer::CharClass c;
  c.flag_mask = mask;
  c.ranges = std::move(r);
  return c;
}

PreTokenizer::Stage run(PreTokenizer::CharClass cls, uint32_t min = 1, uint32_t max = UINT32_MAX) {
  PreTokenizer::Stage s;
  s.kind = PreTokenizer::StageKind::kRun;
  s.cls = std::move(cls);
  s.min = min;
  s.max = max;
  return s;
}

PreTokenizer::Stage space_then_run(PreTokenizer::CharClass cls) {
  PreTokenizer::Stage s;
  s.kind = PreTokenizer::StageKind::kSpaceThenRun;
  s.cls = std::move(cls);
  return s;
}

PreTokenizer::Stage simple(PreTokenizer::StageKind kind, uint32_t max = UINT32_MAX) {
  PreTokenizer::Stage s;
  s.kind = kind;
  s.max = max;
  return s;
}

// Character classes that appear literally in the DeepSeek tokenizers' split patterns.
PreTokenizer::CharClass cjk_class() {  // [一-龥ࠀ-一가-퟿]
  return ranges({{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}});
}

PreTokenizer::CharClass deepseek_punct_class() {  // [!-/:-~！-／：-～‘-‟　-。]
  return ranges({{0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}, {0x2018, 0x201F},
                 {0x3000, 0x3002}});
}

// DeepSeek LLM's letter class: an explicit list of cased-letter ranges (from its tokenizer.json).
PreTokenizer::CharClass deepseek_letter_class() {
  return ranges({
      {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
      {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
      {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
      {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
      {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
      {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
      {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
      {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
      {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
      {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
      {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
      {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
      {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
      {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
      {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
      {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
      {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
  });
}

// The Llama 3 pattern with `max_digits` digits per number (see StageKind::kLlama3).
PreTokenizer::Stage llama3(uint32_t max_digits) {
  PreTokenizer::Stage s = simple(PreTokenizer::StageKind::kLlama3, max_digits);
  s.contractions = true;
  return s;
}

// [^(\s|.,!?…。，、।۔،)] of the BLOOM / Poro / Viking pattern " ?[^(\s|.,!?…。，、।۔،)]+": the
// parentheses and "|" are literal members of the class there.
PreTokenizer::CharClass bloom_word_class() {
  auto c = ranges({{'(', ')'}, {'|', '|'}, {'.', '.'}, {',', ','}, {'!', '!'}, {'?', '?'},
                   {0x2026, 0x2026}, {0x3002, 0x3002}, {0xFF0C, 0xFF0C}, {0x3001, 0x3001},
                   {0x0964, 0x0964}, {0x06D4, 0x06D4}, {0x060C, 0x060C}},
                  kWhitespace);
  c.negate = true;
  return c;
}

PreTokenizer::Stage opt_space_run(PreTokenizer::CharClass cls) {
  PreTokenizer::Stage s;
  s.kind = PreTokenizer::StageKind::kOptSpaceRun;
  s.cls = std::move(cls);
  return s;
}

struct Variant {
  const char* names[16];  // tokenizer.ggml.pre values (llama.cpp's names); unused ones null
  bool ignore_merges;
  bool add_bos_by_default;
  std::vector<PreTokenizer::Stage> (*stages)();
};

using K = PreTokenizer::StageKind;

// The variants by tokenizer.ggml.pre value. Names sharing an entry share the split rules; the
// rules are the split regexes llama.cpp uses for each name.
const Variant kVariants[] = {
    // llama.cpp's fallback for vocabularies converted before tokenizer.ggml.pre existed.
    {{"default"}, false, false,
     [] {
       // [\p{P}\$\+<=>\^~\|]+ , GPT-2 , \p{N}+ , [0-9][0-9][0-9]
       auto punct = ranges({{'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'}, {'~', '~'}, {'|', '|'}},
                           kPunct);
       return std::vector{run(std::move(punct)), simple(K::kGpt2), run(ranges({}, kNumber)),
                          run(ranges({{'0', '9'}}), 3, 3)};
     }},
    {{"gpt-2", "gpt2", "mpt", "gpt-neox", "olmo", "phi-2", "roberta-bpe", "jais", "gigachat",
      "a.x-4.0", "mellum", "exaone4", "trillion", "granite-docling"},
     false, false, [] { return std::vector{simple(K::kGpt2)}; }},
    {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano"},
     true, true, [] { return std::vector{llama3(3)}; }},
    {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, false, false, [] { return std::vector{llama3(3)}; }},
    {{"qwen2", "stablelm2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "hunyuan",
      "solar-open", "grok-2", "bailingmoe", "bailingmoe2", "llada-moe"},
     false, false, [] { return std::vector{llama3(1)}; }},
    {{"qwen35"}, false, false,
     [] {
       auto s = llama3(1);
       s.marks_are_letters = true;
       return std::vector{s};
     }},
    {{"seed-coder"}, false, false,
     [] {
       auto s = llama3(1);
       s.punct_newlines = false;  // " ?[^\s\p{L}\p{N}\r\n]+" with no [\r\n]* after it
       return std::vector{s};
     }},
    {{"ufakzeka"}, false, false,
     [] {
       auto s = llama3(1);
       s.contractions = false;  // Turkish apostrophe suffixes stay with their word
       return std::vector{s};
     }},
    {{"minicpm5"}, true, false,
     [] { return std::vector{run(ranges({}, kNumber), 1, 3), llama3(UINT32_MAX)}; }},
    {{"laguna"}, false, false,
     [] {
       // [^\n]+|[\n]+ (runs of line feeds apart from the rest), then Qwen2's pattern
       return std::vector{run(ranges({{'\n', '\n'}})), llama3(1)};
     }},
    {{"tekken"}, true, true, [] { return std::vector{simple(K::kCaseWords, 1)}; }},
    {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, false, false,
     [] {
       auto s = simple(K::kCaseWords, 3);
       s.contractions = true;
       return std::vector{s};
     }},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
     false, false, [] { return std::vector{run(ranges({}, kNumber), 1, 1), simple(K::kGpt2)}; }},
    {{"falcon"}, false, false,
     [] {
       // [\p{P}\$\+<=>\^~\|`]+ , GPT-2, [0-9][0-9][0-9]
       auto punct = ranges({{'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'}, {'~', '~'},
                            {'|', '|'}, {'`', '`'}},
                           kPunct);
       return std::vector{run(std::move(punct)), simple(K::kGpt2), run(ranges({{'0', '9'}}), 3, 3)};
     }},
    {{"deepseek-llm"}, false, false,
     [] {
       return std::vector{run(ranges({{'\r', '\r'}, {'\n', '\n'}}), 1, 1),
                          space_then_run(deepseek_letter_class()),
                          space_then_run(deepseek_punct_class()), simple(K::kTrailingSpace),
                          run(cjk_class()), run(ranges({}, kNumber))};
     }},
    {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, false, false,
     [] {
       // \p{N}{1,3} , [一-龥ぁ-ゟ゠-ヿ]+ , the pattern of kDeepseek3
       return std::vector{run(ranges({}, kNumber), 1, 3),
                          run(ranges({{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}})),
                          simple(K::kDeepseek3)};
     }},
    {{"deepseek-coder"}, false, false,
     [] {
       return std::vector{run(ranges({{'\r', '\r'}, {'\n', '\n'}}), 1, 1),
                          space_then_run(ranges({}, kLetter)), space_then_run(ranges({}, kPunct)),
                          run(cjk_class()), run(ranges({}, kNumber), 1, 1)};
     }},
    {{"jais-2"}, false, false,
     [] {
       auto s = llama3(3);
       s.cascade_spaces = true;
       return std::vector{s};
     }},
    {{"tiny_aya", "cohere2moe"}, false, false,
     [] {
       auto words = simple(K::kCaseWords, 3);
       words.contractions = true;
       return std::vector{simple(K::kDigitGroups), words};
     }},
    {{"youtu"}, true, false,
     [] {
       // [가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+ : the classes are disjoint,
       // so one stage per class splits the same way as the alternation.
       auto words = simple(K::kCaseWords, 1);
       words.contractions = true;
       return std::vector{run(ranges({{0xAC00, 0xD7A3}, {0x3131, 0x318E}})),
                          run(ranges({{0xFF01, 0xFF01}, {0x2026, 0x2026}, {0x201C, 0x201D}, {0x2018, 0x2019},
                                      {0x2014, 0x2014}, {0xFF1A, 0xFF1B}, {0xFF0C, 0xFF0C}, {0x3001, 0x303F},
                                      {0xFE30, 0xFE4F}})),
                          run(ranges({{0x3105, 0x312F}})),
                          run(ranges({{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}})), words};
     }},
    {{"exaone-moe"}, false, false, [] { return std::vector{simple(K::kExaoneMoe)}; }},
    {{"spark2_5"}, false, false,
     [] {
       auto s = simple(K::kDeepseek3);
       s.punct_newlines = false;
       return std::vector{run(ranges({}, kNumber), 1, 3),
                          run(ranges({{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}})), s,
                          run(ranges({}, kNumber), 1, 1)};
     }},
    {{"bloom", "poro-chat", "gpt3-finnish"}, false, false,
     [] { return std::vector{opt_space_run(bloom_word_class())}; }},
    {{"viking"}, false, false,
     [] { return std::vector{opt_space_run(bloom_word_class()), run(ranges({}, kNumber), 1, 1)}; }},
};

}  // namespace

PreTokenizer PreTokenizer::by_name(std::string_view name) {
  for (const auto& v : kVariants) {
    for (const char* n : v.names) {
      if (n != nullptr && name == n) {
        PreTokenizer p;
        p.name_ = std::string(name);
        p.stages_ = v.stages();
        for (Stage& st : p.stages_) st.cls.prepare();
        p.ignore_merges_ = v.ignore_merges;
        p.add_bos_by_default_ = v.add_bos_by_default;
        return p;
      }
    }
  }
  std::string known;
  for (const auto& n : supported_names()) known += (known.empty() ? "" : ", ") + n;
  throw TokenizerError("unsupported pre-tokenizer tokenizer.ggml.pre = \"" + std::string(name) +
                       "\" (supported: " + known + ")");
}

std::vector<std::string> PreTokenizer::supported_names() {
  std::vector<std::string> out;
  for (const auto& v : kVariants)
    for (const char* n : v.names)
      if (n != nullptr) out.emplace_back(n);
  return out;
}

}  // namespace pagoda::tok
