// Session's MoE block: routing, next-layer expert prediction, the expert
// batch handed to the backend, the shared expert and the weighted sum.
#include "model/arch/session.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "model/moe/router.h"
#include "model/ops/matmul.h"
#include "model/ops/vector_ops.h"

namespace colibri::arch {

absl::Status Session::MoeBlock(int il, int n) {
  MoeRoute(il, n);
  moe::ExpertBatch batch;
  MoeBatch(il, n, &batch);
  SubmitTimed(channel_, batch, expert_out_.data());
  // The shared expert runs while the routed experts are in flight.
  MoeShared(il, n);
  COLIBRI_RETURN_IF_ERROR(WaitTimed(channel_));
  MoeCombine(n);
  return absl::OkStatus();
}

void Session::MoeRoute(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  if (prefetch_count_ > 0) PredictExperts(il, n);
  ops::MatMul(L.router, xn_.data(), n, router_.data(), c_.n_expert, options_.path, pool_,
              &matmul_scratch_);
  moe::RouteExperts(router_.data(), n, c_.n_expert, c_.n_expert_used, Routing(L),
                    route_scratch_.data(), routes_.data(), route_w_.data());
  if (prefetch_count_ > 0) CountPrediction(il, n);
}

void Session::MoeBatch(int il, int n, moe::ExpertBatch* batch) const {
  batch->layer = il;
  batch->n_tokens = n;
  batch->n_embd = c_.n_embd;
  batch->k = c_.n_expert_used;
  batch->x = xn_.data();
  batch->experts = routes_.data();
  batch->weights = route_w_.data();
}

void Session::MoeShared(int il, int n) {
  if (!c_.shared_expert) return;
  const LayerWeights& L = model_.layer(il);
  const int64_t d = c_.n_embd;
  moe::ExpertFfn(L.shared, xn_.data(), n, shared_out_.data(), options_.path, pool_,
                 &shared_scratch_);
  if (L.shared_gate != nullptr) {
    for (int i = 0; i < n; ++i) {
      const float g = ops::Dot(xn_.data() + i * d, L.shared_gate, d);
      const float s = 1.0f / (1.0f + std::exp(-g));
      ops::Scale(shared_out_.data() + i * d, s, d);
    }
  }
}

void Session::MoeCombine(int n) {
  const int64_t d = c_.n_embd;
  const int k = c_.n_expert_used;
  // Sum each token's expert outputs in rank order, then the shared expert.
  const bool weighted = experts_->OutputsWeighted();
  for (int i = 0; i < n; ++i) {
    float* x = x_.data() + i * d;
    float* acc = proj_.data() + i * d;
    for (int r = 0; r < k; ++r) {
      const float w = weighted ? 1.0f : route_w_[i * k + r];
      const float* e = expert_out_.data() + (static_cast<int64_t>(i) * k + r) * d;
      if (r == 0) std::fill(acc, acc + d, 0.0f);
      ops::AddScaled(e, w, acc, d);
    }
    if (c_.shared_expert) ops::Add(acc, shared_out_.data() + i * d, acc, d);
    ops::Add(x, acc, x, d);
  }
}

void Session::SubmitTimed(moe::ExpertBackend* backend, const moe::ExpertBatch& batch, float* out) {
  if (outstanding_++ == 0) outstanding_since_ = std::chrono::steady_clock::now();
  backend->Submit(batch, out);
}

absl::Status Session::WaitTimed(moe::ExpertBackend* backend) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = backend->Wait();
  const auto end = std::chrono::steady_clock::now();
  stats_.expert_wait_seconds += std::chrono::duration<double>(end - start).count();
  if (--outstanding_ == 0) {
    stats_.expert_outstanding_seconds +=
        std::chrono::duration<double>(end - outstanding_since_).count();
  }
  return status;
}

moe::RoutingOptions Session::Routing(const LayerWeights& layer) const {
  moe::RoutingOptions o;
  o.sigmoid = c_.gating == Gating::kSigmoid;
  o.selection_bias = layer.selection_bias;
  o.n_groups = c_.n_expert_groups;
  o.n_groups_used = c_.n_group_used;
  o.normalize = c_.norm_topk;
  o.scale = c_.expert_weights_scale;
  o.logit_bias = layer.router_bias;
  o.softmax_topk = c_.softmax_topk;
  return o;
}

void Session::PredictExperts(int il, int n) {
  const auto start = std::chrono::steady_clock::now();
  for (int depth = 1; depth <= options_.prefetch.depth; ++depth) {
    const int target = il + depth;
    if (target >= c_.n_layer) break;
    if (c_.is_dense_layer(target)) continue;
    PredictLayer(target, depth, n);
  }
  stats_.predict_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Session::PredictFirstMoeLayer(int n) {
  if (prefetch_count_ == 0 || c_.n_layer_dense_lead >= c_.n_layer) return;
  const auto start = std::chrono::steady_clock::now();
  PredictLayer(c_.n_layer_dense_lead, 1, n);
  stats_.predict_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Session::PredictLayer(int target, int depth, int n) {
  const int64_t d = c_.n_embd;
  const int n_expert = c_.n_expert;
  const int count = prefetch_count_;
  const LayerWeights& T = model_.layer(target);
  for (int i = 0; i < n; ++i) {
    ops::RmsNorm(x_.data() + i * d, T.ffn_norm, c_.rms_eps, d, pred_xn_.data() + i * d);
  }
  ops::MatMul(T.router, pred_xn_.data(), n, pred_router_.data(), n_expert, options_.path, pool_,
              &pred_scratch_);
  // The layer's own selection (gating, bias, groups) with `count` experts.
  moe::RouteExperts(pred_router_.data(), n, n_expert, count, Routing(T), route_scratch_.data(),
                    pred_top_.data(), pred_top_w_.data());
  std::fill(pred_votes_.begin(), pred_votes_.end(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(n) * count; ++i) ++pred_votes_[pred_top_[i]];
  int n_union = 0;
  for (int e = 0; e < n_expert; ++e) {
    if (pred_votes_[e] > 0) pred_ids_[n_union++] = e;
  }
  // Most-voted first; std::sort on a total order does not allocate.
  std::sort(pred_ids_.begin(), pred_ids_.begin() + n_union, [this](int32_t a, int32_t b) {
    return pred_votes_[a] != pred_votes_[b] ? pred_votes_[a] > pred_votes_[b] : a < b;
  });
  const int n_hint = std::min(n_union, prefetch_max_union_);
  uint8_t* mask =
      predicted_.data() + (static_cast<size_t>(depth - 1) * c_.n_layer + target) * n_expert;
  std::fill(mask, mask + n_expert, 0);
  for (int j = 0; j < n_hint; ++j) mask[pred_ids_[j]] = 1;
  channel_->Prefetch(target, absl::MakeConstSpan(pred_ids_.data(), n_hint));
}

void Session::CountPrediction(int il, int n) {
  const int n_expert = c_.n_expert;
  std::fill(routed_mask_.begin(), routed_mask_.end(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(n) * c_.n_expert_used; ++i) {
    routed_mask_[routes_[i]] = 1;
  }
  for (int depth = 1; depth <= options_.prefetch.depth; ++depth) {
    // The first MoE layer is predicted at depth 1 from the step's input
    // (PredictFirstMoeLayer); the others by the MoE layer `depth` before.
    const bool predicted =
        il == c_.n_layer_dense_lead ? depth == 1 : depth <= il && !c_.is_dense_layer(il - depth);
    if (!predicted) continue;
    const uint8_t* mask =
        predicted_.data() + (static_cast<size_t>(depth - 1) * c_.n_layer + il) * n_expert;
    PredictorStats& s = stats_.predictor[depth - 1];
    PredictorStats& at_layer = stats_.layers[il].predictor;
    ++s.layers;
    if (depth == 1) ++at_layer.layers;
    for (int e = 0; e < n_expert; ++e) {
      s.routed += routed_mask_[e];
      s.predicted += mask[e];
      s.hits += routed_mask_[e] & mask[e];
      if (depth == 1) {
        at_layer.routed += routed_mask_[e];
        at_layer.predicted += mask[e];
        at_layer.hits += routed_mask_[e] & mask[e];
      }
    }
  }
}

}  // namespace colibri::arch
