// Routed experts computed in this process from weights it can address (the
// coordinator's mmapped GGUF, or an expert node's RAM tier).
#ifndef COLIBRI_MODEL_MOE_LOCAL_EXPERT_BACKEND_H_
#define COLIBRI_MODEL_MOE_LOCAL_EXPERT_BACKEND_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "model/moe/expert_backend.h"
#include "model/moe/expert_ffn.h"

namespace colibri::moe {

// Groups a batch's (token, rank) routes by expert and runs each expert once over
// all its tokens, in ascending token order. Because ExpertFfn is batch
// invariant, out[t][r] does not depend on how routes are grouped, so any other
// grouping of the same routes (e.g. over several nodes) yields identical bits.
class ExpertGroupRunner {
 public:
  // Looks up an expert's weights; NotFound / DataLoss when it cannot be had.
  using ExpertLookup = std::function<absl::StatusOr<ExpertWeights>(int layer, int expert)>;

  ExpertGroupRunner(int n_expert, ops::NumericPath path, ThreadPool* pool);

  // Computes the routes of `batch` whose expert satisfies `owned(expert)`
  // (all when owned is null), writing out[t][r] for those.
  absl::Status Run(const ExpertBatch& batch, const ExpertLookup& lookup,
                   const std::function<bool(int)>& owned, float* out);

 private:
  const int n_expert_;
  const ops::NumericPath path_;
  ThreadPool* const pool_;
  // Routes grouped by expert (a counting sort): the routes of expert e are
  // sorted_routes_[expert_begin_[e] .. expert_begin_[e + 1]), each t * k + r.
  std::vector<int64_t> expert_begin_;   // [n_expert + 1]
  std::vector<int64_t> sorted_routes_;  // [n_tokens * k]
  std::vector<float> gathered_in_;                      // [m][n_embd]
  std::vector<float> gathered_out_;                     // [m][n_embd]
  ExpertFfnScratch scratch_;
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

 private:
  const std::vector<std::vector<ExpertWeights>>* const experts_;
  const uintptr_t page_size_;
  ExpertGroupRunner runner_;
  absl::Status pending_;
};

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_LOCAL_EXPERT_BACKEND_H_
