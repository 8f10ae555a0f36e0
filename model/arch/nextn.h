// NextN / MTP (multi-token prediction) blocks as GGUF files carry them.
//
// Facts this code relies on (sources: the DeepSeek-V3 technical report,
// arXiv 2412.19437, section 2.2 "Multi-Token Prediction"; the tensor names of
// llama.cpp's gguf-py `constants.py` (MODEL_TENSOR.NEXTN_*) and the shapes its
// loader expects for deepseek2 and glm4moe):
// - `<arch>.nextn_predict_layers` = D counts the MTP blocks; `block_count`
//   includes them: the main layers are blk.0 .. blk.(block_count - D - 1) and
//   MTP block j is blk.(block_count - D + j). GLM-4.5/4.6 GGUFs carry one
//   (blk.46 after GLM-4.5-Air's 46 main layers, blk.92 after GLM-4.5's 92);
//   the released DeepSeek-V3/R1 weights have one (layer 61 after 61), which a
//   GGUF keeps only when its converter exported it.
// - An MTP block is a full transformer block of the main model's kind (the
//   attention with its own KV cache, then the MoE FFN of a non-dense layer:
//   router, exp_probs_b, routed and shared experts, under the same tensor
//   names), plus under blk.N.nextn.:
//     eh_proj.weight           GGML {2 * n_embd, n_embd}
//     enorm.weight             {n_embd}   RMSNorm of the next token's embedding
//     hnorm.weight             {n_embd}   RMSNorm of the main hidden state
//     shared_head_norm.weight  {n_embd}   the final norm before the head
//     embed_tokens.weight      {n_embd, n_vocab}, optional (else token_embd)
//     shared_head_head.weight  {n_embd, n_vocab}, optional (else output)
// - The forward at position i (the report's module k = 1): with h_i the main
//   model's last hidden state at i (after its last layer, before output_norm)
//   and t_{i+1} the token at i + 1,
//     x = eh_proj · [enorm(embed(t_{i+1})) ; hnorm(h_i)]   (embedding half first,
//         the order the released weights use in the public MTP implementations;
//         the report writes the concatenation the other way round)
//     x = Block(x)   (attention over the MTP's own cache at positions <= i)
//     logits(t_{i+2}) = head(shared_head_norm(x))
//   To draft further than one token with one block, the block's own output x
//   (before shared_head_norm) stands in for h at the next position.
#ifndef COLIBRI_MODEL_ARCH_NEXTN_H_
#define COLIBRI_MODEL_ARCH_NEXTN_H_

#include "absl/status/statusor.h"
#include "model/arch/model_config.h"
#include "model/gguf/gguf_file.h"

namespace colibri::arch {

// Turns the main config (as ReadModelConfig gives it) into that of MTP block
// `index` run as a one-layer model (one MoE layer, no NextN blocks) and
// returns the file block that layer 0 is. InvalidArgument when the file has
// no block `index` (nextn_predict_layers is 0 or <= index).
absl::StatusOr<int> ToNextnConfig(const gguf::GgufFile& file, int index, ModelConfig* config);

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_NEXTN_H_
