// A tiny deepseek2 model with F32 weights and NextN/MTP blocks after its main
// layers (nextn_predict_layers, block_count counting them), built in memory
// for tests of the MTP drafter: its tensor values stay available, so that a
// test can compute a reference forward from them, independently of the
// loader.
//
// Shape: n_embd 16, 2 heads, MLA with plain attn_q, kv_lora 4, qk_nope 4 +
// rope 2 (plain RoPE, no scaling), v head 3; 2 main layers (layer 0 dense FFN
// of 16, layer 1 MoE), 4 experts of 8 top-2 in one group, sigmoid gating with
// the exp_probs_b selection bias, renormalised, scale 2.5, one shared expert
// of 8; vocabulary 32; context 64.
//
// Echo (TinyNextnOptions::echo): the NextN block is built to predict what the
// main model says next. The main layers' outputs (attn_output, ffn_down*) are
// scaled by main_scale, so the main model's next token is mostly
// f(t) = argmax output · (output_norm ⊙ rmsnorm(embed(t))), a function of the
// current token; the block's eh_proj is [I | 0] (it keeps the next token's
// embedding and ignores the hidden state), enorm is 1, its own attn_output
// and ffn_down* are 0 and shared_head_norm equals output_norm, so its logits
// for t_{i+2} are those of f(t_{i+1}) exactly.
#ifndef COLIBRI_TESTS_SUPPORT_TINY_NEXTN_MODEL_H_
#define COLIBRI_TESTS_SUPPORT_TINY_NEXTN_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/gguf/gguf_value.h"

namespace colibri::testing {

// The command line that has colibri-make-model (the binary at `make_model`)
// write a tiny glm4moe file with one NextN block to `out`: GLM-4.5-Air's structure (a dense
// first layer, shared expert, partial RoPE) at width 64, 2 layers, 8 experts
// top-2, vocabulary 320, Q8_0.
std::vector<std::string> TinyGlm4MoeMakeModelCommand(const std::string& make_model,
                                                     const std::string& out);

struct TinyNextnOptions {
  // NextN blocks after the main layers (0: a plain model). Default: 1.
  int n_nextn = 1;
  // See the file comment. Default: false (random weights everywhere).
  bool echo = false;
  // Scale of the main layers' output matrices with echo. Default: 0.02.
  float main_scale = 0.02f;
  // Default: 7.
  uint32_t seed = 7;
};

class TinyNextnModel {
 public:
  static constexpr int kEmbd = 16, kHeads = 2, kRank = 4, kNope = 4, kRope = 2, kV = 3;
  static constexpr int kExperts = 4, kUsed = 2, kFf = 8, kFfDense = 16, kVocab = 32;
  static constexpr int kMainLayers = 2, kCtx = 64;
  static constexpr float kEps = 1e-6f, kScale = 2.5f, kRopeBase = 10000.0f;

  explicit TinyNextnModel(const TinyNextnOptions& options = {});

  struct Tensor {
    std::vector<int64_t> dims;  // GGML order: dims[0] is the row length
    std::vector<float> values;  // row-major [dims[n-1]]..[dims[0]]
  };
  // The values of a tensor by name (e.g. "blk.2.nextn.eh_proj.weight").
  const std::vector<float>& values(const std::string& name) const;

  std::vector<uint8_t> Serialize() const;
  absl::Status WriteFile(const std::string& path) const;

 private:
  void Add(const std::string& name, std::vector<int64_t> dims, float mean, float stddev);
  void AddBlock(int block, bool dense, bool nextn);

  TinyNextnOptions options_;
  std::map<std::string, gguf::Value> metadata_;
  std::vector<std::string> order_;
  std::map<std::string, Tensor> tensors_;
  uint32_t rng_state_;
};

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_TINY_NEXTN_MODEL_H_
