#include "expert_node/layer_compute.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/moe/expert_backend.h"
#include "rpc/wire_tensor.h"

namespace colibri::expert_node {
namespace {

// Bytes of one request's per-route rows (gathered inputs, outputs) the node
// accepts: 1 GiB.
constexpr uint64_t kMaxRouteBytes = uint64_t{1} << 30;

}  // namespace

absl::StatusOr<LayerWork> ParseLayerRequest(const v1::ComputeLayerRequest& request,
                                            const ModelInfo& model, uint64_t max_reply_bytes) {
  LayerWork work;
  work.layer = request.layer();
  if (work.layer < 0 || (model.n_layer > 0 && work.layer >= model.n_layer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", work.layer, " out of range [0, ", model.n_layer, ")"));
  }
  switch (request.path()) {
    case v1::NUMERIC_PATH_UNSPECIFIED:
    case v1::NUMERIC_PATH_FAST:
      work.path = ops::NumericPath::kFast;
      break;
    case v1::NUMERIC_PATH_EXACT:
      work.path = ops::NumericPath::kExact;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown numeric path ", static_cast<int>(request.path())));
  }
  work.reduce_per_token = request.reduce_per_token();

  switch (request.reply_dtype()) {
    case v1::DTYPE_UNSPECIFIED:  // senders before reply_dtype
    case v1::DTYPE_F32:
      work.reply_dtype = v1::DTYPE_F32;
      break;
    case v1::DTYPE_BF16:
      work.reply_dtype = v1::DTYPE_BF16;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("reply_dtype ", static_cast<int>(request.reply_dtype()),
                       " is not a wire activation type (DTYPE_F32, DTYPE_BF16)"));
  }

  const v1::Tensor& hidden = request.hidden();
  COLIBRI_RETURN_IF_ERROR(rpc::CheckWireMatrix(hidden, "hidden", -1, model.n_embd));
  work.n_tokens = hidden.shape(0);
  work.n_embd = hidden.shape(1);
  // Refuse by shape what cannot be answered, before copying or computing:
  // the reply (one row per route, or per token when reduced) and the
  // gathered inputs (one row per route) are bounded.
  const uint64_t n_routes_requested = static_cast<uint64_t>(request.routes_size());
  const uint64_t row_bytes = static_cast<uint64_t>(work.n_embd) * 4;
  const uint64_t reply_row_bytes =
      static_cast<uint64_t>(work.n_embd) * rpc::WireElementBytes(work.reply_dtype);
  const uint64_t reply_rows =
      request.reduce_per_token() ? static_cast<uint64_t>(work.n_tokens) : n_routes_requested;
  if (reply_rows * reply_row_bytes > max_reply_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        n_routes_requested, " routes over ", work.n_tokens, " tokens of width ", work.n_embd,
        " need a reply of ", reply_rows * reply_row_bytes, " bytes, more than the node's limit of ",
        max_reply_bytes, " bytes: split the request"));
  }
  if (n_routes_requested * row_bytes > kMaxRouteBytes) {
    return absl::InvalidArgumentError(absl::StrCat(n_routes_requested, " routes of width ",
                                                   work.n_embd,
                                                   " exceed the node's per-request limit"));
  }
  work.hidden.resize(static_cast<size_t>(work.n_tokens * work.n_embd));
  rpc::DecodeFloats(hidden.data().data(), work.n_tokens * work.n_embd, hidden.dtype(),
                    work.hidden.data());

  const int n_routes = request.routes_size();
  work.route_token.reserve(n_routes);
  work.route_expert.reserve(n_routes);
  work.route_weight.reserve(n_routes);
  int32_t max_expert = -1;
  for (int i = 0; i < n_routes; ++i) {
    const v1::Route& r = request.routes(i);
    if (r.token() < 0 || r.token() >= work.n_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("routes[", i, "]: token ", r.token(),
                                                     " out of range [0, ", work.n_tokens, ")"));
    }
    // 99999 is the largest index a store key holds.
    if (r.expert() < 0 || r.expert() > 99999 ||
        (model.n_expert > 0 && r.expert() >= model.n_expert)) {
      return absl::InvalidArgumentError(absl::StrCat("routes[", i, "]: expert ", r.expert(),
                                                     " out of range [0, ", model.n_expert, ")"));
    }
    max_expert = std::max(max_expert, r.expert());
    work.route_token.push_back(r.token());
    work.route_expert.push_back(r.expert());
    work.route_weight.push_back(r.weight());
  }
  work.n_expert = model.n_expert > 0 ? model.n_expert : max_expert + 1;
  return work;
}

absl::Status ComputeLayerWork(const LayerWork& work,
                              const moe::ExpertGroupRunner::ExpertLookup& lookup, ThreadPool* pool,
                              std::vector<float>* out) {
  std::vector<int32_t> experts(work.route_expert.begin(), work.route_expert.end());
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  LayerRows rows(work, pool);
  COLIBRI_RETURN_IF_ERROR(rows.Compute(experts, lookup));
  return rows.Finish(out);
}

LayerRows::LayerRows(const LayerWork& work, ThreadPool* pool)
    : work_(work),
      runner_(work.n_expert, work.path, pool),
      rows_(static_cast<size_t>(work.n_routes() * work.n_embd)),
      expert_part_(static_cast<size_t>(std::max(work.n_expert, 0)), 0) {}

absl::Status LayerRows::Compute(const std::vector<int32_t>& experts,
                                const moe::ExpertGroupRunner::ExpertLookup& lookup) {
  ++parts_;
  for (const int32_t e : experts) {
    if (e < 0 || e >= work_.n_expert || expert_part_[e] != 0) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", work_.layer, " expert ", e,
                                                     ": out of range [0, ", work_.n_expert,
                                                     ") or computed twice"));
    }
  }
  for (const int32_t e : experts) expert_part_[e] = parts_;
  const int64_t n_routes = work_.n_routes();
  const int64_t n_embd = work_.n_embd;
  sub_routes_.clear();
  for (int64_t i = 0; i < n_routes; ++i) {
    if (expert_part_[work_.route_expert[i]] == parts_) sub_routes_.push_back(i);
  }
  const int64_t m = static_cast<int64_t>(sub_routes_.size());
  if (m == 0) return absl::OkStatus();
  // Every route at once (nothing was streamed): the rows go straight to
  // rows_. Otherwise the part's routes are gathered, in request order, into
  // a batch of their own and their rows scattered back.
  const bool whole = m == n_routes;
  sub_x_.resize(static_cast<size_t>(m * n_embd));
  sub_expert_.resize(static_cast<size_t>(m));
  sub_weight_.resize(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) {
    const int64_t i = sub_routes_[j];
    std::memcpy(sub_x_.data() + j * n_embd, work_.hidden.data() + work_.route_token[i] * n_embd,
                n_embd * sizeof(float));
    sub_expert_[j] = work_.route_expert[i];
    sub_weight_[j] = work_.route_weight[i];
  }
  if (!whole) sub_rows_.resize(static_cast<size_t>(m * n_embd));
  moe::ExpertBatch batch;
  batch.layer = work_.layer;
  batch.n_tokens = m;
  batch.n_embd = n_embd;
  batch.k = 1;
  batch.x = sub_x_.data();
  batch.experts = sub_expert_.data();
  batch.weights = sub_weight_.data();
  COLIBRI_RETURN_IF_ERROR(
      runner_.Run(batch, lookup, nullptr, whole ? rows_.data() : sub_rows_.data()));
  if (!whole) {
    for (int64_t j = 0; j < m; ++j) {
      std::memcpy(rows_.data() + sub_routes_[j] * n_embd, sub_rows_.data() + j * n_embd,
                  n_embd * sizeof(float));
    }
  }
  routes_done_ += m;
  return absl::OkStatus();
}

absl::Status LayerRows::Finish(std::vector<float>* out) {
  const int64_t n_routes = work_.n_routes();
  if (routes_done_ != n_routes) {
    return absl::FailedPreconditionError(absl::StrCat("layer ", work_.layer, ": ", routes_done_,
                                                      " of ", n_routes, " routes computed"));
  }
  const int64_t n_embd = work_.n_embd;
  if (!work_.reduce_per_token) {
    *out = std::move(rows_);
    return absl::OkStatus();
  }
  out->assign(static_cast<size_t>(work_.n_tokens * n_embd), 0.0f);
  for (int64_t i = 0; i < n_routes; ++i) {
    float* dst = out->data() + work_.route_token[i] * n_embd;
    const float* src = rows_.data() + i * n_embd;
    const float w = work_.route_weight[i];
    for (int64_t c = 0; c < n_embd; ++c) dst[c] += w * src[c];
  }
  return absl::OkStatus();
}

void EncodeLayerOutputs(const LayerWork& work, const std::vector<float>& out, v1::Tensor* outputs) {
  outputs->set_dtype(work.reply_dtype);
  outputs->add_shape(work.reduce_per_token ? work.n_tokens : work.n_routes());
  outputs->add_shape(work.n_embd);
  const int64_t n = static_cast<int64_t>(out.size());
  outputs->mutable_data()->resize(static_cast<size_t>(n) * rpc::WireElementBytes(work.reply_dtype));
  rpc::EncodeFloats(out.data(), n, work.reply_dtype, outputs->mutable_data()->data());
}

}  // namespace colibri::expert_node
