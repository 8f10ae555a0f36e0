// What a generation's speculative decoding is: the drafter, the most drafts
// per step and whether their number adapts, and the counters it reports.
// The GenerationScheduler (generation_scheduler.h) runs it for `run` and
// `serve` alike.
#ifndef COLIBRI_COORDINATOR_GENERATION_SPECULATION_OPTIONS_H_
#define COLIBRI_COORDINATOR_GENERATION_SPECULATION_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/speculative/drafter.h"

namespace colibri::coordinator {

enum class DraftKind {
  kNone,   // plain decoding
  kNgram,  // prompt lookup (speculative::NgramDrafter)
  kMtp,    // the model's NextN block (speculative::MtpDrafter)
};

// "none", "ngram" or "mtp"; InvalidArgument naming the value otherwise.
absl::StatusOr<DraftKind> ParseDraftKind(absl::string_view name);
const char* DraftKindName(DraftKind kind);

// Largest --draft-max.
inline constexpr int kMaxDraftTokens = 64;

struct SpeculationOptions {
  // The drafter. Default: kNone.
  DraftKind draft = DraftKind::kNone;
  // Most drafted tokens per verify step, 1 to kMaxDraftTokens; the adaptive
  // plan (speculative::DraftPlanner) stays at or below it. Default: 8.
  int draft_max = 8;
  // Adapt the number of drafts to the measured acceptance and cost (false:
  // always as many as allowed). Default: true.
  bool adaptive = true;
  // Makes the drafter of each generation instead of `draft` (a draft model,
  // a test's oracle). Default: none.
  std::function<std::unique_ptr<speculative::Drafter>()> make_drafter;
  // Constrained generations draft the tokens their grammar forces next
  // instead (see generation_scheduler.h; false: they take no drafts).
  // Default: true.
  bool grammar_drafts = true;
};

// Counters of one generation (plain fields, for stats and metrics). With
// other generations batched in the same steps, a step's seconds are the
// whole step's.
struct SpeculationStats {
  int64_t verify_steps = 0;   // steps that evaluated its token with >= 1 draft
  int64_t plain_steps = 0;    // steps that evaluated its token alone
  int64_t drafted = 0;        // drafted tokens evaluated
  int64_t accepted = 0;       // drafted tokens that were the sampled ones
  double verify_seconds = 0;  // including the drafters' time for the drafts
  double plain_seconds = 0;

  // accepted / drafted (0 without drafts).
  double acceptance_rate() const {
    return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0;
  }
  // Accepted drafts per verify step (0 without verify steps); each verify
  // step also yields one sampled token of its own.
  double mean_accepted_length() const {
    return verify_steps > 0 ? static_cast<double>(accepted) / verify_steps : 0.0;
  }
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_SPECULATION_OPTIONS_H_
