// Routed experts computed in this process from weights it can address (the
// coordinator's mmapped GGUF, or an expert node's RAM tier).
#ifndef COLIBRI_MODEL_MOE_LOCAL_EXPERT_BACKEND_H_
#define COLIBRI_MODEL_MOE_LOCAL_EXPERT_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "model/moe/expert_backend.h"
#include "model/moe/expert_ffn.h"

namespace colibri::moe {

// Groups a batch's (token, rank) routes by expert and runs each expert once over
// all its tokens, in ascending token order, bitwise as ExpertFfn would. Because
// ExpertFfn is batch invariant, out[t][r] does not depend on how routes are
// grouped, so any other grouping of the same routes (e.g. over several nodes)
// yields identical bits. The experts' products run as two parallel jobs per
// run of experts (ops::MatMulGroup: gate and up of all, then down of all), not
// one hand-off per matrix. Not thread-safe (one runner per calling thread).
class ExpertGroupRunner {
 public:
  // Looks up an expert's weights; NotFound / DataLoss when it cannot be had.
  using ExpertLookup = std::function<absl::StatusOr<ExpertWeights>(int layer, int expert)>;

  ExpertGroupRunner(int n_expert, ops::NumericPath path, ThreadPool* pool);

  // Computes the routes of `batch` whose expert satisfies `owned(expert)`
  // (all when owned is null), writing out[t][r] for those. InvalidArgument for
  // an expert id out of range or weights whose shapes do not fit n_embd;
  // lookup errors pass through. Every lookup happens before any computation.
  absl::Status Run(const ExpertBatch& batch, const ExpertLookup& lookup,
                   const std::function<bool(int)>& owned, float* out);

  // Allocates and touches the buffers that batches of up to n_tokens tokens,
  // k routes each, need for experts shaped like w.
  void Reserve(int64_t n_tokens, int k, const ExpertWeights& w);

 private:
  // Routes per run of experts: bounds the gathered buffers (about
  // kMaxRunRoutes * (2 n_embd + 2 n_ff) floats).
  static constexpr int64_t kMaxRunRoutes = 2048;
  // Batches of at most this many tokens run each expert's products whole,
  // in one job (RunProductsFused), when the run has an expert per thread at
  // least; larger ones split products across threads, in two jobs.
  static constexpr int64_t kFusedMaxTokens = 4;
  struct Member {
    int expert;
    ExpertWeights w;
    int64_t row;        // first row in gathered_in_ / gathered_out_
    int64_t ff_offset;  // first float in gate_ / up_
  };
  // Runs group_[first, last) (rows and gate/up offsets set; the buffers
  // already hold its routes).
  absl::Status RunExperts(const ExpertBatch& batch, size_t first, size_t last, float* out);
  // RunExperts' products for a decode-sized run: every gate, up and down as
  // one part of a single job, a down starting once its expert's gate and up
  // are done (see the .cc).
  void RunProductsFused(size_t first, size_t last, int64_t n_embd, uint64_t q_bytes);
  // RunExperts' products as two jobs: every gate and up, then every down.
  void RunProductsInTwoJobs(size_t first, size_t last, int64_t n_embd, uint64_t q_bytes);
  // Member g's gate (or up) product over its gathered rows (quantized when
  // q_bytes > 0), into gate_ (up_).
  ops::MatMulProblem GateOrUpProblem(const Member& g, bool gate, int64_t n_embd, uint64_t q_bytes);
  // Activates g's gate and up rows (once both are done) and returns its down
  // product, into gathered_out_.
  ops::MatMulProblem ActivateForDown(const Member& g, int64_t n_embd);
  // One run: group_[first, last).
  struct RunSpan {
    size_t first, last;
  };

  const int n_expert_;
  const ops::NumericPath path_;
  ThreadPool* const pool_;
  // Routes grouped by expert (a counting sort): the routes of expert e are
  // sorted_routes_[expert_begin_[e] .. expert_begin_[e + 1]), each t * k + r.
  std::vector<int64_t> expert_begin_;   // [n_expert + 1]
  std::vector<int64_t> sorted_routes_;  // [n_tokens * k]
  std::vector<Member> group_;           // the experts to run
  std::vector<RunSpan> runs_;           // group_ in runs
  // A buffer that grows without zeroing or copying: the runs write every
  // element they read, and a prompt's first layer would otherwise zero and
  // copy tens of MB (Reserve touches the pages up front instead).
  template <typename T>
  class Scratch {
   public:
    // At least n elements, 64-byte aligned, uninitialized (contents are lost
    // when it grows).
    T* Reserve(size_t n);
    // Reserve(n), then every page written once.
    void Touch(size_t n);
    T* data() const { return aligned_; }

   private:
    std::unique_ptr<uint8_t[]> bytes_;
    T* aligned_ = nullptr;
    size_t size_ = 0;
  };
  using FloatScratch = Scratch<float>;
  FloatScratch gathered_in_;   // [routes][n_embd]
  FloatScratch gathered_out_;  // [routes][n_embd]
  FloatScratch gate_, up_;     // [routes][n_ff]
  // When every expert's gate and up take the same quantized rows
  // (in_format_.row_bytes > 0): the batch's token rows quantized once, and
  // gathered per route in place of gathered_in_.
  ops::InputRowFormat in_format_;
  Scratch<uint8_t> token_rows_;   // [n_tokens][row_bytes]
  Scratch<uint8_t> gathered_q_;   // [routes][row_bytes]
  std::vector<ops::MatMulProblem> problems_;
  ExpertFfnScratch scratch_;
  // RunProductsFused: a MatMul scratch per part, and per expert of the run
  // its gate and up products not yet done.
  std::vector<std::unique_ptr<ops::MatMulScratch>> part_scratch_;
  std::unique_ptr<std::atomic<int>[]> pending_;
  size_t pending_size_ = 0;
};

class LocalExpertBackend : public ExpertBackend {
 public:
  // experts[layer][expert]; borrowed, must outlive the backend.
  LocalExpertBackend(const std::vector<std::vector<ExpertWeights>>* experts, int n_expert,
                     ops::NumericPath path, ThreadPool* pool);

  void Submit(const ExpertBatch& batch, float* out) override;
  absl::Status Wait() override;
  // madvise(MADV_WILLNEED) over the pages of each expert matrix whose first
  // page is not resident (mincore), so that experts paged out of the mmapped
  // GGUF are read ahead. Out-of-range layers and experts are ignored.
  void Prefetch(int layer, absl::Span<const int32_t> experts) override;
  // Sizes the runner's buffers for the widest experts of the model.
  void Reserve(int64_t n_tokens, int k) override;

 private:
  const std::vector<std::vector<ExpertWeights>>* const experts_;
  const uintptr_t page_size_;
  ExpertGroupRunner runner_;
  absl::Status pending_;
};

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_LOCAL_EXPERT_BACKEND_H_
