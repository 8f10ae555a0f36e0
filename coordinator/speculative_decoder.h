// Speculative decoding with exact verification, the part of the generation
// loop (coordinator/generation.h) that feeds each final token back to the
// model.
//
// Plain decoding evaluates one token per step. With a drafter, a step
// evaluates the token together with up to k drafted continuations in one
// Session::Evaluate (so one round trip per node and layer for all of them)
// and keeps every position's logits. The generation loop samples as it
// always does, with the same sampler, RNG stream and penalty history; when
// the token it samples equals the next draft, that draft's logits are already
// computed and the feed costs nothing. At the first mismatch the remaining
// drafts are truncated from the cache and the sampled token starts the next
// step. The kernels are batch-invariant (a token's logits are bitwise the
// same alone or in a batch), so the tokens, logits and log-probabilities are
// exactly those of plain decoding.
//
// Thread-safety: none; one per generation. The session must outlive it.
#ifndef COLIBRI_COORDINATOR_SPECULATIVE_DECODER_H_
#define COLIBRI_COORDINATOR_SPECULATIVE_DECODER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/arch/session.h"
#include "model/speculative/draft_length.h"
#include "model/speculative/drafter.h"

namespace colibri::coordinator {

enum class DraftKind {
  kNone,   // plain decoding
  kNgram,  // prompt lookup (speculative::NgramDrafter)
  kMtp,    // the model's NextN block (speculative::MtpDrafter), made by the caller
           // through SpeculationOptions::make_drafter (it must see the prompt)
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
  // length (speculative::DraftLength) stays at or below it. Default: 8.
  int draft_max = 8;
  // Adapt the draft length to the measured acceptance and cost (false: always
  // draft_max). Default: true.
  bool adaptive = true;
  // Makes the drafter of each generation instead of `draft` (a draft model,
  // a test's oracle). Default: none.
  std::function<std::unique_ptr<speculative::Drafter>()> make_drafter;
};

// Counters of one generation (plain fields, for stats and metrics).
struct SpeculationStats {
  int64_t verify_steps = 0;   // evaluations of a token with >= 1 draft
  int64_t plain_steps = 0;    // evaluations of one token
  int64_t drafted = 0;        // drafted tokens evaluated
  int64_t accepted = 0;       // drafted tokens that were the sampled ones
  double verify_seconds = 0;  // including the drafter's time for their drafts
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

class SpeculativeDecoder {
 public:
  // drafter null: plain decoding. Drafts are capped so that Truncate never
  // has to drop more than the session can (Session::max_truncate); a model
  // whose sliding-window cache cannot drop any position decodes plainly.
  SpeculativeDecoder(arch::Session& session, std::unique_ptr<speculative::Drafter> drafter,
                     const speculative::DraftLengthOptions& length);
  SpeculativeDecoder(const SpeculativeDecoder&) = delete;
  SpeculativeDecoder& operator=(const SpeculativeDecoder&) = delete;

  // The prompt, already evaluated, for the drafter to match against.
  void AcceptPrompt(absl::Span<const int32_t> prompt);

  // Feeds `token`, final, at the next position and puts the logits after it
  // ([n_vocab]) in *next. `max_drafts` caps the drafts of a new step: the
  // tokens that may still be fed after this one. Session errors are returned
  // as they are (the position is then not fed); Internal if the cache could
  // not be truncated to the fed tokens.
  absl::Status Feed(int32_t token, int max_drafts, std::vector<float>* next);

  // Drops the drafts evaluated but not fed, so that the session holds exactly
  // the fed tokens, as after plain decoding. Call once the generation ends.
  absl::Status Finish();

  // Positions of the fed tokens (the session's, minus pending drafts).
  int n_past() const;
  const SpeculationStats& stats() const { return stats_; }

 private:
  // Truncates the unfed drafts and reports the verify step to length_.
  absl::Status EndVerifyStep();

  arch::Session& session_;
  const std::unique_ptr<speculative::Drafter> drafter_;
  speculative::DraftLength length_;
  SpeculationStats stats_;

  // The verify step in progress: its drafts and their logits
  // ([draft_.size()][n_vocab], row j after feeding draft_[j]).
  std::vector<int32_t> draft_;
  std::vector<float> draft_logits_;
  size_t fed_ = 0;  // drafts fed so far
  double step_seconds_ = 0;

  std::vector<int32_t> batch_;  // [1 + k] token and drafts
  std::vector<float> logits_;   // [1 + k][n_vocab]
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_SPECULATIVE_DECODER_H_
