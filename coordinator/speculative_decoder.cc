#include "coordinator/speculative_decoder.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

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

SpeculativeDecoder::SpeculativeDecoder(arch::Session& session,
                                       std::unique_ptr<speculative::Drafter> drafter,
                                       const speculative::DraftLengthOptions& length)
    : session_(session), drafter_(std::move(drafter)), length_(length) {}

void SpeculativeDecoder::AcceptPrompt(absl::Span<const int32_t> prompt) {
  if (drafter_ != nullptr) drafter_->Accept(prompt);
}

int SpeculativeDecoder::n_past() const {
  return session_.n_past() - static_cast<int>(draft_.size() - fed_);
}

absl::Status SpeculativeDecoder::EndVerifyStep() {
  if (draft_.empty()) return absl::OkStatus();
  const int unfed = static_cast<int>(draft_.size() - fed_);
  const int keep = session_.n_past() - unfed;
  session_.Truncate(keep);
  if (session_.n_past() != keep) {
    return absl::InternalError(absl::StrCat("speculative decoding: truncating ", unfed,
                                            " drafts left ", session_.n_past(), " positions, not ",
                                            keep));
  }
  length_.OnVerifyStep(static_cast<int>(draft_.size()), static_cast<int>(fed_), step_seconds_);
  draft_.clear();
  fed_ = 0;
  return absl::OkStatus();
}

absl::Status SpeculativeDecoder::Feed(int32_t token, int max_drafts, std::vector<float>* next) {
  const size_t n_vocab = static_cast<size_t>(session_.model().config().n_vocab);
  if (fed_ < draft_.size() && draft_[fed_] == token) {
    // The model's own choice was drafted: its logits are already computed.
    const float* row = draft_logits_.data() + fed_ * n_vocab;
    next->assign(row, row + n_vocab);
    ++fed_;
    ++stats_.accepted;
    if (drafter_ != nullptr) drafter_->Accept({&token, 1});
    if (fed_ == draft_.size()) COLIBRI_RETURN_IF_ERROR(EndVerifyStep());
    return absl::OkStatus();
  }
  COLIBRI_RETURN_IF_ERROR(EndVerifyStep());
  if (drafter_ != nullptr) drafter_->Accept({&token, 1});

  // A new step: the token and what the drafter guesses follows it, within
  // the context left and what the cache can drop again.
  int k = drafter_ != nullptr ? length_.Next() : 0;
  k = std::min({k, max_drafts, session_.n_ctx() - session_.n_past() - 1, session_.max_truncate()});
  // The step's time includes the drafter's (a model's NextN block costs a
  // forward of its own per draft), so that the draft length weighs it.
  const auto start = Clock::now();
  batch_.assign(1, token);
  if (k > 0) {
    drafter_->Propose(k, &draft_);
    batch_.insert(batch_.end(), draft_.begin(), draft_.end());
  }
  const bool verify = !draft_.empty();
  absl::Status status = session_.Evaluate(batch_, verify, &logits_);
  const double seconds = Seconds(start);
  if (!status.ok()) {
    draft_.clear();
    return status;
  }
  next->assign(logits_.begin(), logits_.begin() + static_cast<ptrdiff_t>(n_vocab));
  if (verify) {
    draft_logits_.assign(logits_.begin() + static_cast<ptrdiff_t>(n_vocab), logits_.end());
    fed_ = 0;
    step_seconds_ = seconds;
    ++stats_.verify_steps;
    stats_.drafted += static_cast<int64_t>(draft_.size());
    stats_.verify_seconds += seconds;
  } else {
    ++stats_.plain_steps;
    stats_.plain_seconds += seconds;
    if (drafter_ != nullptr) length_.OnPlainStep(seconds);
  }
  return absl::OkStatus();
}

absl::Status SpeculativeDecoder::Finish() { return EndVerifyStep(); }

}  // namespace colibri::coordinator
