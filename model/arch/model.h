// A loaded MoE model: config plus typed views of every weight tensor.
//
// Large matrices are views into the mmapped GGUF (copied only by
// InterleaveWeights, below); small vectors
// (norms, biases) are converted to float32 and owned. Loading checks every
// tensor's presence, shape and type: an unsupported type fails with
// "unsupported tensor type X in tensor Y".
//
// Thread-safety: immutable after Load (and InterleaveWeights, which runs
// before the model is shared); shared by any number of sessions.
#ifndef COLIBRI_MODEL_ARCH_MODEL_H_
#define COLIBRI_MODEL_ARCH_MODEL_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/arch/model_config.h"
#include "model/gguf/gguf_file.h"
#include "model/moe/expert_ffn.h"
#include "model/ops/matmul.h"

namespace colibri::arch {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  ops::WeightMatrix wq;              // [q_dim][n_embd]; MLA: when q_lora_rank == 0
  ops::WeightMatrix wk;              // [kv_dim][n_embd]
  ops::WeightMatrix wv;              // [v_dim][n_embd]
  ops::WeightMatrix wo;              // [n_embd][n_head * head_dim_v]
  const float* bq = nullptr;         // [q_dim] when qkv_bias
  const float* bk = nullptr;         // [kv_dim]
  const float* bv = nullptr;         // [v_dim]
  const float* q_norm = nullptr;     // [head_dim] or [q_dim], by QkNorm
  const float* k_norm = nullptr;     // [head_dim] or [kv_dim]
  const float* ffn_norm = nullptr;   // [n_embd] (ffn_norm or post_attention_norm)
  // MLA (AttentionKind::kMla); wk, wv, bq.. are unused then.
  ops::WeightMatrix wq_a;               // [q_lora_rank][n_embd] when q_lora_rank > 0
  const float* q_a_norm = nullptr;      // [q_lora_rank]
  ops::WeightMatrix wq_b;               // [q_dim][q_lora_rank]
  ops::WeightMatrix wkv_a;              // [kv_lora_rank + n_rot][n_embd]
  const float* kv_a_norm = nullptr;     // [kv_lora_rank]
  std::vector<ops::WeightMatrix> wk_b;  // [n_head] of [kv_lora_rank][qk_nope]
  std::vector<ops::WeightMatrix> wv_b;  // [n_head] of [head_dim_v][kv_lora_rank]
  // Dense FFN of a leading dense layer (ModelConfig::is_dense_layer); the
  // router, experts and shared expert are empty then.
  moe::ExpertWeights ffn;
  const float* selection_bias = nullptr;    // [n_expert] exp_probs_b when selection_bias
  const float* bo = nullptr;                // [n_embd] attn_output bias (gpt-oss)
  const float* sinks = nullptr;             // [n_head] attention-sink logits (gpt-oss)
  const float* router_bias = nullptr;       // [n_expert] (gpt-oss)
  ops::WeightMatrix router;                 // [n_expert][n_embd]
  std::vector<moe::ExpertWeights> experts;  // [n_expert]
  moe::ExpertWeights shared;                // when config.shared_expert
  const float* shared_gate = nullptr;       // [n_embd] when shared_expert_gate
};

// The parts of a NextN / MTP block (model/arch/nextn.h) beyond a main layer.
struct NextnWeights {
  ops::WeightMatrix eh_proj;     // [n_embd][2 * n_embd]: [enorm(embed) ; hnorm(h)]
  const float* enorm = nullptr;  // [n_embd] on the next token's embedding
  const float* hnorm = nullptr;  // [n_embd] on the main model's hidden state
};

class Model {
 public:
  // Opens `path` with gguf::GgufFile::Open and loads it.
  static absl::StatusOr<std::unique_ptr<Model>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Model>> Load(std::unique_ptr<gguf::GgufFile> file);
  // Loads NextN block `index` (< nextn_predict_layers) of the file as a
  // one-layer model: layer 0 is blk.<n_layer + index> (an MoE layer), the
  // embedding nextn.embed_tokens or token_embd, the output norm
  // nextn.shared_head_norm and the head nextn.shared_head_head or output
  // (token_embd when tied); nextn() holds eh_proj, enorm and hnorm.
  // InvalidArgument when the file has no such block or a tensor is missing or
  // misshapen (named).
  static absl::StatusOr<std::unique_ptr<Model>> LoadNextn(std::unique_ptr<gguf::GgufFile> file,
                                                          int index);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model();

  const ModelConfig& config() const { return config_; }
  const gguf::GgufFile& file() const { return *file_; }

  // When the model's files take at most half of physical memory, maps all
  // their pages into this process now (MappedFile::Populate), so that the
  // first prompt and tokens take no page faults; for runs whose experts are
  // all computed here. Returns whether it did. Blocks until done.
  bool PopulateIfItFits() const;

  // Which weights CopyWeightsToRam moves: those every step reads whole (all
  // but the token embedding and the routed experts), or those and the routed
  // experts, for runs whose experts are all computed here.
  enum class RamWeights { kDense, kAll };
  // Moves those weights out of the file's page-cache mapping into anonymous
  // memory on transparent huge pages (MappedFile::CopyToRam), where a decode
  // step streams them faster, when they take at most half of the memory this
  // process may use (MemoryLimitBytes). Returns the bytes moved, 0 when they
  // do not fit (or the model was not loaded from a file). An error (no memory,
  // a read error) leaves the rest mapped from the file; the model computes the
  // same either way. Call before any session runs. Blocks until done.
  absl::StatusOr<uint64_t> CopyWeightsToRam(RamWeights which) const;
  // Rewrites the matrices of `which` that MatMul reads faster in the
  // interleaved layout (ops::PrefersInterleaved: the K-quants Q4_K to Q6_K and
  // others on the AVX2 kernels) into RAM the model owns, in that layout, and
  // points the model's views at the copies; CopyWeightsToRam then leaves
  // their file ranges out. Products stay bitwise the same. Under
  // CopyWeightsToRam's budget: nothing when the weights of `which` take more
  // than half of the memory limit. The token
  // embedding's rows stay where they are (EmbedToken reads them). Returns the
  // bytes rewritten; ResourceExhausted when memory runs out (the matrices
  // done by then stay interleaved, the rest as they were). Not thread-safe,
  // and it changes the views: call before anything copies them (sessions,
  // expert backends), and not with RamWeights::kAll when the routed experts'
  // bytes go to nodes (they must stay in GGUF order).
  absl::StatusOr<uint64_t> InterleaveWeights(RamWeights which);
  const LayerWeights& layer(int i) const { return layers_[i]; }
  // experts()[layer][expert], for moe::LocalExpertBackend. Empty for a
  // leading dense layer.
  const std::vector<std::vector<moe::ExpertWeights>>& experts() const { return experts_; }

  const ops::WeightMatrix& token_embd() const { return token_embd_; }  // [n_vocab][n_embd]
  const ops::WeightMatrix& output() const { return output_; }          // token_embd when tied
  const float* output_norm() const { return output_norm_; }
  bool tied_embeddings() const { return tied_embeddings_; }
  // Set only on a model made by LoadNextn.
  const NextnWeights& nextn() const { return nextn_; }

  // out: [n_embd]. InvalidArgument when id is outside [0, n_vocab).
  absl::Status EmbedToken(int32_t id, float* out) const;

 private:
  Model() = default;
  class Binder;
  // Load, or LoadNextn when nextn_index >= 0.
  static absl::StatusOr<std::unique_ptr<Model>> LoadBlocks(std::unique_ptr<gguf::GgufFile> file,
                                                           int nextn_index);

  ModelConfig config_;
  std::unique_ptr<gguf::GgufFile> file_;
  // Where the matrices are in the model's files, for CopyWeightsToRam (the
  // token embedding only when it is the output head too).
  struct WeightRange {
    int split = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    bool routed_expert = false;
    ops::WeightMatrix first;  // the tensor's first matrix (of n_expert when merged)
  };
  // The recorded ranges of `which` in file order, each tensor once.
  std::vector<WeightRange> RangesOf(RamWeights which) const;
  static std::vector<WeightRange> MergeRanges(const std::vector<WeightRange>& ranges);
  // Whether the ranges of `which` take at most half of MemoryLimitBytes().
  bool FitsInRam(RamWeights which) const;

  std::vector<WeightRange> weight_ranges_;
  // {split, offset} of the tensors InterleaveWeights moved, and their copies
  // (huge-page mappings: address, bytes).
  std::set<std::pair<int, uint64_t>> interleaved_ranges_;
  std::vector<std::pair<uint8_t*, uint64_t>> interleaved_;
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<moe::ExpertWeights>> experts_;
  ops::WeightMatrix token_embd_;
  ops::WeightMatrix output_;
  const float* output_norm_ = nullptr;
  bool tied_embeddings_ = false;
  NextnWeights nextn_;
  std::vector<std::unique_ptr<std::vector<float>>> owned_vectors_;
};

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_MODEL_H_
