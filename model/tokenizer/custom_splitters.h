// The hand-written splitters llama.cpp uses for the GPT-2 and Llama-3 regexes
// (src/unicode.cpp: unicode_regex_split_custom_gpt2 / _llama3), reproduced
// decision for decision:
//   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Internal to the tokenizer; thread-safe (pure functions).
#ifndef COLIBRI_MODEL_TOKENIZER_CUSTOM_SPLITTERS_H_
#define COLIBRI_MODEL_TOKENIZER_CUSTOM_SPLITTERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace colibri::tokenizer {

// Split the piece [begin, end) of the code points `cps` (with their
// CodepointFlags `flags`) into words, appending the word lengths to `out`.
// Positions outside the piece read as "no character", as in llama.cpp.
void SplitGpt2(const uint32_t* cps, const uint16_t* flags, size_t begin, size_t end,
               std::vector<uint32_t>* out);
void SplitLlama3(const uint32_t* cps, const uint16_t* flags, size_t begin, size_t end,
                 std::vector<uint32_t>* out);

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_CUSTOM_SPLITTERS_H_
