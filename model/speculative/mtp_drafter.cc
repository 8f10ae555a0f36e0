#include "model/speculative/mtp_drafter.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_file.h"
#include "model/ops/vector_ops.h"

namespace colibri::speculative {
namespace {

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

void MtpModule::LastRow::OnHiddenStates(int /*first_pos*/, int n, const float* rows) {
  row.assign(rows + static_cast<int64_t>(n - 1) * n_embd, rows + static_cast<int64_t>(n) * n_embd);
}

absl::StatusOr<std::unique_ptr<MtpModule>> MtpModule::Open(const std::string& path,
                                                           ThreadPool* pool,
                                                           const MtpOptions& options) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  std::unique_ptr<MtpModule> m(new MtpModule());
  COLIBRI_ASSIGN_OR_RETURN(m->model_, arch::Model::LoadNextn(std::move(file), options.block));
  const arch::ModelConfig& c = m->model_->config();
  m->pool_ = pool;
  m->path_ = options.path;
  m->experts_ = std::make_unique<moe::LocalExpertBackend>(&m->model_->experts(), c.n_expert,
                                                          options.path, pool);
  arch::SessionOptions session;
  session.n_ctx = options.n_ctx;
  session.n_batch = options.n_batch;
  session.n_seq = std::max(1, options.n_seq);
  session.path = options.path;
  COLIBRI_ASSIGN_OR_RETURN(m->session_,
                           arch::Session::Create(*m->model_, m->experts_.get(), pool, session));
  m->last_row_.n_embd = c.n_embd;
  m->session_->set_hidden_observer(&m->last_row_);
  return m;
}

absl::Status MtpModule::Evaluate(int seq, absl::Span<const float> hidden,
                                 absl::Span<const int32_t> next_tokens, bool all_logits,
                                 std::vector<float>* logits, std::vector<float>* last_hidden) {
  const arch::ModelConfig& c = model_->config();
  const int64_t d = c.n_embd;
  const int64_t n = static_cast<int64_t>(next_tokens.size());
  if (n == 0 || static_cast<int64_t>(hidden.size()) != n * d) {
    return absl::InvalidArgumentError(
        absl::StrCat("MTP: ", hidden.size(), " hidden floats for ", n, " tokens of width ", d));
  }
  const arch::NextnWeights& w = model_->nextn();
  concat_.resize(static_cast<size_t>(n * 2 * d));
  input_.resize(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i) {
    float* e = concat_.data() + i * 2 * d;  // [n_embd] embedding half, then [n_embd] hidden half
    COLIBRI_RETURN_IF_ERROR(model_->EmbedToken(next_tokens[i], e));
    ops::RmsNorm(e, w.enorm, c.rms_eps, d, e);
    ops::RmsNorm(hidden.data() + i * d, w.hnorm, c.rms_eps, d, e + d);
  }
  ops::MatMul(w.eh_proj, concat_.data(), n, input_.data(), d, path_, pool_, &scratch_);
  COLIBRI_RETURN_IF_ERROR(session_->EvaluateEmbeddings(seq, input_, all_logits, logits));
  if (last_hidden != nullptr) *last_hidden = last_row_.row;
  return absl::OkStatus();
}

MtpDrafter::MtpDrafter(arch::Session& main, MtpModule& mtp)
    : main_(&main), mtp_(mtp), seq_(0), seq_ok_(true), n_embd_(mtp.model().config().n_embd) {
  main_->set_hidden_observer(this);
}

MtpDrafter::MtpDrafter(MtpModule& mtp, int seq)
    : main_(nullptr),
      mtp_(mtp),
      seq_(seq),
      seq_ok_(seq >= 0 && seq < mtp.n_seq()),
      n_embd_(mtp.model().config().n_embd) {
  if (seq_ok_) mtp_.Truncate(seq_, 0);
}

MtpDrafter::~MtpDrafter() {
  if (main_ != nullptr) {
    main_->set_hidden_observer(nullptr);
  } else if (seq_ok_) {
    mtp_.Release(seq_);
  }
}

void MtpDrafter::Restart() { starting_ = true; }

void MtpDrafter::Accept(absl::Span<const int32_t> tokens) {
  if (starting_) {
    // A generation's prompt, evaluated just before: it ends at the last row
    // seen. Earlier positions keep the tokens accepted there before (a
    // continued conversation); the drafter must have seen all of them.
    starting_ = false;
    const int start = observed_end_ - static_cast<int>(tokens.size());
    usable_ = seq_ok_ && start >= 0 && start <= static_cast<int>(tokens_.size());
    tokens_.resize(usable_ ? static_cast<size_t>(start) : 0);
    // The block's position start - 1 combined h_{start - 1} with the token
    // then at `start` (the previous generation's last, sampled but never
    // fed): recompute it with the prompt's first token.
    const int keep = std::max(0, start - 1);
    if (usable_ && keep < mtp_.n_past(seq_)) mtp_.Truncate(seq_, keep);
  }
  // Unusable, tokens_ stays empty: it could not be indexed by position.
  if (usable_) tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

void MtpDrafter::OnHiddenStates(int first_pos, int n, const float* rows) {
  if (n <= 0 || first_pos < 0) return;
  observed_end_ = first_pos + n;
  // Positions from first_pos on are (re)evaluated: whatever the block or the
  // pending rows held there is stale.
  if (seq_ok_ && first_pos < mtp_.n_past(seq_)) mtp_.Truncate(seq_, first_pos);
  const int pending_rows = static_cast<int>(pending_.size() / n_embd_);
  if (first_pos < pending_first_ || first_pos > pending_first_ + pending_rows) {
    pending_.clear();
    pending_first_ = first_pos;
  } else {
    pending_.resize(static_cast<size_t>(first_pos - pending_first_) * n_embd_);
  }
  pending_.insert(pending_.end(), rows, rows + static_cast<int64_t>(n) * n_embd_);
}

void MtpDrafter::Propose(int max_tokens, std::vector<int32_t>* draft) {
  draft->clear();
  const int n_tokens = static_cast<int>(tokens_.size());
  if (!usable_ || max_tokens <= 0 || n_tokens < 2) return;
  // The block's exact positions run up to last = N - 2 (h_{N-2} with t_{N-1});
  // it must continue contiguously from what it holds, with the main states.
  const int last = n_tokens - 2;
  const int first = mtp_.n_past(seq_);
  const int pending_rows = static_cast<int>(pending_.size() / n_embd_);
  if (first > last || first < pending_first_ || pending_first_ + pending_rows <= last) return;
  const int rows = last - first + 1;
  if (last + max_tokens > mtp_.n_ctx()) return;
  const int64_t offset = static_cast<int64_t>(first - pending_first_) * n_embd_;
  absl::Status s = mtp_.Evaluate(
      seq_, absl::MakeConstSpan(pending_.data() + offset, static_cast<size_t>(rows) * n_embd_),
      absl::MakeConstSpan(tokens_.data() + first + 1, static_cast<size_t>(rows)), false, &logits_,
      &hidden_);
  if (!s.ok()) {
    mtp_.Truncate(seq_, first);
    return;
  }
  first_logits_ = logits_;
  draft->push_back(Argmax(logits_));
  for (int j = 1; j < max_tokens; ++j) {
    const int32_t previous = draft->back();
    s = mtp_.Evaluate(seq_, hidden_, {&previous, 1}, false, &logits_, &hidden_);
    if (!s.ok()) break;
    draft->push_back(Argmax(logits_));
  }
  // Keep the exact positions (up to `last`); the chained ones were
  // approximations. The next proposal, after at least one more accepted
  // token, continues at last + 1; h_last stays pending in case a
  // continuation replaces t_{last + 1} and so recomputes position last.
  mtp_.Truncate(seq_, last + 1);
  pending_.erase(pending_.begin(),
                 pending_.begin() + static_cast<int64_t>(last - pending_first_) * n_embd_);
  pending_first_ = last;
}

}  // namespace colibri::speculative
