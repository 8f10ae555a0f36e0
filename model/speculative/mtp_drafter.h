// The model's own NextN / MTP block as a drafter (model/arch/nextn.h says what
// the block is and computes).
//
// MtpModule runs the block as a one-layer model with its own Session (its own
// KV cache, positions aligned with the main model's) and its routed experts on
// this process (moe::LocalExpertBackend): the main layers may run on expert
// nodes, the block always runs here.
//
// MtpModule holds n_seq sequences (MtpOptions::n_seq), one per main sequence
// it drafts for (`serve`: one per generation slot), each with its own cache.
//
// MtpDrafter drafts for one main sequence, from its hidden states: it
// observes a main session (`run`: arch::HiddenStateObserver on sequence 0), or
// its owner passes it the hidden states of that sequence's evaluated rows
// (`serve`: SequenceChunk::hidden). When asked to propose after the accepted
// tokens t_0 .. t_{N-1} (t_p is the token at main position p), it first runs
// the block at the positions it has not seen (each combining the main model's
// exact h_i with t_{i+1}) up to N - 2, whose logits give the first draft
// (greedy argmax: under exact-match verification a draft is kept with the
// target's probability of it, which the block's most likely token best
// guesses) for position N; each further draft feeds the previous draft with
// the block's own output as the hidden state. Those chained positions are
// approximations and are dropped from the block's cache at once, so it only
// ever keeps positions computed from the main model's hidden states of final
// tokens. The drafts never touch the sampler, so a seeded generation's RNG
// stream is the target's alone.
//
// A generation may start after position 0 (a session that continues a
// conversation): its tokens then follow those the drafter accepted before, up
// to the position the new prompt starts at, and the block's positions from
// the one before it on are recomputed.
//
// Thread-safety: none; one per generation at a time (as Drafter), used on the
// thread that evaluates the main session. MtpModule: one call at a time.
#ifndef COLIBRI_MODEL_SPECULATIVE_MTP_DRAFTER_H_
#define COLIBRI_MODEL_SPECULATIVE_MTP_DRAFTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/thread_pool.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/ops/matmul.h"
#include "model/speculative/drafter.h"

namespace colibri::speculative {

struct MtpOptions {
  // The NextN block to run (< nextn_predict_layers). Default: 0.
  int block = 0;
  // Positions its cache holds; use the main session's n_ctx. Default: 4096.
  int n_ctx = 4096;
  // Sequences it holds (their caches are allocated on first use). Default: 1.
  int n_seq = 1;
  // Rows evaluated together when catching up (a prompt). Default: 512.
  int n_batch = 512;
  // Default: kFast.
  ops::NumericPath path = ops::NumericPath::kFast;
};

class MtpModule {
 public:
  // Loads NextN block options.block of the GGUF at `path` (mapped again; the
  // pages are shared with the main model's mapping). InvalidArgument when
  // the file has no such block ("... nextn_predict_layers is 0") or a tensor
  // of it is missing or misshapen. `pool` may be null; borrowed.
  static absl::StatusOr<std::unique_ptr<MtpModule>> Open(const std::string& path, ThreadPool* pool,
                                                         const MtpOptions& options);
  MtpModule(const MtpModule&) = delete;
  MtpModule& operator=(const MtpModule&) = delete;

  // Runs the block at positions n_past() .. n_past() + n - 1: row i from
  // hidden[i] (the state it continues from, [n][n_embd]) and next_tokens[i]
  // (the token one position later). logits receives [n][n_vocab] (all_logits)
  // or [n_vocab] for the last row, predicting the token two positions later;
  // last_hidden (may be null) the block's output for the last row [n_embd],
  // before shared_head_norm. InvalidArgument for mismatched sizes or a token
  // outside the vocabulary; OutOfRange when the cache is full.
  absl::Status Evaluate(absl::Span<const float> hidden, absl::Span<const int32_t> next_tokens,
                        bool all_logits, std::vector<float>* logits,
                        std::vector<float>* last_hidden) {
    return Evaluate(0, hidden, next_tokens, all_logits, logits, last_hidden);
  }
  // The same for sequence `seq` (InvalidArgument outside [0, n_seq())).
  absl::Status Evaluate(int seq, absl::Span<const float> hidden,
                        absl::Span<const int32_t> next_tokens, bool all_logits,
                        std::vector<float>* logits, std::vector<float>* last_hidden);

  int n_past() const { return session_->n_past(); }
  int n_past(int seq) const { return session_->n_past(seq); }
  int n_ctx() const { return session_->n_ctx(); }
  int n_seq() const { return session_->n_seq(); }
  void Truncate(int n) { session_->Truncate(n); }
  void Truncate(int seq, int n) { session_->Truncate(seq, n); }
  // Forgets sequence `seq` and frees its cache.
  void Release(int seq) { session_->Release(seq); }
  // Bytes of the block's cache slots allocated.
  int64_t kv_bytes_allocated() const { return session_->kv_bytes_allocated(); }
  const arch::Model& model() const { return *model_; }

 private:
  // Keeps the last row of the block's output.
  class LastRow : public arch::HiddenStateObserver {
   public:
    void OnHiddenStates(int first_pos, int n, const float* rows) override;
    int n_embd = 0;
    std::vector<float> row;  // [n_embd]
  };

  MtpModule() = default;

  std::unique_ptr<arch::Model> model_;
  std::unique_ptr<moe::LocalExpertBackend> experts_;
  std::unique_ptr<arch::Session> session_;
  ThreadPool* pool_ = nullptr;
  ops::NumericPath path_ = ops::NumericPath::kFast;
  LastRow last_row_;
  std::vector<float> concat_;  // [n][2 * n_embd]: enorm(embed) | hnorm(h)
  std::vector<float> input_;   // [n][n_embd]: eh_proj · concat_
  ops::MatMulScratch scratch_;
};

class MtpDrafter : public Drafter, public arch::HiddenStateObserver {
 public:
  // Observes sequence 0 of `main` from now on (set_hidden_observer) until
  // destroyed, and drafts with sequence 0 of `mtp`. Make it before the
  // prompt is evaluated, so that the prompt's hidden states are seen. Both
  // are borrowed and must outlive the drafter.
  MtpDrafter(arch::Session& main, MtpModule& mtp);
  // Drafts with sequence `seq` of `mtp` (borrowed, must outlive it; the
  // sequence is forgotten now and released when the drafter is destroyed)
  // for a main sequence whose evaluated rows the owner passes to
  // OnHiddenStates, every evaluation from the prompt's first on.
  MtpDrafter(MtpModule& mtp, int seq);
  ~MtpDrafter() override;
  MtpDrafter(const MtpDrafter&) = delete;
  MtpDrafter& operator=(const MtpDrafter&) = delete;

  // The next Accept starts a generation: its tokens are the prompt just
  // evaluated, so they end at the last position whose hidden state was seen.
  // Tokens accepted before at earlier positions are kept (a continued
  // conversation); when the drafter has not seen every position before the
  // prompt, it proposes nothing until the main sequence restarts at 0.
  void Restart();

  void Accept(absl::Span<const int32_t> tokens) override;
  void Propose(int max_tokens, std::vector<int32_t>* draft) override;
  bool ProposeIsCostly() const override { return true; }
  // The block's logits [n_vocab] behind the first draft of the last
  // proposal that drafted (empty before one did).
  const std::vector<float>& first_draft_logits() const { return first_logits_; }
  // Positions first_pos .. first_pos + n - 1 of the main sequence were
  // (re)evaluated: rows [n][n_embd] are their hidden states.
  void OnHiddenStates(int first_pos, int n, const float* rows) override;

 private:
  arch::Session* const main_;  // null when the owner passes the hidden states
  MtpModule& mtp_;
  const int seq_;
  const bool seq_ok_;  // seq_ is one of mtp_'s sequences (else it never proposes)
  const int n_embd_;
  bool usable_ = false;
  bool starting_ = true;         // the next Accept starts a generation
  int observed_end_ = 0;         // position after the last row seen
  std::vector<int32_t> tokens_;  // tokens_[p]: the final token at main position p
  // Main hidden states not yet consumed: [pending_rows][n_embd], positions
  // pending_first_ onwards; the row of the block's last exact position is
  // kept, for a continuation that recomputes it.
  std::vector<float> pending_;
  int pending_first_ = 0;
  std::vector<float> logits_;        // [n_vocab]
  std::vector<float> first_logits_;  // [n_vocab]
  std::vector<float> hidden_;        // [n_embd] the block's last output
};

// A Drafter that forwards to one that lives longer (a MtpDrafter observing a
// session across generations).
class BorrowedDrafter : public Drafter {
 public:
  explicit BorrowedDrafter(Drafter* drafter) : drafter_(drafter) {}
  void Accept(absl::Span<const int32_t> tokens) override { drafter_->Accept(tokens); }
  void Propose(int max_tokens, std::vector<int32_t>* draft) override {
    drafter_->Propose(max_tokens, draft);
  }
  bool ProposeIsCostly() const override { return drafter_->ProposeIsCostly(); }

 private:
  Drafter* const drafter_;
};

}  // namespace colibri::speculative

#endif  // COLIBRI_MODEL_SPECULATIVE_MTP_DRAFTER_H_
