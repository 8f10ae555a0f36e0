#include "coordinator/generation/speculation_options.h"

#include "absl/strings/str_cat.h"

namespace colibri::coordinator {

absl::StatusOr<DraftKind> ParseDraftKind(absl::string_view name) {
  if (name == "none") return DraftKind::kNone;
  if (name == "ngram") return DraftKind::kNgram;
  if (name == "mtp") return DraftKind::kMtp;
  return absl::InvalidArgumentError(
      absl::StrCat("draft '", name, "' is not one of: none, ngram, mtp"));
}

const char* DraftKindName(DraftKind kind) {
  switch (kind) {
    case DraftKind::kNgram:
      return "ngram";
    case DraftKind::kMtp:
      return "mtp";
    case DraftKind::kNone:
      break;
  }
  return "none";
}

}  // namespace colibri::coordinator
