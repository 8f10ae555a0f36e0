#include "model/arch/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/moe/router.h"
#include "model/ops/vector_ops.h"

namespace colibri::arch {
namespace {

constexpr int kDefaultMaxCtx = 4096;

void AddInPlace(float* dst, const float* src, int64_t n) { ops::Add(dst, src, dst, n); }

}  // namespace

int Session::ContextSize(const ModelConfig& config, int requested) {
  if (requested <= 0) return std::min(config.n_ctx_train, kDefaultMaxCtx);
  return std::min(requested, config.n_ctx_train);
}

absl::StatusOr<std::unique_ptr<Session>> Session::Create(const Model& model,
                                                         moe::ExpertBackend* experts,
                                                         ThreadPool* pool,
                                                         const SessionOptions& options) {
  const ModelConfig& c = model.config();
  if (options.n_ctx < 0) {
    return absl::InvalidArgumentError(absl::StrCat("context size ", options.n_ctx, " is < 0"));
  }
  const int n_ctx = ContextSize(c, options.n_ctx);
  if (n_ctx <= 0) return absl::InvalidArgumentError("context size must be > 0");
  if (options.n_batch <= 0) return absl::InvalidArgumentError("n_batch must be > 0");
  if (experts == nullptr) return absl::InvalidArgumentError("an expert backend is required");
  const PrefetchOptions& p = options.prefetch;
  if (p.depth < 0 || p.depth > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefetch depth ", p.depth, " is not 0, 1 or 2"));
  }
  if (p.count < 0 || p.count > c.n_expert) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefetch count ", p.count, " is outside [0, ", c.n_expert, "]"));
  }
  if (p.max_union < 0) return absl::InvalidArgumentError("prefetch max_union must be >= 0");
  return std::unique_ptr<Session>(new Session(model, experts, pool, options, n_ctx));
}

Session::Session(const Model& model, moe::ExpertBackend* experts, ThreadPool* pool,
                 const SessionOptions& options, int n_ctx)
    : model_(model),
      c_(model.config()),
      experts_(experts),
      pool_(pool),
      options_(options),
      n_ctx_(n_ctx),
      prefetch_count_(options.prefetch.depth == 0  ? 0
                      : options.prefetch.count > 0 ? options.prefetch.count
                                                   : model.config().n_expert_used),
      prefetch_max_union_(std::min(model.config().n_expert, options.prefetch.max_union > 0
                                                                ? options.prefetch.max_union
                                                                : 4 * prefetch_count_)) {
  const int64_t B = std::min(options.n_batch, n_ctx);
  const ModelConfig& c = c_;
  k_cache_.assign(static_cast<size_t>(c.n_layer) * n_ctx * c.kv_dim(), 0.0f);
  v_cache_.assign(static_cast<size_t>(c.n_layer) * n_ctx * c.v_dim(), 0.0f);

  const int half = c.n_rot / 2;
  rope_cos_.resize(static_cast<size_t>(n_ctx) * half);
  rope_sin_.resize(static_cast<size_t>(n_ctx) * half);
  for (int pos = 0; pos < n_ctx; ++pos) {
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.n_rot);
      const double theta = static_cast<double>(c.rope_freq_scale) * pos * freq;
      rope_cos_[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::cos(theta));
      rope_sin_[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::sin(theta));
    }
  }

  x_.resize(B * c.n_embd);
  xn_.resize(B * c.n_embd);
  q_.resize(B * c.q_dim());
  k_.resize(B * c.kv_dim());
  v_.resize(B * c.v_dim());
  attn_.resize(B * c.n_head * c.head_dim_v);
  proj_.resize(B * c.n_embd);
  router_.resize(B * c.n_expert);
  routes_.resize(B * c.n_expert_used);
  route_w_.resize(B * c.n_expert_used);
  expert_out_.resize(B * c.n_expert_used * c.n_embd);
  if (c.shared_expert) shared_out_.resize(B * c.n_embd);
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  scores_.resize(static_cast<size_t>(n_threads) * n_ctx);
  if (options.prefetch.depth > 0) {
    pred_xn_.resize(B * c.n_embd);
    pred_router_.resize(B * c.n_expert);
    pred_top_.resize(B * prefetch_count_);
    pred_top_w_.resize(B * prefetch_count_);
    pred_votes_.resize(c.n_expert);
    pred_ids_.resize(c.n_expert);
    predicted_.resize(static_cast<size_t>(options.prefetch.depth) * c.n_layer * c.n_expert);
    routed_mask_.resize(c.n_expert);
  }
}

void Session::Truncate(int n) { n_past_ = std::max(0, std::min(n, n_past_)); }

absl::Status Session::Evaluate(absl::Span<const int32_t> tokens, bool all_logits,
                               std::vector<float>* logits) {
  const int64_t n_total = static_cast<int64_t>(tokens.size());
  if (n_total == 0) return absl::InvalidArgumentError("no tokens to evaluate");
  if (n_past_ + n_total > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("context overflow: ", n_past_, " + ", n_total,
                                              " tokens exceed the context size ", n_ctx_));
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= c_.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", c_.n_vocab, ")"));
    }
  }
  const int64_t n_vocab = c_.n_vocab;
  if (logits != nullptr) {
    const size_t want = static_cast<size_t>(all_logits ? n_total * n_vocab : n_vocab);
    if (logits->size() != want) logits->resize(want);
  }
  const int start = n_past_;
  const int64_t B = static_cast<int64_t>(x_.size()) / c_.n_embd;
  for (int64_t done = 0; done < n_total; done += B) {
    const int n = static_cast<int>(std::min(B, n_total - done));
    for (int i = 0; i < n; ++i) {
      COLIBRI_RETURN_IF_ERROR(model_.EmbedToken(tokens[done + i], x_.data() + i * c_.n_embd));
    }
    const bool last_chunk = done + n == n_total;
    float* out = nullptr;
    if (logits != nullptr && all_logits) out = logits->data() + done * n_vocab;
    if (logits != nullptr && !all_logits && last_chunk) out = logits->data();
    absl::Status s = ForwardChunk(n, all_logits, out);
    if (!s.ok()) {
      n_past_ = start;
      return s;
    }
    n_past_ += n;
  }
  stats_.tokens_evaluated += n_total;
  ++stats_.evaluate_calls;
  return absl::OkStatus();
}

absl::Status Session::ForwardChunk(int n, bool all_logits, float* logits) {
  const int64_t d = c_.n_embd;
  for (int il = 0; il < c_.n_layer; ++il) {
    const LayerWeights& L = model_.layer(il);
    for (int i = 0; i < n; ++i) {
      ops::RmsNorm(x_.data() + i * d, L.attn_norm, c_.rms_eps, d, xn_.data() + i * d);
    }
    Attention(il, n);
    ops::MatMul(L.wo, attn_.data(), n, proj_.data(), d, options_.path, pool_, &matmul_scratch_);
    AddInPlace(x_.data(), proj_.data(), n * d);

    for (int i = 0; i < n; ++i) {
      ops::RmsNorm(x_.data() + i * d, L.ffn_norm, c_.rms_eps, d, xn_.data() + i * d);
    }
    COLIBRI_RETURN_IF_ERROR(MoeBlock(il, n));
  }
  if (logits == nullptr) return absl::OkStatus();
  const int first = all_logits ? 0 : n - 1;
  const int rows = n - first;
  for (int i = first; i < n; ++i) {
    ops::RmsNorm(x_.data() + i * d, model_.output_norm(), c_.rms_eps, d, xn_.data() + i * d);
  }
  ops::MatMul(model_.output(), xn_.data() + first * d, rows, logits, c_.n_vocab, options_.path,
              pool_, &matmul_scratch_);
  return absl::OkStatus();
}

void Session::ApplyRope(float* v, int n_heads, int pos) const {
  const int half = c_.n_rot / 2;
  const float* cs = rope_cos_.data() + static_cast<size_t>(pos) * half;
  const float* sn = rope_sin_.data() + static_cast<size_t>(pos) * half;
  for (int h = 0; h < n_heads; ++h) {
    float* x = v + h * c_.head_dim;
    if (c_.rope_type == RopeType::kNorm) {
      for (int i = 0; i < half; ++i) {
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * cs[i] - x1 * sn[i];
        x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

void Session::Attention(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim(), kv_dim = c_.kv_dim(), v_dim = c_.v_dim();
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  ops::MatMul(L.wq, xn_.data(), n, q_.data(), q_dim, options_.path, pool_, &matmul_scratch_);
  ops::MatMul(L.wk, xn_.data(), n, k_.data(), kv_dim, options_.path, pool_, &matmul_scratch_);
  ops::MatMul(L.wv, xn_.data(), n, v_.data(), v_dim, options_.path, pool_, &matmul_scratch_);

  float* k_cache = k_cache_.data() + static_cast<size_t>(il) * n_ctx_ * kv_dim;
  float* v_cache = v_cache_.data() + static_cast<size_t>(il) * n_ctx_ * v_dim;
  for (int i = 0; i < n; ++i) {
    float* q = q_.data() + i * q_dim;
    float* k = k_.data() + i * kv_dim;
    float* v = v_.data() + i * v_dim;
    if (c_.qkv_bias) {
      AddInPlace(q, L.bq, q_dim);
      AddInPlace(k, L.bk, kv_dim);
      AddInPlace(v, L.bv, v_dim);
    }
    if (c_.qk_norm == QkNorm::kPerHead) {
      for (int h = 0; h < c_.n_head; ++h) ops::RmsNorm(q + h * hd, L.q_norm, c_.rms_eps, hd, q + h * hd);
      for (int h = 0; h < c_.n_head_kv; ++h) {
        ops::RmsNorm(k + h * hd, L.k_norm, c_.rms_eps, hd, k + h * hd);
      }
    } else if (c_.qk_norm == QkNorm::kWhole) {
      ops::RmsNorm(q, L.q_norm, c_.rms_eps, q_dim, q);
      ops::RmsNorm(k, L.k_norm, c_.rms_eps, kv_dim, k);
    }
    const int pos = n_past_ + i;
    ApplyRope(q, c_.n_head, pos);
    ApplyRope(k, c_.n_head_kv, pos);
    std::memcpy(k_cache + static_cast<size_t>(pos) * kv_dim, k, kv_dim * sizeof(float));
    std::memcpy(v_cache + static_cast<size_t>(pos) * v_dim, v, v_dim * sizeof(float));
  }

  // Causal attention, one (head, token) pair per work item.
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t items = static_cast<int64_t>(c_.n_head) * n;
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  const int64_t chunk = (items + n_threads - 1) / n_threads;
  auto body = [&](int64_t begin, int64_t end) {
    float* scores = scores_.data() + static_cast<size_t>(begin / chunk) * n_ctx_;
    for (int64_t item = begin; item < end; ++item) {
      const int h = static_cast<int>(item / n);
      const int i = static_cast<int>(item % n);
      const int kvh = h / group;
      const int n_keys = n_past_ + i + 1;
      const float* q = q_.data() + i * q_dim + h * hd;
      float max = -INFINITY;
      for (int j = 0; j < n_keys; ++j) {
        const float s = ops::Dot(q, k_cache + static_cast<size_t>(j) * kv_dim + kvh * hd, hd) * scale;
        scores[j] = s;
        max = std::max(max, s);
      }
      float sum = 0.0f;
      for (int j = 0; j < n_keys; ++j) {
        scores[j] = std::exp(scores[j] - max);
        sum += scores[j];
      }
      const float inv = 1.0f / sum;
      float* out = attn_.data() + i * c_.n_head * hdv + h * hdv;
      std::fill(out, out + hdv, 0.0f);
      for (int j = 0; j < n_keys; ++j) {
        const float p = scores[j] * inv;
        const float* v = v_cache + static_cast<size_t>(j) * v_dim + kvh * hdv;
        for (int e = 0; e < hdv; ++e) out[e] += p * v[e];
      }
    }
  };
  if (pool_ != nullptr) {
    pool_->ParallelFor(items, chunk, body);
  } else {
    body(0, items);
  }
}

absl::Status Session::MoeBlock(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int64_t d = c_.n_embd;
  const int k = c_.n_expert_used;
  if (prefetch_count_ > 0) PredictExperts(il, n);
  ops::MatMul(L.router, xn_.data(), n, router_.data(), c_.n_expert, options_.path, pool_,
              &matmul_scratch_);
  moe::SelectExperts(router_.data(), n, c_.n_expert, k, c_.norm_topk, routes_.data(),
                     route_w_.data());
  if (prefetch_count_ > 0) CountPrediction(il, n);

  moe::ExpertBatch batch;
  batch.layer = il;
  batch.n_tokens = n;
  batch.n_embd = d;
  batch.k = k;
  batch.x = xn_.data();
  batch.experts = routes_.data();
  batch.weights = route_w_.data();
  experts_->Submit(batch, expert_out_.data());

  // The shared expert runs while the routed experts are in flight.
  if (c_.shared_expert) {
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

  const auto wait_start = std::chrono::steady_clock::now();
  absl::Status status = experts_->Wait();
  stats_.expert_wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  COLIBRI_RETURN_IF_ERROR(status);

  // Sum each token's expert outputs in rank order, then the shared expert.
  for (int i = 0; i < n; ++i) {
    float* x = x_.data() + i * d;
    float* acc = proj_.data() + i * d;
    for (int r = 0; r < k; ++r) {
      const float w = route_w_[i * k + r];
      const float* e = expert_out_.data() + (static_cast<int64_t>(i) * k + r) * d;
      if (r == 0) std::fill(acc, acc + d, 0.0f);
      ops::AddScaled(e, w, acc, d);
    }
    if (c_.shared_expert) AddInPlace(acc, shared_out_.data() + i * d, d);
    AddInPlace(x, acc, d);
  }
  return absl::OkStatus();
}

void Session::PredictExperts(int il, int n) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t d = c_.n_embd;
  const int n_expert = c_.n_expert;
  const int count = prefetch_count_;
  for (int depth = 1; depth <= options_.prefetch.depth; ++depth) {
    const int target = il + depth;
    if (target >= c_.n_layer) break;
    const LayerWeights& T = model_.layer(target);
    for (int i = 0; i < n; ++i) {
      ops::RmsNorm(x_.data() + i * d, T.ffn_norm, c_.rms_eps, d, pred_xn_.data() + i * d);
    }
    ops::MatMul(T.router, pred_xn_.data(), n, pred_router_.data(), n_expert, options_.path, pool_,
                &pred_scratch_);
    // Softmax is monotonic, so the top `count` probabilities are the top logits;
    // SelectExperts orders them as routing does (ties to the lower id).
    moe::SelectExperts(pred_router_.data(), n, n_expert, count, false, pred_top_.data(),
                       pred_top_w_.data());
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
    experts_->Prefetch(target, absl::MakeConstSpan(pred_ids_.data(), n_hint));
  }
  stats_.predict_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Session::CountPrediction(int il, int n) {
  const int n_expert = c_.n_expert;
  std::fill(routed_mask_.begin(), routed_mask_.end(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(n) * c_.n_expert_used; ++i) {
    routed_mask_[routes_[i]] = 1;
  }
  for (int depth = 1; depth <= options_.prefetch.depth && depth <= il; ++depth) {
    const uint8_t* mask =
        predicted_.data() + (static_cast<size_t>(depth - 1) * c_.n_layer + il) * n_expert;
    PredictorStats& s = stats_.predictor[depth - 1];
    ++s.layers;
    for (int e = 0; e < n_expert; ++e) {
      s.routed += routed_mask_[e];
      s.predicted += mask[e];
      s.hits += routed_mask_[e] & mask[e];
    }
  }
}

}  // namespace colibri::arch
