// Sequences being evaluated: their KV caches and the scratch of the forward pass.
//
// Evaluate() runs tokens of sequence 0 through the model at its next
// positions. A prompt is evaluated layer by layer over all its tokens at once
// (in chunks of n_batch); decoding feeds one token at a time against the KV
// cache. Routed experts go through the ExpertBackend given at creation.
//
// Batching (SessionOptions::n_seq > 1): the session holds n_seq sequences, each
// with its own KV cache slot of n_ctx positions, and EvaluateBatch() runs one
// forward pass over a chunk of tokens from each of several sequences: the
// dense matrix products run over all rows together, attention per sequence
// over its own cache, and each MoE layer submits one ExpertBackend batch with
// the rows of every sequence (one round trip per involved node per layer).
// The kernels are batch-invariant, so a sequence's logits are bitwise the same
// whether it ran alone or batched with others, in whatever chunks.
// A session with n_seq = 1 is the plain single-sequence case.
//
// Two half-batches (SessionOptions::pipeline_halves): EvaluateBatch may split
// its rows into two halves A and B and pipeline them layer by layer: while
// A's routed experts are in flight, the session runs B's attention, norms and
// routing (and B's while A's are), so the coordinator's compute hides behind
// the round trips to the nodes. The split falls between sequences, or inside
// a sequence's chunk (a long prompt chunk), whose earlier positions are then
// in A: A runs each layer's attention before B, so B's rows attend to A's
// keys and values of that layer. Every kernel is batch-invariant, so the
// logits are bitwise those of the unsplit batch. With a backend that has a
// SecondChannel() both halves are in flight at once; without one (forced on)
// at most one is.
//
// The KV cache (kv_cache.h) holds a slot per sequence, allocated when the
// sequence is first evaluated; Release(seq) gives a slot's memory back. A
// session with many sequences costs nothing for those never used.
//
// After the first call of each batch size, Evaluate does not allocate: every
// buffer is sized at creation for n_batch tokens and n_ctx positions (the
// first evaluation of a sequence allocates its KV slot, the first split
// batch the second half's buffers).
//
// Next-layer prediction (SessionOptions::prefetch): once layer L's MoE input is
// known, the session applies layer L+1's (and with depth 2 layer L+2's) FFN
// norm and router to the same residual stream and hands the predicted experts
// to ExpertBackend::Prefetch before submitting layer L. The first MoE layer,
// which no earlier MoE layer precedes, is predicted at the start of each
// forward step (of each half-batch) from the rows' input, the token
// embeddings, through that layer's FFN norm and router, before layer 0 runs. It works on its own
// scratch and never changes a result: the tokens and logits are bitwise the
// same with prediction on and off.
//
// Thread-safety: not thread-safe; one Evaluate at a time. The Model, backend and
// pool are borrowed and must outlive the session.
#ifndef COLIBRI_MODEL_ARCH_SESSION_H_
#define COLIBRI_MODEL_ARCH_SESSION_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/thread_pool.h"
#include "model/arch/kv_cache.h"
#include "model/arch/model.h"
#include "model/arch/rope.h"
#include "model/moe/expert_backend.h"
#include "model/moe/expert_ffn.h"
#include "model/moe/router.h"
#include "model/ops/matmul.h"

namespace colibri::arch {

// Next-layer expert prediction: layer L+d's router (with that family's gating,
// selection bias and groups) applied to the residual stream at layer L's MoE
// input, normed with layer L+d's ffn_norm. Leading dense layers neither
// predict nor are predicted.
struct PrefetchOptions {
  // Layers ahead to predict: 0 off, 1 the next layer, 2 the next two.
  // Default: 0.
  int depth = 0;
  // Experts predicted per token. Default: 0, meaning the model's n_expert_used.
  int count = 0;
  // Most experts hinted per layer and batch. Each token contributes its top
  // `count`; when the union over the batch's tokens is larger (long prompt
  // batches), the experts predicted by the most tokens are kept, ties to the
  // lower id. Default: 0, meaning 4 * count.
  int max_union = 0;
};

// When EvaluateBatch pipelines two half-batches (see Session).
enum class PipelineHalves {
  // When it pays: the backend has a SecondChannel() (remote experts) and the
  // batch holds at least kMinPipelineSequences sequences. (serve decides from
  // measured step times instead: see Session::set_pipeline_halves.)
  kAuto,
  // Whenever the batch holds at least two tokens (for tests, benchmarks and
  // serve's measured decision; correct with any backend): between sequences
  // near the middle row, or at the middle row when no sequence boundary
  // leaves each half a quarter of the rows.
  kOn,
  // Never.
  kOff,
};
// Fewest sequences a batch needs for kAuto to split it.
inline constexpr int kMinPipelineSequences = 4;

struct SessionOptions {
  // Positions the KV cache holds, at most the model's context_length (a larger
  // value is capped: see Session::ContextSize). Default: 0, meaning
  // min(context_length, 4096).
  int n_ctx = 0;
  // Tokens evaluated together during prompt processing. Default: 512.
  int n_batch = 512;
  // Numeric path of every matrix product. Default: kFast.
  ops::NumericPath path = ops::NumericPath::kFast;
  // Next-layer expert prediction. Default: off.
  PrefetchOptions prefetch;
  // Sequences held, each with a KV cache slot of n_ctx positions, allocated
  // when the sequence is first evaluated. Default: 1.
  int n_seq = 1;
  // Pipelining of two half-batches in EvaluateBatch. Default: kAuto.
  PipelineHalves pipeline_halves = PipelineHalves::kAuto;
  // Element type of the KV cache. Default: kF32.
  KvType kv_type = KvType::kF32;
};

// One sequence's part of an EvaluateBatch step: `tokens` evaluated at that
// sequence's next positions. `logits` (may be null) receives
// [tokens.size()][n_vocab] when all_logits (e.g. a token and its drafts to
// verify), else [n_vocab] for the last token. A chunk with null logits (a
// prompt chunk that does not end its prompt) costs no output head.
// `hidden` (may be null) receives [tokens.size()][n_embd]: each token's
// residual stream after the last layer, before the output norm (what an
// MTP / NextN block continues from, model/arch/nextn.h).
struct SequenceChunk {
  int seq = 0;
  absl::Span<const int32_t> tokens;
  bool all_logits = false;
  std::vector<float>* logits = nullptr;
  std::vector<float>* hidden = nullptr;
};

// Accuracy of the expert prediction for one depth, summed over the layers that
// were predicted (and the batches): per layer and batch, `routed` counts the
// distinct experts the batch was routed to, `predicted` the distinct experts
// hinted, `hits` those in both.
struct PredictorStats {
  int64_t layers = 0;
  int64_t routed = 0;
  int64_t predicted = 0;
  int64_t hits = 0;
  // hits / routed and hits / predicted; 0 when nothing was counted.
  double recall() const { return routed > 0 ? static_cast<double>(hits) / routed : 0.0; }
  double precision() const { return predicted > 0 ? static_cast<double>(hits) / predicted : 0.0; }
};

// One layer's share of the counters below. Timed in unsplit forward passes
// only (the layers of two pipelined halves interleave).
struct LayerStats {
  // Time in the layer not blocked in ExpertBackend::Wait: attention, norms,
  // routing, prediction, the shared expert, the weighted sum.
  double compute_seconds = 0;
  double expert_wait_seconds = 0;  // blocked in Wait for this layer's experts
  PredictorStats predictor;        // the depth-1 prediction of this layer
};

// Timing and work counters, cumulative since creation or ResetStats().
struct SessionStats {
  int64_t tokens_evaluated = 0;
  int64_t evaluate_calls = 0;
  double expert_wait_seconds = 0;  // time blocked in ExpertBackend::Wait
  // Time at least one expert batch was outstanding (from its Submit to the
  // return of its Wait). The coordinator computed during
  // expert_outstanding_seconds - expert_wait_seconds of it.
  double expert_outstanding_seconds = 0;
  int64_t split_batches = 0;    // EvaluateBatch calls run as two half-batches
  double predict_seconds = 0;   // time spent predicting experts (incl. Prefetch)
  PredictorStats predictor[2];  // [depth - 1]: predictions of layer L+1, L+2
  std::vector<LayerStats> layers;  // [n_layer]

  // Share of the time experts were outstanding during which the coordinator
  // computed (1 - wait / outstanding); 0 when nothing was outstanding.
  double overlap() const {
    return expert_outstanding_seconds > 0
               ? std::max(0.0, 1.0 - expert_wait_seconds / expert_outstanding_seconds)
               : 0.0;
  }
};

// Receives the residual stream after the last layer (before the output norm)
// of the tokens Session::Evaluate and EvaluateEmbeddings run: the hidden
// states an MTP / NextN block continues from (model/arch/nextn.h).
class HiddenStateObserver {
 public:
  virtual ~HiddenStateObserver() = default;
  // rows: [n][n_embd], the tokens at positions first_pos .. first_pos + n - 1
  // of the sequence evaluated (0 for Evaluate); valid during the call only.
  virtual void OnHiddenStates(int first_pos, int n, const float* rows) = 0;
};

class Session {
 public:
  // The positions a session created with n_ctx = `requested` holds: 0 gives
  // min(context_length, 4096), a value above context_length gives
  // context_length (the model was not trained for more, and the KV cache
  // would be sized for positions it cannot use well).
  static int ContextSize(const ModelConfig& config, int requested);

  static absl::StatusOr<std::unique_ptr<Session>> Create(const Model& model,
                                                         moe::ExpertBackend* experts,
                                                         ThreadPool* pool,
                                                         const SessionOptions& options);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Evaluates `tokens` at positions n_past() .. n_past() + size - 1.
  // logits (may be null) receives [size][n_vocab] when all_logits, else [n_vocab]
  // for the last token. InvalidArgument for an empty batch or a token outside
  // the vocabulary; OutOfRange when the context would overflow n_ctx (nothing is
  // evaluated then). A backend failure is returned as is; the cache is then
  // rolled back to its state before the call.
  absl::Status Evaluate(absl::Span<const int32_t> tokens, bool all_logits,
                        std::vector<float>* logits);

  // Evaluate with input rows instead of token embeddings: embeddings is
  // [n][n_embd], row i taking the place of a token's embedding at position
  // n_past() + i. Same errors as Evaluate (InvalidArgument when the size is
  // not a positive multiple of n_embd).
  absl::Status EvaluateEmbeddings(absl::Span<const float> embeddings, bool all_logits,
                                  std::vector<float>* logits) {
    return EvaluateEmbeddings(0, embeddings, all_logits, logits);
  }
  // The same for sequence `seq` (InvalidArgument outside [0, n_seq)), at
  // positions n_past(seq) onwards.
  absl::Status EvaluateEmbeddings(int seq, absl::Span<const float> embeddings, bool all_logits,
                                  std::vector<float>* logits);

  // Makes Evaluate and EvaluateEmbeddings report hidden states to `observer`
  // (null: none; borrowed, must outlive the session or be unset).
  void set_hidden_observer(HiddenStateObserver* observer) { hidden_observer_ = observer; }

  // Evaluates every chunk in one forward pass; the logits every chunk asks
  // for come from one output-head product. InvalidArgument when there is
  // no chunk, a chunk has no tokens or a token outside the vocabulary, a
  // sequence is outside [0, n_seq) or appears twice, or the chunks hold more
  // than n_batch() tokens together; OutOfRange when a sequence's context would
  // overflow n_ctx. Nothing is evaluated then. A backend failure is returned
  // as is, and every sequence's cache is rolled back to its state before the
  // call.
  absl::Status EvaluateBatch(absl::Span<const SequenceChunk> chunks);

  // Positions evaluated in sequence 0 / in sequence `seq` (in [0, n_seq)).
  int n_past() const { return kv_.n_past(0); }
  int n_past(int seq) const { return kv_.n_past(seq); }
  int n_ctx() const { return n_ctx_; }
  // Sequences held (SessionOptions::n_seq).
  int n_seq() const { return kv_.n_seq(); }
  // Most tokens one forward pass (and one EvaluateBatch) takes:
  // min(n_batch, n_ctx).
  int n_batch() const { return n_batch_; }
  const Model& model() const { return model_; }
  const SessionStats& stats() const { return stats_; }
  // Replaces SessionOptions::pipeline_halves for the EvaluateBatch calls that
  // follow (serve's scheduler decides step by step from measured times).
  void set_pipeline_halves(PipelineHalves mode) { pipeline_halves_ = mode; }

  // Forgets every position of sequence 0 / `seq` (its cache is reused from
  // position 0).
  void Reset() { kv_.Reset(0); }
  void Reset(int seq) { kv_.Reset(seq); }
  // Forgets every position of `seq` (in [0, n_seq)) and frees its KV slot;
  // the next evaluation of `seq` allocates it again.
  void Release(int seq) { kv_.Release(seq); }
  // Bytes of KV cache slots allocated (an upper bound of what they commit).
  int64_t kv_bytes_allocated() const { return kv_.bytes_allocated(); }
  // Positions of sequence `seq` whose cache rows are committed in every layer
  // ahead of their first write (0 where the kernel cannot: before Linux 5.14).
  int kv_positions_committed(int seq) const { return kv_.positions_committed(seq); }
  // Drops positions >= n (n <= n_past()) of sequence 0 / `seq`
  // (KvCache::Truncate: with sliding-window layers possibly everything).
  void Truncate(int n) { kv_.Truncate(0, n); }
  void Truncate(int seq, int n) { kv_.Truncate(seq, n); }
  // Most positions Truncate can always drop from the end and keep the rest
  // (KvCache::max_truncate).
  int max_truncate() const { return kv_.max_truncate(); }
  // The KV cache, for copying a sequence's rows in and out (ExportRows,
  // ImportRows, then set_n_past) between evaluations.
  KvCache& kv_cache() { return kv_; }
  const KvCache& kv_cache() const { return kv_; }

 private:
  Session(const Model& model, moe::ExpertBackend* experts, ThreadPool* pool,
          const SessionOptions& options, int n_ctx);

  // Validates a chunk's tokens for sequence `seq` (see Evaluate).
  absl::Status CheckTokens(int seq, absl::Span<const int32_t> tokens) const;
  // Embeds `tokens` of sequence `seq` into rows first.. of x_, at positions
  // n_past(seq) onwards, and reserves their cache rows.
  absl::Status PlaceRows(int seq, absl::Span<const int32_t> tokens, int first);
  // Runs the n rows of x_ (n <= n_batch) through every layer; row i is token
  // of sequence row_seq_[i] at position row_pos_[i].
  absl::Status ForwardRows(int n);
  // ForwardRows(n_a + n_b) as two pipelined halves: rows [0, n_a) and
  // [n_a, n_a + n_b). Same results.
  absl::Status ForwardHalves(int n_a, int n_b);
  // Attention of layer il over the n active rows, then the FFN norm into xn_.
  void AttentionBlock(int il, int n);
  // The dense FFN of leading dense layer il over n rows, added to x_.
  void DenseFfnBlock(int il, int n);
  // What one half keeps from its routing to the sum of its experts' outputs,
  // and its rows, while the other half is computed: the members of the same
  // names hold the active half's (see ForwardHalves).
  struct HalfRows {
    std::vector<float> x, xn, route_w, expert_out, shared_out;
    std::vector<int32_t> routes;
    std::vector<int> row_seq, row_pos;
    std::vector<uint8_t> predicted;
  };
  // Swaps the per-row buffers with half_ (the other half becomes active).
  void SwapHalves();
  // Final norm and output head of `rows` rows of x_ from `first`, into
  // logits [rows][n_vocab].
  void OutputHead(int first, int rows, float* logits);
  // The logits every chunk of an EvaluateBatch asks for, from one output-head
  // product over the wanted rows of x_ (which it moves to the front).
  void GatherLogits(absl::Span<const SequenceChunk> chunks);
  void Attention(int il, int n);
  // Multi-head Latent Attention (deepseek2), absorbed form over the latent cache.
  void AttentionMla(int il, int n);
  // Softmax attention of one (head, token) item over the cache rows of
  // positions first .. last: row of position j is j % ring. Scores are
  // scale * q·keys[row] over dim floats, out = Σ p_j values[row][0..out_dim).
  // With sink (not NaN) the softmax denominator has an extra exp(sink) term.
  // Rows: the cache's rows as KvCache::WithRows passes them (const float*,
  // const uint16_t* halves, or ops::Q8_0Rows), indexed by element. q8_0 rows
  // are rotated (see KvType): q is rotated to match and out rotated back.
  template <typename Rows>
  static void AttendOne(const float* q, Rows keys, int64_t key_stride, Rows values,
                        int64_t value_stride, int first, int last, int ring, int dim, int out_dim,
                        float scale, const float* sink, float* scores, float* out);
  // Attention() for a prompt chunk (n > 1) on a layer without a sliding
  // window: blocks of up to kAttendBlock consecutive rows of one sequence per
  // head, each through AttendBlock.
  void AttentionPrompt(int il, int n);
  // Attention() for rows of distinct sequences (decode: one row per
  // sequence) on a layer without a sliding window and with several query
  // heads per KV head: the query heads sharing a KV head go through one
  // AttendBlock, so each cached key and value row is read once per block of
  // heads rather than once per head. Bitwise the per-head AttendOne.
  void AttentionGrouped(int il, int n);
  static constexpr int kAttendBlock = 16;
  // Heads per AttendBlock when `units` units (a KV group of a row, or a row)
  // of `heads` heads each are split into blocks: all of them, up to
  // kAttendBlock, halved while the blocks are fewer than the threads (fewer
  // heads share each read, more threads read).
  int HeadsPerBlock(int64_t units, int heads) const;
  // Runs f(item, scratch) for every item < items over the pool, scratch
  // being the running thread's AttendBlock buffer for queries of dim floats
  // (block_scratch_, grown to fit).
  template <typename F>
  void ForAttendItems(int64_t items, int dim, F&& f);
  // AttendOne for `rows` queries q[t] over the cache rows of positions
  // 0 .. lasts[t] (no ring wrap), out[t] for each, with sinks[t] (null, or
  // null entries: no sink): the dot products and the weighted sums of the
  // block each run as one ops::Attend* call (each key and value row read once
  // per few queries), the softmax per query as in AttendOne, so out[t] is
  // bitwise AttendOne's. The queries may be rows of one head (a prompt) or
  // heads sharing one KV head (AttentionGrouped). scratch: kAttendBlock *
  // (dim + max lasts + 1) floats.
  template <typename Rows>
  static void AttendBlock(const float* const* q, int rows, Rows keys, int64_t key_stride,
                          Rows values, int64_t value_stride, const int* lasts, int dim, int out_dim,
                          float scale, const float* const* sinks, float* scratch,
                          float* const* out);
  // Routing options of layer il (its selection bias).
  moe::RoutingOptions Routing(const LayerWeights& layer) const;
  absl::Status MoeBlock(int il, int n);
  // MoeBlock's steps over the n active rows: prediction and routing; the
  // ExpertBatch of those routes; the shared expert; after the batch's Wait,
  // the weighted sum into x_.
  void MoeRoute(int il, int n);
  void MoeBatch(int il, int n, moe::ExpertBatch* batch) const;
  void MoeShared(int il, int n);
  void MoeCombine(int n);
  // Submit / Wait on a backend, timed into stats_.
  void SubmitTimed(moe::ExpertBackend* backend, const moe::ExpertBatch& batch, float* out);
  absl::Status WaitTimed(moe::ExpertBackend* backend);
  // Predicts the experts of layers il+1 .. il+depth from the residual stream
  // x_ at layer il's MoE input and passes them to channel_->Prefetch.
  void PredictExperts(int il, int n);
  // At the start of a step, before layer 0: predicts the first MoE layer's
  // experts from the n rows' input in x_ (token embeddings), recorded as a
  // depth-1 prediction, and passes them to channel_->Prefetch. No-op when
  // prediction is off.
  void PredictFirstMoeLayer(int n);
  // One prediction: layer `target`'s ffn_norm, router and selection (with
  // prefetch_count_ experts per row) over the n rows of x_; the union, most
  // voted first and capped at prefetch_max_union_, goes to predicted_ at
  // `depth` and to channel_->Prefetch.
  void PredictLayer(int target, int depth, int n);
  // Adds layer il's routes (routes_) to stats_.predictor for every depth that
  // predicted layer il.
  void CountPrediction(int il, int n);

  const Model& model_;
  const ModelConfig& c_;
  moe::ExpertBackend* const experts_;
  // The backend of the half being computed: experts_ or its SecondChannel().
  // Prefetch hints go to it.
  moe::ExpertBackend* channel_;
  ThreadPool* const pool_;
  const SessionOptions options_;
  PipelineHalves pipeline_halves_;  // options_.pipeline_halves until set
  const int n_ctx_;
  const int n_batch_;
  const int prefetch_count_;      // experts predicted per token (0 when off)
  const int prefetch_max_union_;  // most experts hinted per layer
  SessionStats stats_;
  HiddenStateObserver* hidden_observer_ = nullptr;

  KvCache kv_;
  RopeTable rope_;

  // Activations for up to n_batch tokens.
  std::vector<float> x_;              // [n][n_embd] residual stream
  std::vector<float> xn_;             // [n][n_embd] normed
  std::vector<float> q_;              // [n][q_dim]
  std::vector<float> k_;              // [n][kv_dim]
  std::vector<float> v_;              // [n][v_dim]
  std::vector<float> attn_;           // [n][n_head * head_dim_v]
  std::vector<float> proj_;           // [n][n_embd]
  std::vector<float> router_;         // [n][n_expert]
  std::vector<int32_t> routes_;       // [n][k]
  std::vector<float> route_w_;        // [n][k]
  std::vector<float> expert_out_;     // [n][k][n_embd]
  std::vector<float> shared_out_;     // [n][n_embd]
  std::vector<float> scores_;         // [n_threads][n_ctx] attention scores

  // [n_threads][kAttendBlock * (n_ctx + head_dim)]: AttendBlock's scratch.
  std::vector<float> block_scratch_;
  std::vector<float> route_scratch_;  // moe::RouteScratchSize(n_expert)
  // [rows][n_vocab] logits of an EvaluateBatch when several chunks ask for
  // them (grown to the most rows asked so far).
  std::vector<float> batch_logits_;
  std::vector<int> gather_rows_;  // [rows] rows of x_ whose logits are wanted
  std::vector<int> row_seq_;      // [n] sequence of each row
  std::vector<int> row_pos_;      // [n] position of each row in its sequence

  // MLA only (empty otherwise).
  std::vector<float> q_a_;       // [n][q_lora_rank]
  std::vector<float> kv_a_;      // [n][kv_lora_rank + n_rot]
  std::vector<float> q_abs_;     // [n][n_head][kv_lora_rank + n_rot]: Kb q_nope | q_pe
  std::vector<float> latent_;    // [n][n_head][kv_lora_rank] attention output, latent space
  std::vector<float> head_in_;   // [n][max(qk_nope, kv_lora_rank)] one head, gathered
  std::vector<float> head_out_;  // [n][max(kv_lora_rank, head_dim_v)]

  ops::MatMulScratch matmul_scratch_;
  moe::ExpertFfnScratch shared_scratch_;

  // Expert prediction, apart from every buffer above (empty when off).
  std::vector<float> pred_xn_;       // [n][n_embd] x_ under layer L+d's ffn_norm
  std::vector<float> pred_router_;   // [n][n_expert]
  std::vector<int32_t> pred_top_;    // [n][prefetch_count_]
  std::vector<float> pred_top_w_;    // [n][prefetch_count_], unused weights
  std::vector<int32_t> pred_votes_;  // [n_expert] tokens predicting each expert
  std::vector<int32_t> pred_ids_;    // [n_expert] experts by votes; a prefix is hinted
  // [depth][n_layer][n_expert]: 1 when the prediction at that depth for this
  // chunk hinted the expert. Valid for layer il at depth d once layer il - d ran.
  std::vector<uint8_t> predicted_;
  std::vector<uint8_t> routed_mask_;  // [n_expert] scratch of CountPrediction
  ops::MatMulScratch pred_scratch_;

  // Two half-batches: the inactive half's per-row buffers (null until the
  // first split batch) and the outstanding-time bookkeeping of SubmitTimed /
  // WaitTimed.
  std::unique_ptr<HalfRows> half_;
  int outstanding_ = 0;
  std::chrono::steady_clock::time_point outstanding_since_;
};

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_SESSION_H_
