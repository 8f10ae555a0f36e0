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
// (NotFound, DataLoss) pass through.
absl::Status ComputeLayerWork(const LayerWork& work,
                              const moe::ExpertGroupRunner::ExpertLookup& lookup, ThreadPool* pool,
                              std::vector<float>* out);

// Fills `outputs` with `out` (ComputeLayerWork's rows) as the reply's tensor:
// [n_tokens or n_routes, n_embd] in work.reply_dtype.
void EncodeLayerOutputs(const LayerWork& work, const std::vector<float>& out, v1::Tensor* outputs);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_LAYER_COMPUTE_H_
