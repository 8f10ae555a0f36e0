#include "model/arch/session.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/moe/router.h"
#include "model/ops/matmul.h"
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
  if (options.n_seq < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n_seq ", options.n_seq, " is < 1"));
  }
  if (absl::Status status = KvCache::CheckType(c, options.kv_type); !status.ok()) return status;
  return std::unique_ptr<Session>(new Session(model, experts, pool, options, n_ctx));
}

Session::Session(const Model& model, moe::ExpertBackend* experts, ThreadPool* pool,
                 const SessionOptions& options, int n_ctx)
    : model_(model),
      c_(model.config()),
      experts_(experts),
      channel_(experts),
      pool_(pool),
      options_(options),
      pipeline_halves_(options.pipeline_halves),
      n_ctx_(n_ctx),
      n_batch_(std::min(options.n_batch, n_ctx)),
      prefetch_count_(options.prefetch.depth == 0  ? 0
                      : options.prefetch.count > 0 ? options.prefetch.count
                                                   : model.config().n_expert_used),
      prefetch_max_union_(std::min(model.config().n_expert, options.prefetch.max_union > 0
                                                                ? options.prefetch.max_union
                                                                : 4 * prefetch_count_)),
      kv_(model.config(), n_ctx, n_batch_, options.n_seq, options.kv_type),
      rope_(model.config(), n_ctx) {
  const int64_t B = n_batch_;
  const ModelConfig& c = c_;
  const size_t n_seq = static_cast<size_t>(options.n_seq);
  stats_.layers.resize(c.n_layer);
  const bool mla = c.attention == AttentionKind::kMla;
  const int latent_row = c.kv_lora_rank + c.n_rot;

  row_seq_.resize(B);
  row_pos_.resize(B);
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
  // The buffers above are written (zeroed) now; the backend's are touched
  // here as well, so that the first prompt does not page-fault through them.
  experts_->Reserve(B, c.n_expert_used);
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  scores_.resize(static_cast<size_t>(n_threads) * n_ctx);
  route_scratch_.resize(moe::RouteScratchSize(c.n_expert));
  if (n_seq > 1) batch_logits_.resize(n_seq * c.n_vocab);
  gather_rows_.reserve(B);
  if (mla) {
    q_a_.resize(B * std::max(c.q_lora_rank, 1));
    kv_a_.resize(B * latent_row);
    q_abs_.resize(B * c.n_head * latent_row);
    latent_.resize(B * c.n_head * c.kv_lora_rank);
    head_in_.resize(B * std::max(c.qk_nope(), c.kv_lora_rank));
    head_out_.resize(B * std::max(c.kv_lora_rank, c.head_dim_v));
  }
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

absl::Status Session::CheckTokens(int seq, absl::Span<const int32_t> tokens) const {
  const int64_t n_total = static_cast<int64_t>(tokens.size());
  if (n_total == 0) return absl::InvalidArgumentError("no tokens to evaluate");
  if (kv_.n_past(seq) + n_total > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("context overflow: ", kv_.n_past(seq), " + ", n_total,
                                              " tokens exceed the context size ", n_ctx_));
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= c_.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", c_.n_vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Session::PlaceRows(int seq, absl::Span<const int32_t> tokens, int first) {
  kv_.Reserve(seq, kv_.n_past(seq) + static_cast<int>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int row = first + static_cast<int>(i);
    COLIBRI_RETURN_IF_ERROR(model_.EmbedToken(tokens[i], x_.data() + row * c_.n_embd));
    row_seq_[row] = seq;
    row_pos_[row] = kv_.n_past(seq) + static_cast<int>(i);
  }
  return absl::OkStatus();
}

absl::Status Session::Evaluate(absl::Span<const int32_t> tokens, bool all_logits,
                               std::vector<float>* logits) {
  COLIBRI_RETURN_IF_ERROR(CheckTokens(0, tokens));
  const int64_t n_total = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = c_.n_vocab;
  if (logits != nullptr) {
    const size_t want = static_cast<size_t>(all_logits ? n_total * n_vocab : n_vocab);
    if (logits->size() != want) logits->resize(want);
  }
  const int start = kv_.n_past(0);
  const int64_t B = n_batch_;
  for (int64_t done = 0; done < n_total; done += B) {
    const int n = static_cast<int>(std::min(B, n_total - done));
    COLIBRI_RETURN_IF_ERROR(PlaceRows(0, tokens.subspan(done, n), 0));
    const bool last_chunk = done + n == n_total;
    absl::Status s = ForwardRows(n);
    if (!s.ok()) {
      kv_.set_n_past(0, start);
      return s;
    }
    if (hidden_observer_ != nullptr) hidden_observer_->OnHiddenStates(kv_.n_past(0), n, x_.data());
    if (logits != nullptr && all_logits) OutputHead(0, n, logits->data() + done * n_vocab);
    if (logits != nullptr && !all_logits && last_chunk) OutputHead(n - 1, 1, logits->data());
    kv_.set_n_past(0, kv_.n_past(0) + n);
  }
  stats_.tokens_evaluated += n_total;
  ++stats_.evaluate_calls;
  return absl::OkStatus();
}

absl::Status Session::EvaluateBatch(absl::Span<const SequenceChunk> chunks) {
  if (chunks.empty()) return absl::InvalidArgumentError("no sequence to evaluate");
  int64_t n = 0;
  for (size_t j = 0; j < chunks.size(); ++j) {
    const SequenceChunk& chunk = chunks[j];
    if (chunk.seq < 0 || chunk.seq >= n_seq()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", chunk.seq, " is outside [0, ", n_seq(), ")"));
    }
    for (size_t i = 0; i < j; ++i) {
      if (chunks[i].seq == chunk.seq) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", chunk.seq, " appears twice in one batch"));
      }
    }
    const absl::Status s = CheckTokens(chunk.seq, chunk.tokens);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("sequence ", chunk.seq, ": ", s.message()));
    }
    n += static_cast<int64_t>(chunk.tokens.size());
  }
  if (n > n_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the batch has ", n, " tokens, more than n_batch ", n_batch_));
  }
  int rows = 0;
  for (const SequenceChunk& chunk : chunks) {
    COLIBRI_RETURN_IF_ERROR(PlaceRows(chunk.seq, chunk.tokens, rows));
    rows += static_cast<int>(chunk.tokens.size());
  }
  // Two pipelined halves, split between sequences near the middle row; when
  // that leaves a half under a quarter of the rows (one long prompt chunk),
  // at the middle row, inside that chunk.
  int split = 0;
  const PipelineHalves mode = pipeline_halves_;
  if (mode == PipelineHalves::kOn && rows >= 2) {
    for (size_t j = 0; j + 1 < chunks.size(); ++j) {
      split += static_cast<int>(chunks[j].tokens.size());
      if (2 * split >= rows) break;
    }
    if (4 * std::min(split, rows - split) < rows) split = rows / 2;
  } else if (mode == PipelineHalves::kAuto &&
             static_cast<int>(chunks.size()) >= kMinPipelineSequences &&
             experts_->SecondChannel() != nullptr) {
    for (size_t j = 0; j + 1 < chunks.size(); ++j) {
      split += static_cast<int>(chunks[j].tokens.size());
      if (2 * split >= rows) break;
    }
  }
  // The caches are written only at positions >= n_past_, which stay unused on
  // failure: nothing to roll back.
  if (split > 0) {
    COLIBRI_RETURN_IF_ERROR(ForwardHalves(split, rows - split));
    ++stats_.split_batches;
  } else {
    COLIBRI_RETURN_IF_ERROR(ForwardRows(rows));
  }
  rows = 0;
  for (const SequenceChunk& chunk : chunks) {
    const size_t size = chunk.tokens.size();
    if (chunk.hidden != nullptr) {
      const float* from = x_.data() + static_cast<int64_t>(rows) * c_.n_embd;
      chunk.hidden->assign(from, from + static_cast<int64_t>(size) * c_.n_embd);
    }
    rows += static_cast<int>(size);
  }
  GatherLogits(chunks);  // moves the rows of x_
  for (const SequenceChunk& chunk : chunks) {
    kv_.set_n_past(chunk.seq, kv_.n_past(chunk.seq) + static_cast<int>(chunk.tokens.size()));
  }
  stats_.tokens_evaluated += n;
  ++stats_.evaluate_calls;
  return absl::OkStatus();
}

void Session::GatherLogits(absl::Span<const SequenceChunk> chunks) {
  // Every wanted row goes through one output-head product, so that the
  // output weights are read once per step however many sequences and
  // positions ask: rows are compacted to the front of x_ (row r_j >= j, in
  // increasing j, so no row is overwritten before it is copied).
  const int64_t d = c_.n_embd;
  const int64_t n_vocab = c_.n_vocab;
  std::vector<int>& wanted = gather_rows_;
  wanted.clear();
  int first = 0;
  int askers = 0;
  for (const SequenceChunk& chunk : chunks) {
    const int size = static_cast<int>(chunk.tokens.size());
    if (chunk.logits != nullptr) {
      const int from = chunk.all_logits ? first : first + size - 1;
      for (int row = from; row < first + size; ++row) wanted.push_back(row);
      ++askers;
    }
    first += size;
  }
  if (wanted.empty()) return;
  for (size_t j = 0; j < wanted.size(); ++j) {
    if (wanted[j] != static_cast<int>(j)) {
      std::memcpy(x_.data() + j * d, x_.data() + wanted[j] * d, d * sizeof(float));
    }
  }
  const int n_rows = static_cast<int>(wanted.size());
  if (askers == 1) {  // straight into the one vector that asked
    for (const SequenceChunk& chunk : chunks) {
      if (chunk.logits == nullptr) continue;
      chunk.logits->resize(static_cast<size_t>(n_rows * n_vocab));
      OutputHead(0, n_rows, chunk.logits->data());
    }
    return;
  }
  if (batch_logits_.size() < static_cast<size_t>(n_rows * n_vocab)) {
    batch_logits_.resize(static_cast<size_t>(n_rows * n_vocab));
  }
  OutputHead(0, n_rows, batch_logits_.data());
  const float* row = batch_logits_.data();
  for (const SequenceChunk& chunk : chunks) {
    if (chunk.logits == nullptr) continue;
    const int64_t rows = chunk.all_logits ? static_cast<int64_t>(chunk.tokens.size()) : 1;
    chunk.logits->assign(row, row + rows * n_vocab);
    row += rows * n_vocab;
  }
}

absl::Status Session::ForwardRows(int n) {
  channel_ = experts_;
  PredictFirstMoeLayer(n);
  for (int il = 0; il < c_.n_layer; ++il) {
    const auto start = std::chrono::steady_clock::now();
    const double waited = stats_.expert_wait_seconds;
    AttentionBlock(il, n);
    if (c_.is_dense_layer(il)) {
      DenseFfnBlock(il, n);
    } else {
      COLIBRI_RETURN_IF_ERROR(MoeBlock(il, n));
    }
    LayerStats& l = stats_.layers[il];
    const double wait = stats_.expert_wait_seconds - waited;
    l.expert_wait_seconds += wait;
    l.compute_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - wait;
  }
  return absl::OkStatus();
}

void Session::DenseFfnBlock(int il, int n) {
  moe::ExpertFfn(model_.layer(il).ffn, xn_.data(), n, proj_.data(), options_.path, pool_,
                 &shared_scratch_);
  AddInPlace(x_.data(), proj_.data(), n * c_.n_embd);
}

void Session::AttentionBlock(int il, int n) {
  const int64_t d = c_.n_embd;
  const LayerWeights& L = model_.layer(il);
  for (int i = 0; i < n; ++i) {
    ops::RmsNorm(x_.data() + i * d, L.attn_norm, c_.rms_eps, d, xn_.data() + i * d);
  }
  if (c_.attention == AttentionKind::kMla) {
    AttentionMla(il, n);
  } else {
    Attention(il, n);
  }
  ops::MatMul(L.wo, attn_.data(), n, proj_.data(), d, options_.path, pool_, &matmul_scratch_);
  if (L.bo != nullptr) {
    for (int i = 0; i < n; ++i) AddInPlace(proj_.data() + i * d, L.bo, d);
  }
  AddInPlace(x_.data(), proj_.data(), n * d);

  for (int i = 0; i < n; ++i) {
    ops::RmsNorm(x_.data() + i * d, L.ffn_norm, c_.rms_eps, d, xn_.data() + i * d);
  }
}

void Session::OutputHead(int first, int rows, float* logits) {
  const int64_t d = c_.n_embd;
  for (int i = first; i < first + rows; ++i) {
    ops::RmsNorm(x_.data() + i * d, model_.output_norm(), c_.rms_eps, d, xn_.data() + i * d);
  }
  ops::MatMul(model_.output(), xn_.data() + first * d, rows, logits, c_.n_vocab, options_.path,
              pool_, &matmul_scratch_);
}

absl::Status Session::EvaluateEmbeddings(int seq, absl::Span<const float> embeddings,
                                         bool all_logits, std::vector<float>* logits) {
  if (seq < 0 || seq >= n_seq()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", seq, " is outside [0, ", n_seq(), ")"));
  }
  const int64_t d = c_.n_embd;
  if (embeddings.empty() || embeddings.size() % d != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("embeddings of ", embeddings.size(), " floats are not rows of ", d));
  }
  const int64_t n_total = static_cast<int64_t>(embeddings.size()) / d;
  if (kv_.n_past(seq) + n_total > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("context overflow: ", kv_.n_past(seq), " + ", n_total,
                                              " rows exceed the context size ", n_ctx_));
  }
  const int64_t n_vocab = c_.n_vocab;
  if (logits != nullptr) {
    const size_t want = static_cast<size_t>(all_logits ? n_total * n_vocab : n_vocab);
    if (logits->size() != want) logits->resize(want);
  }
  const int start = kv_.n_past(seq);
  kv_.Reserve(seq, start + static_cast<int>(n_total));
  for (int64_t done = 0; done < n_total; done += n_batch_) {
    const int n = static_cast<int>(std::min<int64_t>(n_batch_, n_total - done));
    std::memcpy(x_.data(), embeddings.data() + done * d, n * d * sizeof(float));
    for (int i = 0; i < n; ++i) {
      row_seq_[i] = seq;
      row_pos_[i] = kv_.n_past(seq) + i;
    }
    const absl::Status s = ForwardRows(n);
    if (!s.ok()) {
      kv_.set_n_past(seq, start);
      return s;
    }
    if (hidden_observer_ != nullptr) hidden_observer_->OnHiddenStates(kv_.n_past(seq), n, x_.data());
    if (logits != nullptr && all_logits) OutputHead(0, n, logits->data() + done * n_vocab);
    if (logits != nullptr && !all_logits && done + n == n_total) {
      OutputHead(n - 1, 1, logits->data());
    }
    kv_.set_n_past(seq, kv_.n_past(seq) + n);
  }
  stats_.tokens_evaluated += n_total;
  ++stats_.evaluate_calls;
  return absl::OkStatus();
}

}  // namespace colibri::arch
