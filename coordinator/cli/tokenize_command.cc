#include "coordinator/cli/tokenize_command.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {
namespace {

absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer(const std::string& path) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return tokenizer::Tokenizer::FromGguf(*file);
}

}  // namespace

absl::Status RunTokenize(const TokenizeOptions& options, std::ostream& out) {
  if (!options.text.empty() && !options.text_file.empty()) {
    return absl::InvalidArgumentError("give --text or --text-file, not both");
  }
  std::string text = options.text;
  if (!options.text_file.empty()) {
    std::ifstream in(options.text_file, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", options.text_file));
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                           LoadTokenizer(options.model_path));
  tokenizer::EncodeOptions enc;
  enc.add_special = options.add_special;
  enc.parse_special = options.parse_special;
  std::vector<std::string> pieces;
  if (options.has_separator && !options.separator.empty()) {
    pieces = absl::StrSplit(text, options.separator);
  } else {
    pieces.push_back(text);
  }
  for (const std::string& piece : pieces) {
    COLIBRI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(piece, enc));
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
    out << "\n";
  }
  return absl::OkStatus();
}

absl::Status RunDetokenize(const DetokenizeOptions& options, std::ostream& out) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                           LoadTokenizer(options.model_path));
  for (int32_t id : options.ids) {
    if (id < 0 || id >= tok->n_vocab()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", tok->n_vocab(), ")"));
    }
  }
  out << tok->Decode(options.ids, options.render_special);
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
