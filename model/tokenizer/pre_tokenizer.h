// Pre-tokenization for byte-level BPE: cutting text into words before merges,
// with exactly the word boundaries llama.cpp produces.
//
// A pre-tokenizer is a list of regexes applied in turn; each one splits every
// piece produced so far into its matches and the text between them. As in
// llama.cpp (src/unicode.cpp, unicode_regex_split):
//  - the GPT-2 and Llama-3 regexes run as hand-written splitters;
//  - a regex using \p{L}, \p{N}, \p{P}, \p{M} or \p{S} runs on a "collapsed" text
//    where ASCII stays as is and every other code point becomes one code unit
//    standing for its category (0xD1 number, 0xD2 letter, 0xD3 punctuation,
//    0xD4 mark, 0xD5 symbol, 0xD0 other, 0x0B whitespace), the classes rewritten
//    to match; llama.cpp's ASCII class tables are reproduced, quirks included;
//  - any other regex runs on the code points with non-ASCII whitespace replaced
//    by 0x0B.
// The regex engine is PCRE2 (32-bit code units, no UTF/UCP: ASCII-only \s as
// std::regex in the C locale), JIT-compiled; its backtracking semantics are those
// of the ECMAScript std::regex llama.cpp uses, for these patterns.
//
// Thread-safety: a PreTokenizer is immutable after Create; Split may be called
// from any number of threads.
#ifndef COLIBRI_MODEL_TOKENIZER_PRE_TOKENIZER_H_
#define COLIBRI_MODEL_TOKENIZER_PRE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace colibri::tokenizer {

// What `tokenizer.ggml.pre` selects, as llama.cpp's llama_vocab::impl::load.
struct PreTokenizerSpec {
  std::vector<std::string> regexes;
  // Detokenization clean-up of " ," and friends (llama.cpp's clean_spaces).
  bool clean_spaces = true;
  // A word that is a vocabulary token is taken whole, without merges.
  bool ignore_merges = false;
  // llama.cpp's built-in default for add_bos (metadata may override it).
  bool add_bos = false;
  // The vocabulary has no BOS token whatever the defaults say.
  bool no_bos = false;
};

// Looks up a pre-tokenizer by name; "" (absent key) and "default" give the
// default one. InvalidArgument naming `name` when it is unknown.
absl::StatusOr<PreTokenizerSpec> FindPreTokenizerSpec(absl::string_view name);

// Every name FindPreTokenizerSpec accepts.
std::vector<std::string> KnownPreTokenizerNames();

class PreTokenizer {
 public:
  // Compiles `regexes` (regex text as in llama.cpp's sources). InvalidArgument
  // if one does not compile or mixes categories with non-ASCII characters.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(
      absl::Span<const std::string> regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits the code points `cps` into words: appends their lengths in code
  // points (summing to cps.size()) to `word_lengths`. Internal if the regex
  // engine fails (resource limits).
  absl::Status Split(absl::Span<const uint32_t> cps, std::vector<uint32_t>* word_lengths) const;

 private:
  struct Step;
  PreTokenizer();

  std::vector<std::unique_ptr<Step>> steps_;
  bool needs_collapsed_ = false;
  bool needs_raw_ = false;
};

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_PRE_TOKENIZER_H_
