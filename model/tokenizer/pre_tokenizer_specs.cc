// The pre-tokenizers llama.cpp knows by `tokenizer.ggml.pre` name (the regexes of
// llm_tokenizer_bpe and the flags of llama_vocab::impl::load). Non-ASCII
// characters are written as \x{...} so that no editor or tool can normalize them.
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/gguf/gguf_value.h"
#include "model/tokenizer/pre_tokenizer.h"

namespace colibri::tokenizer {
namespace {

// Hand-written splitters in pre_tokenizer.cc recognise these two strings.
constexpr char kGpt2[] =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr char kLlama3[] =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr char kQwen2[] =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr char kQwen35[] =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr char kSeedCoder[] =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr char kGpt4o[] =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr char kTekken[] =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// DeepSeek's CJK runs: 一-龥, U+0800-一, 가-U+D7FF.
constexpr char kDeepseekCjk[] = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
// deepseek-llm's letter runs: the cased-letter ranges of its tokenizer.json.
constexpr char kDeepseekLlmLetters[] =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
// deepseek-llm's punctuation runs: ASCII !-/ :-~, fullwidth ！-／ ：-～, ‘-‟, 　-。.
constexpr char kDeepseekLlmPunct[] =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
// Poro / BLOOM: anything but whitespace and . , ! ? … 。 ， 、 । ۔ ، (and | ( )).
constexpr char kPoro[] =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)re";

enum class Regexes {
  kDefault,
  kGpt2,
  kLlama3,
  kQwen2,
  kQwen35,
  kDeepseekLlm,
  kDeepseekCoder,
  kDeepseek3,
  kFalcon,
  kStarcoder,
  kPoro,
  kViking,
  kGpt4o,
  kTekken,
  kSeedCoder,
};

std::vector<std::string> RegexList(Regexes which) {
  switch (which) {
    case Regexes::kDefault:
      return {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"};
    case Regexes::kGpt2:
      return {kGpt2};
    case Regexes::kLlama3:
      return {kLlama3};
    case Regexes::kQwen2:
      return {kQwen2};
    case Regexes::kQwen35:
      return {kQwen35};
    case Regexes::kDeepseekLlm:
      return {"[\r\n]",      kDeepseekLlmLetters, kDeepseekLlmPunct,
              R"re(\s+$)re", kDeepseekCjk,        R"re(\p{N}+)re"};
    case Regexes::kDeepseekCoder:
      return {"[\r\n]", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kDeepseekCjk, R"re(\p{N})re"};
    case Regexes::kDeepseek3:
      return {
          R"re(\p{N}{1,3})re", R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
          "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
          "\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
    case Regexes::kFalcon:
      return {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"};
    case Regexes::kStarcoder:
      return {R"re(\p{N})re", kGpt2};
    case Regexes::kPoro:
      return {kPoro};
    case Regexes::kViking:
      return {kPoro, R"re(\p{N})re"};
    case Regexes::kGpt4o:
      return {kGpt4o};
    case Regexes::kTekken:
      return {kTekken};
    case Regexes::kSeedCoder:
      return {kSeedCoder};
  }
  return {};
}

struct Entry {
  std::initializer_list<const char*> names;
  Regexes regexes;
  bool clean_spaces;
  bool ignore_merges;
  bool add_bos;
  bool no_bos;
};

// clang-format off
const Entry kEntries[] = {
    {{"default"}, Regexes::kDefault, true, false, false, false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano"}, Regexes::kLlama3, true, true, true, false},
    {{"dbrx", "smaug-bpe"}, Regexes::kLlama3, true, false, false, false},
    {{"glm4", "chatglm-bpe"}, Regexes::kLlama3, true, false, false, true},
    {{"deepseek-llm"}, Regexes::kDeepseekLlm, false, false, false, false},
    {{"deepseek-coder"}, Regexes::kDeepseekCoder, false, false, false, false},
    {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, Regexes::kDeepseek3, false, false,
     false, false},
    {{"falcon"}, Regexes::kFalcon, true, false, false, false},
    {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
      "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais"}, Regexes::kGpt2, true, false,
     false, false},
    {{"trillion", "granite-docling"}, Regexes::kGpt2, false, false, false, false},
    {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, Regexes::kStarcoder,
     true, false, false, false},
    {{"command-r", "smollm"}, Regexes::kStarcoder, false, false, false, false},
    {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"},
     Regexes::kQwen2, false, false, false, false},
    {{"stablelm2", "megrez"}, Regexes::kQwen2, true, false, false, false},
    {{"qwen35"}, Regexes::kQwen35, false, false, false, false},
    {{"poro-chat"}, Regexes::kPoro, false, false, false, false},
    {{"bloom", "gpt3-finnish"}, Regexes::kPoro, true, false, false, false},
    {{"viking"}, Regexes::kViking, false, false, false, false},
    {{"gpt-4o", "llama4", "kanana2", "talkie"}, Regexes::kGpt4o, false, false, false, false},
    {{"tekken"}, Regexes::kTekken, false, true, true, false},
    {{"seed-coder"}, Regexes::kSeedCoder, false, false, false, false},
};
// clang-format on

}  // namespace

std::vector<std::string> KnownPreTokenizerNames() {
  std::vector<std::string> names;
  for (const Entry& entry : kEntries)
    names.insert(names.end(), entry.names.begin(), entry.names.end());
  return names;
}

absl::StatusOr<PreTokenizerSpec> FindPreTokenizerSpec(absl::string_view name) {
  const absl::string_view key = name.empty() ? absl::string_view("default") : name;
  for (const Entry& entry : kEntries) {
    for (const char* entry_name : entry.names) {
      if (key != entry_name) continue;
      PreTokenizerSpec spec;
      spec.regexes = RegexList(entry.regexes);
      spec.clean_spaces = entry.clean_spaces;
      spec.ignore_merges = entry.ignore_merges;
      spec.add_bos = entry.add_bos;
      spec.no_bos = entry.no_bos;
      return spec;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pre-tokenizer type '", gguf::EscapeForMessage(name),
                   "' (tokenizer.ggml.pre)"));
}

}  // namespace colibri::tokenizer
