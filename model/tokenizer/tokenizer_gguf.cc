// Tokenizer::FromGguf: the tokenizer.* metadata of a GGUF file into VocabData.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace colibri::tokenizer {
namespace {

// Prefixes the file name unless the message (from a GgufFile getter) has it.
absl::Status Annotate(const absl::Status& status, const gguf::GgufFile& file) {
  if (absl::StrContains(status.message(), file.path())) return status;
  return absl::Status(status.code(), absl::StrCat(file.path(), ": ", status.message()));
}

absl::StatusOr<std::optional<int64_t>> OptionalInt(const gguf::GgufFile& file,
                                                   absl::string_view key) {
  if (file.FindValue(key) == nullptr) return std::optional<int64_t>();
  COLIBRI_ASSIGN_OR_RETURN(int64_t value, file.GetInt(key));
  return std::optional<int64_t>(value);
}

absl::StatusOr<std::optional<bool>> OptionalBool(const gguf::GgufFile& file,
                                                 absl::string_view key) {
  if (file.FindValue(key) == nullptr) return std::optional<bool>();
  COLIBRI_ASSIGN_OR_RETURN(bool value, file.GetBool(key));
  return std::optional<bool>(value);
}

absl::StatusOr<VocabData> ReadVocabData(const gguf::GgufFile& file) {
  VocabData data;
  if (file.FindValue("tokenizer.ggml.model") == nullptr) {
    return absl::DataLossError("no tokenizer.ggml.model: the file carries no tokenizer");
  }
  COLIBRI_ASSIGN_OR_RETURN(data.model, file.GetString("tokenizer.ggml.model"));
  COLIBRI_ASSIGN_OR_RETURN(data.pre, file.GetStringOr("tokenizer.ggml.pre", ""));
  COLIBRI_ASSIGN_OR_RETURN(data.general_name, file.GetStringOr("general.name", ""));
  if (file.FindValue("tokenizer.ggml.tokens") == nullptr) {
    return absl::DataLossError("no tokenizer.ggml.tokens");
  }
  COLIBRI_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                           file.GetStringArray("tokenizer.ggml.tokens"));
  data.tokens = *tokens;

  if (file.FindValue("tokenizer.ggml.scores") != nullptr) {
    auto scores = file.GetFloatArray("tokenizer.ggml.scores");
    if (scores.ok()) {
      data.scores = *std::move(scores);
    } else {
      // llama.cpp also accepts integer scores.
      auto int_scores = file.GetIntArray("tokenizer.ggml.scores");
      if (!int_scores.ok()) return scores.status();
      data.scores.assign(int_scores->begin(), int_scores->end());
    }
  }
  if (file.FindValue("tokenizer.ggml.token_type") != nullptr) {
    COLIBRI_ASSIGN_OR_RETURN(std::vector<int64_t> types,
                             file.GetIntArray("tokenizer.ggml.token_type"));
    data.token_types.assign(types.begin(), types.end());
  }
  if (file.FindValue("tokenizer.ggml.merges") != nullptr) {
    COLIBRI_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                             file.GetStringArray("tokenizer.ggml.merges"));
    data.merges = *merges;
    data.has_merges = true;
  }

  const std::pair<const char*, std::optional<int64_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &data.bos_id},
      {"tokenizer.ggml.eos_token_id", &data.eos_id},
      {"tokenizer.ggml.eot_token_id", &data.eot_id},
      {"tokenizer.ggml.eom_token_id", &data.eom_id},
      {"tokenizer.ggml.unknown_token_id", &data.unk_id},
      {"tokenizer.ggml.seperator_token_id", &data.sep_id},  // sic, as llama.cpp spells it
      {"tokenizer.ggml.padding_token_id", &data.pad_id},
      {"tokenizer.ggml.mask_token_id", &data.mask_id},
      {"tokenizer.ggml.fim_pre_token_id", &data.fim_pre_id},
      {"tokenizer.ggml.fim_suf_token_id", &data.fim_suf_id},
      {"tokenizer.ggml.fim_mid_token_id", &data.fim_mid_id},
      {"tokenizer.ggml.fim_pad_token_id", &data.fim_pad_id},
      {"tokenizer.ggml.fim_rep_token_id", &data.fim_rep_id},
      {"tokenizer.ggml.fim_sep_token_id", &data.fim_sep_id},
      // Older names of the FIM ids; they win when both are present, as in llama.cpp.
      {"tokenizer.ggml.prefix_token_id", &data.fim_pre_id},
      {"tokenizer.ggml.suffix_token_id", &data.fim_suf_id},
      {"tokenizer.ggml.middle_token_id", &data.fim_mid_id},
  };
  for (const auto& [key, field] : ids) {
    COLIBRI_ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInt(file, key));
    if (value) *field = value;
  }
  const std::pair<const char*, std::optional<bool>*> flags[] = {
      {"tokenizer.ggml.add_bos_token", &data.add_bos},
      {"tokenizer.ggml.add_eos_token", &data.add_eos},
      {"tokenizer.ggml.add_space_prefix", &data.add_space_prefix},
  };
  for (const auto& [key, field] : flags) {
    COLIBRI_ASSIGN_OR_RETURN(*field, OptionalBool(file, key));
  }
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const gguf::GgufFile& file) {
  auto data = ReadVocabData(file);
  if (!data.ok()) return Annotate(data.status(), file);
  auto tokenizer = FromVocabData(*std::move(data));
  if (!tokenizer.ok()) return Annotate(tokenizer.status(), file);
  return tokenizer;
}

}  // namespace colibri::tokenizer
