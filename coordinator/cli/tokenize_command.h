// `colibri-coordinator tokenize` / `detokenize`: the model's tokenizer on its
// own. --model may be a vocab-only GGUF (no weights are loaded).
#ifndef COLIBRI_COORDINATOR_CLI_TOKENIZE_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_TOKENIZE_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace colibri::coordinator {

struct TokenizeOptions {
  std::string model_path;
  std::string text;       // the text, or
  std::string text_file;  // a file holding it
  // When set, the input is split on this string and one line of ids is printed
  // per piece (empty pieces give empty lines). Default: unset.
  std::string separator;
  bool has_separator = false;
  // Add BOS/EOS as the vocabulary asks. Default: false.
  bool add_special = false;
  // Recognise special-token text such as <|im_end|>. Default: false.
  bool parse_special = false;
};

// Prints space-separated ids, one line per piece.
absl::Status RunTokenize(const TokenizeOptions& options, std::ostream& out);

struct DetokenizeOptions {
  std::string model_path;
  std::vector<int32_t> ids;
  // Render control tokens (BOS, EOS, ...) as text. Default: false.
  bool render_special = false;
};

// Prints the text of the ids (no newline added).
absl::Status RunDetokenize(const DetokenizeOptions& options, std::ostream& out);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_TOKENIZE_COMMAND_H_
