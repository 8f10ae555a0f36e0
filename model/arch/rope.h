// Rotary position embedding: a table of the rotation of every position of a
// context, and its application to heads of query or key rows. The table
// follows the model's RoPE base, scale and YaRN settings (ModelConfig).
//
// Thread-safety: Apply is const and may run on several threads at once.
#ifndef COLIBRI_MODEL_ARCH_ROPE_H_
#define COLIBRI_MODEL_ARCH_ROPE_H_

#include <vector>

#include "model/arch/model_config.h"

namespace colibri::arch {

class RopeTable {
 public:
  // config is copied; positions 0 .. n_ctx - 1.
  RopeTable(const ModelConfig& config, int n_ctx);

  // Rotates the first n_rot floats of each of n_heads heads of v (heads
  // head_stride apart) for position pos (< n_ctx), in the pairing of the
  // model's RopeType.
  void Apply(float* v, int n_heads, int head_stride, int pos) const;

 private:
  const ModelConfig c_;  // a copy, as the table's owner may pass a temporary
  std::vector<float> cos_;  // [n_ctx][n_rot / 2]
  std::vector<float> sin_;  // [n_ctx][n_rot / 2]
};

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_ROPE_H_
