// Small helpers shared by the family files of model/arch/.
#ifndef COLIBRI_MODEL_ARCH_ARCH_UTIL_H_
#define COLIBRI_MODEL_ARCH_ARCH_UTIL_H_

#include "absl/status/statusor.h"
#include "model/gguf/gguf_file.h"

namespace colibri::arch {

// Width of layer 0's routed experts as stored: dims[1] of blk.0.ffn_gate_exps
// (merged layout) or of blk.0.ffn_gate.0 (one tensor per expert). InvalidArgument
// when neither exists.
absl::StatusOr<int> ExpertWidthFromTensors(const gguf::GgufFile& file);

// The "<arch>.<suffix>" key if present, else ExpertWidthFromTensors.
absl::StatusOr<int> ReadExpertWidth(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix);

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_ARCH_UTIL_H_
