// The prompts of `colibri-client bench`: texts (a built-in list or a file,
// one prompt per line) turned into token lists of one length by the served
// model's tokenizer, so that concurrent requests carry different prompts of
// the same size (one prompt for all would make concurrent greedy generations
// route to the same experts: a best case that real traffic never gives).
//
// Thread-safety: functions of their arguments only (BuiltInBenchPrompts
// returns a constant).
#ifndef COLIBRI_CLIENT_BENCH_PROMPTS_H_
#define COLIBRI_CLIENT_BENCH_PROMPTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace colibri::client {

// 16 texts on different subjects (code, quotations, stories, questions),
// each starting with a different word.
const std::vector<std::string>& BuiltInBenchPrompts();

// The non-empty lines of the file at `path` (a trailing CR is dropped; lines
// of only whitespace are skipped). NotFound when it cannot be opened,
// InvalidArgument when it holds no prompt.
absl::StatusOr<std::vector<std::string>> ReadBenchPrompts(const std::string& path);

// The model's token ids of `text`, with the vocabulary's leading special
// tokens (BOS) when `add_special`.
using TokenizeFunction =
    std::function<absl::StatusOr<std::vector<int32_t>>(const std::string& text, bool add_special)>;

// One token list of exactly `length` ids per text, in order: the text
// tokenized with its special tokens, then, while shorter, " " + text again
// (without them), cut at `length`. InvalidArgument when `texts` is empty,
// `length` < 1 or a text has no tokens; the tokenizer's errors as they come.
absl::StatusOr<std::vector<std::vector<int32_t>>> TokenizeBenchPrompts(
    const std::vector<std::string>& texts, int length, const TokenizeFunction& tokenize);

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_BENCH_PROMPTS_H_
