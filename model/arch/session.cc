#include "model/arch/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"
#include "common/status_macros.h"
#include "model/moe/router.h"
#include "model/ops/attend.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/vector_ops.h"

namespace colibri::arch {
namespace {

constexpr int kDefaultMaxCtx = 4096;
// Positions of KV cache rows committed beyond those a step writes.
constexpr int kCommitAhead = 64;
// YaRN's correction range, fixed by the GGUF families that use it.
constexpr double kYarnBetaFast = 32.0;
constexpr double kYarnBetaSlow = 1.0;

void AddInPlace(float* dst, const float* src, int64_t n) { ops::Add(dst, src, dst, n); }

}  // namespace

int Session::ContextSize(const ModelConfig& config, int requested) {
  if (requested <= 0) return std::min(config.n_ctx_train, kDefaultMaxCtx);
  return std::min(requested, config.n_ctx_train);
}

const char* KvTypeName(KvType type) { return type == KvType::kF16 ? "f16" : "f32"; }

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
                                                                : 4 * prefetch_count_)) {
  const int64_t B = n_batch_;
  const ModelConfig& c = c_;
  const size_t n_seq = static_cast<size_t>(options.n_seq);
  n_past_.assign(n_seq, 0);
  committed_.assign(n_seq, 0);
  const bool mla = c.attention == AttentionKind::kMla;
  const int latent_row = c.kv_lora_rank + c.n_rot;
  cache_rows_.resize(c.n_layer);
  cache_offset_.resize(c.n_layer);
  size_t total_rows = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    cache_rows_[il] = c.is_window_layer(il)
                          ? static_cast<int>(std::min<int64_t>(n_ctx, c.sliding_window + B - 1))
                          : n_ctx;
    cache_offset_[il] = total_rows;
    total_rows += cache_rows_[il];
  }
  seq_cache_rows_ = total_rows;
  k_slots_.resize(n_seq);
  v_slots_.resize(n_seq);
  k_slot_elems_ = total_rows * (mla ? latent_row : c.kv_dim());
  v_slot_elems_ = mla ? 0 : total_rows * c.v_dim();
  kv_elem_bytes_ = options.kv_type == KvType::kF16 ? sizeof(uint16_t) : sizeof(float);

  const int half = c.n_rot / 2;
  rope_cos_.resize(static_cast<size_t>(n_ctx) * half);
  rope_sin_.resize(static_cast<size_t>(n_ctx) * half);
  // YaRN: pair i keeps its frequency below the ramp [low, high], is
  // interpolated (divided by the factor) above it, and blended inside.
  double yarn_low = 0, yarn_high = 0;
  if (c.yarn) {
    auto corr = [&](double beta) {
      return c.n_rot * std::log(c.yarn_orig_ctx / (beta * 2 * M_PI)) /
             (2 * std::log(static_cast<double>(c.rope_freq_base)));
    };
    yarn_low = std::max(0.0, std::floor(corr(kYarnBetaFast)));
    yarn_high = std::min(c.n_rot - 1.0, std::ceil(corr(kYarnBetaSlow)));
  }
  for (int pos = 0; pos < n_ctx; ++pos) {
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.n_rot);
      double theta = static_cast<double>(c.rope_freq_scale) * pos * freq;
      double magnitude = 1.0;
      if (c.yarn) {
        const double extrap = pos * freq;
        const double ramp =
            1.0 - std::clamp((i - yarn_low) / std::max(0.001, yarn_high - yarn_low), 0.0, 1.0);
        theta = theta * (1.0 - ramp) + extrap * ramp;
        magnitude = c.rope_magnitude;
      }
      rope_cos_[static_cast<size_t>(pos) * half + i] =
          static_cast<float>(std::cos(theta) * magnitude);
      rope_sin_[static_cast<size_t>(pos) * half + i] =
          static_cast<float>(std::sin(theta) * magnitude);
    }
  }

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

void Session::EnsureSlot(int seq, int positions) {
  if (k_slots_[seq] == nullptr) {
    // Default-initialized: nothing is committed until the madvise below or a write.
    k_slots_[seq].reset(new uint8_t[k_slot_elems_ * kv_elem_bytes_]);
    if (v_slot_elems_ > 0) v_slots_[seq].reset(new uint8_t[v_slot_elems_ * kv_elem_bytes_]);
    ++n_slots_;
  }
  // Rows are committed kCommitAhead positions at a time, one madvise per
  // layer and KV head for K and for V. Committed as written, a token's rows
  // (2 KiB of Qwen3-30B-A3B's K per layer, over its 4 heads) went into a
  // fresh page every few tokens per head, and decode stopped for the fault
  // (about 85 us per token of the 4-layer Qwen3-30B-A3B-shaped model on a
  // KVM guest, 1% of a token). The rows keep what they hold, so ring layers
  // and rows past a truncation are safe.
  if (!commit_ahead_ || positions <= committed_[seq]) return;
  const int target = std::min(n_ctx_, positions + kCommitAhead);
  // Standard attention: each KV head's rows (head_dim / head_dim_v elements);
  // MLA: one run of latent rows.
  const bool mla = c_.attention == AttentionKind::kMla;
  const int runs = mla ? 1 : c_.n_head_kv;
  const size_t k_row = (mla ? c_.kv_lora_rank + c_.n_rot : c_.head_dim) * kv_elem_bytes_;
  const size_t v_row = mla ? 0 : c_.head_dim_v * kv_elem_bytes_;
  for (int il = 0; il < c_.n_layer; ++il) {
    const size_t rows = static_cast<size_t>(cache_rows_[il]);
    const size_t first = std::min(static_cast<size_t>(committed_[seq]), rows);
    const size_t end = std::min(static_cast<size_t>(target), rows);
    if (end <= first) continue;
    for (int h = 0; h < runs; ++h) {
      // Row r of run h: layer il's first row (cache_offset_ rows of every
      // run before it), then h * rows rows of the runs before this one.
      const size_t row = cache_offset_[il] * runs + h * rows + first;
      if (!PopulatePages(k_slots_[seq].get() + row * k_row, (end - first) * k_row) ||
          (v_row > 0 && !PopulatePages(v_slots_[seq].get() + row * v_row, (end - first) * v_row))) {
        commit_ahead_ = false;  // an older kernel: rows are committed as written
        return;
      }
    }
  }
  committed_[seq] = target;
}

void Session::Release(int seq) {
  n_past_[seq] = 0;
  committed_[seq] = 0;
  if (k_slots_[seq] == nullptr) return;
  k_slots_[seq].reset();
  v_slots_[seq].reset();
  --n_slots_;
}

int64_t Session::kv_bytes_allocated() const {
  return static_cast<int64_t>(n_slots_) *
         static_cast<int64_t>((k_slot_elems_ + v_slot_elems_) * kv_elem_bytes_);
}

void Session::Truncate(int seq, int n) {
  n = std::max(0, std::min(n, n_past_[seq]));
  for (int il = 0; il < c_.n_layer; ++il) {
    // Position n - window (the oldest the next token reads) must not have
    // been overwritten by a dropped position.
    if (c_.is_window_layer(il) && n_past_[seq] - 1 >= n - c_.sliding_window + cache_rows_[il]) {
      n = 0;
    }
  }
  n_past_[seq] = n;
}

int Session::max_truncate() const {
  int most = n_ctx_;
  for (int il = 0; il < c_.n_layer; ++il) {
    // Truncate keeps the rest when n_past - n <= rows - window.
    if (c_.is_window_layer(il))
      most = std::min(most, std::max(0, cache_rows_[il] - c_.sliding_window));
  }
  return most;
}

absl::Status Session::CheckTokens(int seq, absl::Span<const int32_t> tokens) const {
  const int64_t n_total = static_cast<int64_t>(tokens.size());
  if (n_total == 0) return absl::InvalidArgumentError("no tokens to evaluate");
  if (n_past_[seq] + n_total > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("context overflow: ", n_past_[seq], " + ", n_total,
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
  EnsureSlot(seq, n_past_[seq] + static_cast<int>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int row = first + static_cast<int>(i);
    COLIBRI_RETURN_IF_ERROR(model_.EmbedToken(tokens[i], x_.data() + row * c_.n_embd));
    row_seq_[row] = seq;
    row_pos_[row] = n_past_[seq] + static_cast<int>(i);
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
  const int start = n_past_[0];
  const int64_t B = n_batch_;
  for (int64_t done = 0; done < n_total; done += B) {
    const int n = static_cast<int>(std::min(B, n_total - done));
    COLIBRI_RETURN_IF_ERROR(PlaceRows(0, tokens.subspan(done, n), 0));
    const bool last_chunk = done + n == n_total;
    absl::Status s = ForwardRows(n);
    if (!s.ok()) {
      n_past_[0] = start;
      return s;
    }
    if (hidden_observer_ != nullptr) hidden_observer_->OnHiddenStates(n_past_[0], n, x_.data());
    if (logits != nullptr && all_logits) OutputHead(0, n, logits->data() + done * n_vocab);
    if (logits != nullptr && !all_logits && last_chunk) OutputHead(n - 1, 1, logits->data());
    n_past_[0] += n;
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
    n_past_[chunk.seq] += static_cast<int>(chunk.tokens.size());
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
  for (int il = 0; il < c_.n_layer; ++il) {
    AttentionBlock(il, n);
    if (c_.is_dense_layer(il)) {
      DenseFfnBlock(il, n);
    } else {
      COLIBRI_RETURN_IF_ERROR(MoeBlock(il, n));
    }
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

void Session::ApplyRope(float* v, int n_heads, int head_stride, int pos) const {
  const int half = c_.n_rot / 2;
  const float* cs = rope_cos_.data() + static_cast<size_t>(pos) * half;
  const float* sn = rope_sin_.data() + static_cast<size_t>(pos) * half;
  for (int h = 0; h < n_heads; ++h) {
    float* x = v + h * head_stride;
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

namespace {

// A KV cache row from n floats: copied, or rounded to halves.
void StoreCacheRow(const float* src, int n, float* dst) {
  std::memcpy(dst, src, n * sizeof(float));
}
void StoreCacheRow(const float* src, int n, uint16_t* dst) {
  for (int e = 0; e < n; ++e) dst[e] = ops::Fp32ToFp16(src[e]);
}

}  // namespace

void Session::Attention(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim(), kv_dim = c_.kv_dim(), v_dim = c_.v_dim();
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const ops::MatMulOutput qkv[3] = {
      {&L.wq, q_.data(), q_dim}, {&L.wk, k_.data(), kv_dim}, {&L.wv, v_.data(), v_dim}};
  ops::MatMulSharedInput(qkv, 3, xn_.data(), n, options_.path, pool_, &matmul_scratch_);

  const int ring = cache_rows_[il];
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
      for (int h = 0; h < c_.n_head; ++h)
        ops::RmsNorm(q + h * hd, L.q_norm, c_.rms_eps, hd, q + h * hd);
      for (int h = 0; h < c_.n_head_kv; ++h) {
        ops::RmsNorm(k + h * hd, L.k_norm, c_.rms_eps, hd, k + h * hd);
      }
    } else if (c_.qk_norm == QkNorm::kWhole) {
      ops::RmsNorm(q, L.q_norm, c_.rms_eps, q_dim, q);
      ops::RmsNorm(k, L.k_norm, c_.rms_eps, kv_dim, k);
    }
    const int pos = row_pos_[i];
    ApplyRope(q, c_.n_head, hd, pos);
    ApplyRope(k, c_.n_head_kv, hd, pos);
    const size_t slot = static_cast<size_t>(pos % ring);
    WithCacheRows(row_seq_[i], il, [&](auto* k_cache, auto* v_cache) {
      for (int h = 0; h < c_.n_head_kv; ++h) {
        StoreCacheRow(k + h * hd, hd, k_cache + KeyHead(il, h) + slot * hd);
        StoreCacheRow(v + h * hdv, hdv, v_cache + ValueHead(il, h) + slot * hdv);
      }
    });
  }

  // Causal attention, one (head, token) pair per work item.
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.attention_scale();
  const int window = c_.is_window_layer(il) ? c_.sliding_window : 0;
  if (window == 0) {
    // Rows of one sequence in a row (a prompt chunk): blocks of rows per
    // head. Otherwise (decode) blocks of the heads that share a KV head.
    bool distinct = true;
    for (int i = 1; i < n && distinct; ++i) distinct = row_seq_[i] != row_seq_[i - 1];
    if (!distinct) {
      AttentionPrompt(il, n);
      return;
    }
    if (group > 1) {
      AttentionGrouped(il, n);
      return;
    }
  }
  const int64_t items = static_cast<int64_t>(c_.n_head) * n;
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  const int64_t chunk = (items + n_threads - 1) / n_threads;
  auto body = [&](int64_t begin, int64_t end) {
    float* scores = scores_.data() + static_cast<size_t>(begin / chunk) * n_ctx_;
    for (int64_t item = begin; item < end; ++item) {
      const int h = static_cast<int>(item / n);
      const int i = static_cast<int>(item % n);
      const int kvh = h / group;
      const int last = row_pos_[i];
      const int first = window > 0 ? std::max(0, last - window + 1) : 0;
      WithCacheRows(row_seq_[i], il, [&](const auto* k_cache, const auto* v_cache) {
        AttendOne(q_.data() + i * q_dim + h * hd, k_cache + KeyHead(il, kvh), hd,
                  v_cache + ValueHead(il, kvh), hdv, first, last, ring, hd, hdv, scale,
                  L.sinks ? L.sinks + h : nullptr, scores,
                  attn_.data() + i * c_.n_head * hdv + h * hdv);
      });
    }
  };
  if (pool_ != nullptr) {
    pool_->ParallelFor(items, chunk, body);
  } else {
    body(0, items);
  }
}

int Session::HeadsPerBlock(int64_t units, int heads) const {
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  int per = std::min(heads, kAttendBlock);
  while (per > 1 && units * ((heads + per - 1) / per) < n_threads) per = (per + 1) / 2;
  return per;
}

template <typename F>
void Session::ForAttendItems(int64_t items, int dim, F&& f) {
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  const size_t per_thread = static_cast<size_t>(kAttendBlock) * (n_ctx_ + dim);
  if (block_scratch_.size() < per_thread * n_threads) {
    block_scratch_.resize(per_thread * n_threads);
  }
  const int64_t chunk = (items + n_threads - 1) / n_threads;
  auto body = [&](int64_t begin, int64_t end) {
    // At most n_threads chunks run: chunk index begin / chunk picks the buffer.
    float* scratch = block_scratch_.data() + static_cast<size_t>(begin / chunk) * per_thread;
    for (int64_t item = begin; item < end; ++item) f(item, scratch);
  };
  if (pool_ != nullptr) {
    pool_->ParallelFor(items, chunk, body);
  } else {
    body(0, items);
  }
}

void Session::AttentionPrompt(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim();
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.attention_scale();
  // Blocks of up to kAttendBlock consecutive rows of one sequence.
  std::vector<int> blocks;  // first row of each block, then n
  for (int i = 0; i < n; ++i) {
    if (blocks.empty() || i - blocks.back() == kAttendBlock || row_seq_[i] != row_seq_[i - 1]) {
      blocks.push_back(i);
    }
  }
  const int64_t n_blocks = static_cast<int64_t>(blocks.size());
  blocks.push_back(n);
  ForAttendItems(c_.n_head * n_blocks, hd, [&](int64_t item, float* scratch) {
    const int h = static_cast<int>(item / n_blocks);
    const int b = static_cast<int>(item % n_blocks);
    const int i0 = blocks[b], rows = blocks[b + 1] - blocks[b];
    const int kvh = h / group;
    const float* qs[kAttendBlock];
    float* outs[kAttendBlock];
    int lasts[kAttendBlock];
    const float* sinks[kAttendBlock];
    for (int t = 0; t < rows; ++t) {
      qs[t] = q_.data() + (i0 + t) * q_dim + h * hd;
      outs[t] = attn_.data() + (i0 + t) * c_.n_head * hdv + h * hdv;
      lasts[t] = row_pos_[i0 + t];
      sinks[t] = L.sinks ? L.sinks + h : nullptr;
    }
    WithCacheRows(row_seq_[i0], il, [&](const auto* k_cache, const auto* v_cache) {
      AttendBlock(qs, rows, k_cache + KeyHead(il, kvh), hd, v_cache + ValueHead(il, kvh), hdv,
                  lasts, hd, hdv, scale, sinks, scratch, outs);
    });
  });
}

void Session::AttentionGrouped(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim();
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.attention_scale();
  const int64_t units = static_cast<int64_t>(c_.n_head_kv) * n;
  const int per = HeadsPerBlock(units, group);
  const int blocks_per_group = (group + per - 1) / per;
  ForAttendItems(units * blocks_per_group, hd, [&](int64_t item, float* scratch) {
    const int b = static_cast<int>(item % blocks_per_group);
    const int i = static_cast<int>(item / blocks_per_group % n);
    const int kvh = static_cast<int>(item / blocks_per_group / n);
    const int h0 = kvh * group + b * per;
    const int rows = std::min(per, (kvh + 1) * group - h0);
    const float* qs[kAttendBlock];
    float* outs[kAttendBlock];
    int lasts[kAttendBlock];
    const float* sinks[kAttendBlock];
    for (int t = 0; t < rows; ++t) {
      qs[t] = q_.data() + i * q_dim + (h0 + t) * hd;
      outs[t] = attn_.data() + i * c_.n_head * hdv + (h0 + t) * hdv;
      lasts[t] = row_pos_[i];
      sinks[t] = L.sinks ? L.sinks + h0 + t : nullptr;
    }
    WithCacheRows(row_seq_[i], il, [&](const auto* k_cache, const auto* v_cache) {
      AttendBlock(qs, rows, k_cache + KeyHead(il, kvh), hd, v_cache + ValueHead(il, kvh), hdv,
                  lasts, hd, hdv, scale, sinks, scratch, outs);
    });
  });
}

template <typename T>
void Session::AttendBlock(const float* const* q, int rows, const T* keys, int64_t key_stride,
                          const T* values, int64_t value_stride, const int* lasts, int dim,
                          int out_dim, float scale, const float* const* sinks, float* scratch,
                          float* const* out) {
  int n_keys = 0;
  for (int t = 0; t < rows; ++t) n_keys = std::max(n_keys, lasts[t] + 1);
  float* qbuf = scratch;
  float* dots = scratch + static_cast<size_t>(rows) * dim;  // [rows][n_keys]
  for (int t = 0; t < rows; ++t) std::memcpy(qbuf + t * dim, q[t], dim * sizeof(float));
  // dots[t][j] = q_t · key j, the canonical float dot of ops::Dot, each key
  // row read once for the block.
  ops::AttendDots(qbuf, dim, rows, keys, key_stride, n_keys, dim, dots, n_keys);
  // Per query, AttendOne's softmax and weighted sum, operation for operation.
  const float* probs[kAttendBlock];
  int counts[kAttendBlock];
  for (int t = 0; t < rows; ++t) {
    float* scores = dots + static_cast<size_t>(t) * n_keys;
    const int n = lasts[t] + 1;
    ops::SoftmaxInPlace(scores, n, scale, sinks != nullptr ? sinks[t] : nullptr);
    std::fill(out[t], out[t] + out_dim, 0.0f);
    probs[t] = scores;
    counts[t] = n;
  }
  ops::AttendValues(probs, counts, rows, values, value_stride, out_dim, out);
}

template <typename T>
void Session::AttendOne(const float* q, const T* keys, int64_t key_stride, const T* values,
                        int64_t value_stride, int first, int last, int ring, int dim, int out_dim,
                        float scale, const float* sink, float* scores, float* out) {
  const int n_keys = last - first + 1;
  // The keys as runs of consecutive ring rows (two when the window wraps).
  for (int j = 0; j < n_keys;) {
    const int row = (first + j) % ring;
    const int run = std::min(n_keys - j, ring - row);
    ops::AttendDots(q, dim, 1, keys + static_cast<size_t>(row) * key_stride, key_stride, run, dim,
                    scores + j, run);
    j += run;
  }
  ops::SoftmaxInPlace(scores, n_keys, scale, sink);
  std::fill(out, out + out_dim, 0.0f);
  for (int j = 0; j < n_keys;) {
    const int row = (first + j) % ring;
    const int run = std::min(n_keys - j, ring - row);
    const float* p = scores + j;
    ops::AttendValues(&p, &run, 1, values + static_cast<size_t>(row) * value_stride, value_stride,
                      out_dim, &out);
    j += run;
  }
}

void Session::AttentionMla(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim(), hd = c_.head_dim, hdv = c_.head_dim_v;
  const int rank = c_.kv_lora_rank, nope = c_.qk_nope(), row = rank + c_.n_rot;
  const int n_head = c_.n_head;
  const ops::NumericPath path = options_.path;
  if (c_.q_lora_rank > 0) {
    const int ql = c_.q_lora_rank;
    ops::MatMul(L.wq_a, xn_.data(), n, q_a_.data(), ql, path, pool_, &matmul_scratch_);
    for (int i = 0; i < n; ++i) {
      ops::RmsNorm(q_a_.data() + i * ql, L.q_a_norm, c_.rms_eps, ql, q_a_.data() + i * ql);
    }
    ops::MatMul(L.wq_b, q_a_.data(), n, q_.data(), q_dim, path, pool_, &matmul_scratch_);
  } else {
    ops::MatMul(L.wq, xn_.data(), n, q_.data(), q_dim, path, pool_, &matmul_scratch_);
  }
  ops::MatMul(L.wkv_a, xn_.data(), n, kv_a_.data(), row, path, pool_, &matmul_scratch_);

  for (int i = 0; i < n; ++i) {
    const int pos = row_pos_[i];
    float* a = kv_a_.data() + i * row;
    ops::RmsNorm(a, L.kv_a_norm, c_.rms_eps, rank, a);
    ApplyRope(a + rank, 1, 0, pos);
    WithLatentRows(row_seq_[i], il, [&](auto* cache) {
      StoreCacheRow(a, row, cache + static_cast<size_t>(pos) * row);
    });
    ApplyRope(q_.data() + i * q_dim + nope, n_head, hd, pos);
  }

  // Absorbed q: per head [Kb[h] q_nope | q_pe], dotted with the cache rows.
  for (int h = 0; h < n_head; ++h) {
    for (int i = 0; i < n; ++i) {
      const float* q = q_.data() + i * q_dim + h * hd;
      std::memcpy(head_in_.data() + i * nope, q, nope * sizeof(float));
      std::memcpy(q_abs_.data() + (static_cast<size_t>(i) * n_head + h) * row + rank, q + nope,
                  c_.n_rot * sizeof(float));
    }
    ops::MatMul(L.wk_b[h], head_in_.data(), n, head_out_.data(), rank, path, pool_,
                &matmul_scratch_);
    for (int i = 0; i < n; ++i) {
      std::memcpy(q_abs_.data() + (static_cast<size_t>(i) * n_head + h) * row,
                  head_out_.data() + i * rank, rank * sizeof(float));
    }
  }

  // Every head reads the same latent rows: blocks of up to kAttendBlock
  // heads of a token go through one AttendBlock, so each cached row is read
  // once per block rather than once per head (bitwise AttendOne's). Blocks
  // are halved while there are fewer of them than threads.
  const float scale = c_.attention_scale();
  const int per = HeadsPerBlock(n, n_head);
  const int blocks = (n_head + per - 1) / per;
  ForAttendItems(static_cast<int64_t>(n) * blocks, row, [&](int64_t item, float* scratch) {
    const int i = static_cast<int>(item / blocks);
    const int h0 = static_cast<int>(item % blocks) * per;
    const int rows = std::min(per, n_head - h0);
    const float* qs[kAttendBlock];
    float* outs[kAttendBlock];
    int lasts[kAttendBlock];
    for (int t = 0; t < rows; ++t) {
      const size_t at = static_cast<size_t>(i) * n_head + h0 + t;
      qs[t] = q_abs_.data() + at * row;
      outs[t] = latent_.data() + at * rank;
      lasts[t] = row_pos_[i];
    }
    WithLatentRows(row_seq_[i], il, [&](const auto* cache) {
      AttendBlock(qs, rows, cache, row, cache, row, lasts, row, rank, scale, nullptr, scratch,
                  outs);
    });
  });

  // Back from the latent: o[h] = Vb[h] · latent[h].
  for (int h = 0; h < n_head; ++h) {
    for (int i = 0; i < n; ++i) {
      std::memcpy(head_in_.data() + i * rank,
                  latent_.data() + (static_cast<size_t>(i) * n_head + h) * rank,
                  rank * sizeof(float));
    }
    ops::MatMul(L.wv_b[h], head_in_.data(), n, head_out_.data(), hdv, path, pool_,
                &matmul_scratch_);
    for (int i = 0; i < n; ++i) {
      std::memcpy(attn_.data() + static_cast<size_t>(i) * n_head * hdv + h * hdv,
                  head_out_.data() + i * hdv, hdv * sizeof(float));
    }
  }
}

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
    if (c_.shared_expert) AddInPlace(acc, shared_out_.data() + i * d, d);
    AddInPlace(x, acc, d);
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
  const int64_t d = c_.n_embd;
  const int n_expert = c_.n_expert;
  const int count = prefetch_count_;
  for (int depth = 1; depth <= options_.prefetch.depth; ++depth) {
    const int target = il + depth;
    if (target >= c_.n_layer) break;
    if (c_.is_dense_layer(target)) continue;
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
    if (c_.is_dense_layer(il - depth)) continue;  // dense layers predict nothing
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
  if (n_past_[seq] + n_total > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("context overflow: ", n_past_[seq], " + ", n_total,
                                              " rows exceed the context size ", n_ctx_));
  }
  const int64_t n_vocab = c_.n_vocab;
  if (logits != nullptr) {
    const size_t want = static_cast<size_t>(all_logits ? n_total * n_vocab : n_vocab);
    if (logits->size() != want) logits->resize(want);
  }
  const int start = n_past_[seq];
  EnsureSlot(seq, start + static_cast<int>(n_total));
  for (int64_t done = 0; done < n_total; done += n_batch_) {
    const int n = static_cast<int>(std::min<int64_t>(n_batch_, n_total - done));
    std::memcpy(x_.data(), embeddings.data() + done * d, n * d * sizeof(float));
    for (int i = 0; i < n; ++i) {
      row_seq_[i] = seq;
      row_pos_[i] = n_past_[seq] + i;
    }
    const absl::Status s = ForwardRows(n);
    if (!s.ok()) {
      n_past_[seq] = start;
      return s;
    }
    if (hidden_observer_ != nullptr) hidden_observer_->OnHiddenStates(n_past_[seq], n, x_.data());
    if (logits != nullptr && all_logits) OutputHead(0, n, logits->data() + done * n_vocab);
    if (logits != nullptr && !all_logits && done + n == n_total) {
      OutputHead(n - 1, 1, logits->data());
    }
    n_past_[seq] += n;
  }
  stats_.tokens_evaluated += n_total;
  ++stats_.evaluate_calls;
  return absl::OkStatus();
}

}  // namespace colibri::arch
