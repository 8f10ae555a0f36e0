// One ComputeLayer request, validated and computed: the part of the node's
// service that knows nothing about gRPC threads.
//
// Computation goes through moe::ExpertGroupRunner, the code the coordinator
// uses locally, on a batch whose "tokens" are the request's routes (route i
// gathers its token's hidden row, k = 1). Each expert runs once over its
// routes in request order; since ExpertFfn is batch invariant the output row
// of a route is bitwise the one the coordinator would compute for it.
#ifndef COLIBRI_EXPERT_NODE_LAYER_COMPUTE_H_
#define COLIBRI_EXPERT_NODE_LAYER_COMPUTE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "colibri/v1/expert.pb.h"
#include "common/thread_pool.h"
#include "expert_node/expert_record.h"
#include "model/moe/local_expert_backend.h"
#include "model/ops/matmul.h"

namespace colibri::expert_node {

// A request after validation; points into the request it came from where it can.
struct LayerWork {
  int32_t layer = 0;
  int64_t n_tokens = 0;
  int64_t n_embd = 0;
  int32_t n_expert = 0;               // runner width: model's, or max expert + 1
  std::vector<float> hidden;          // [n_tokens][n_embd]
  std::vector<int32_t> route_token;   // [n_routes]
  std::vector<int32_t> route_expert;  // [n_routes]
  std::vector<float> route_weight;    // [n_routes]
  ops::NumericPath path = ops::NumericPath::kFast;
  bool reduce_per_token = false;
  v1::DType reply_dtype = v1::DTYPE_F32;  // F32 or BF16

  int64_t n_routes() const { return static_cast<int64_t>(route_token.size()); }
};

// Checks a request against the model it names (`model`: that model's record)
// and builds its work. InvalidArgument with a message naming the field for
// any malformed part: layer or expert outside the model's range (when known),
// hidden not F32 or BF16 [n_tokens, n_embd] with exactly n_tokens * n_embd
// elements of that dtype (BF16 rows are widened to float32 here), a reply
// dtype other than F32 (or unset) and BF16, a route's token outside
// [0, n_tokens), an unknown numeric path, or a reply that would exceed
// `max_reply_bytes` in the reply dtype (decided from the shape alone, before
// anything is copied or computed).
absl::StatusOr<LayerWork> ParseLayerRequest(const v1::ComputeLayerRequest& request,
                                            const ModelInfo& model,
                                            uint64_t max_reply_bytes = uint64_t{1} << 30);

// Computes the work. out: [n_routes][n_embd] in request route order, or
// [n_tokens][n_embd] when reduce_per_token (each token's routes weighted and
// summed in request order; tokens without routes are zero). Lookup errors
// (NotFound, DataLoss) pass through. The same as one LayerRows over every
// routed expert.
absl::Status ComputeLayerWork(const LayerWork& work,
                              const moe::ExpertGroupRunner::ExpertLookup& lookup, ThreadPool* pool,
                              std::vector<float>* out);

// Computes a work's outputs in parts: the routes of some experts now, of
// others later (as their weights arrive from disk), then the outputs.
//
// Invariant (bitwise the same outputs whatever the parts and their order):
// each route's row [n_embd] is computed into its own slot of a
// [n_routes][n_embd] buffer, and a route's row depends only on its token's
// hidden row, its expert's weights and the numeric path (ExpertFfn is batch
// invariant: it does not depend on which other routes run with it). Nothing
// is summed until Finish, which reduces the rows exactly as ComputeLayerWork
// does: per token, weighted, in request route order.
//
// Thread-safety: one thread at a time (the pool's workers run the products).
class LayerRows {
 public:
  // work and pool are borrowed and must outlive this.
  LayerRows(const LayerWork& work, ThreadPool* pool);

  // Computes the rows of every route whose expert is in `experts` (of
  // work.layer; each at most once over the object's life, else
  // InvalidArgument), looking their weights up through `lookup`. Lookup errors
  // pass through; rows of a failed call may be partly written.
  absl::Status Compute(const std::vector<int32_t>& experts,
                       const moe::ExpertGroupRunner::ExpertLookup& lookup);
  // The outputs, as ComputeLayerWork's `out`. FailedPrecondition unless every
  // route was computed.
  absl::Status Finish(std::vector<float>* out);

 private:
  const LayerWork& work_;
  moe::ExpertGroupRunner runner_;
  std::vector<float> rows_;  // [n_routes][n_embd]
  // [n_expert]: the Compute call (1, 2, ...) that computed the expert; 0: not yet.
  std::vector<int32_t> expert_part_;
  int32_t parts_ = 0;  // Compute calls so far
  int64_t routes_done_ = 0;
  // One Compute's routes, gathered: indices, token rows, experts, weights,
  // output rows.
  std::vector<int64_t> sub_routes_;
  std::vector<float> sub_x_;
  std::vector<int32_t> sub_expert_;
  std::vector<float> sub_weight_;
  std::vector<float> sub_rows_;
};

// Fills `outputs` with `out` (ComputeLayerWork's rows) as the reply's tensor:
// [n_tokens or n_routes, n_embd] in work.reply_dtype.
void EncodeLayerOutputs(const LayerWork& work, const std::vector<float>& out, v1::Tensor* outputs);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_LAYER_COMPUTE_H_
