#include "model/arch/arch_util.h"

#include "absl/strings/str_cat.h"
#include "model/arch/model_config.h"

namespace colibri::arch {

absl::StatusOr<int> ExpertWidthFromTensors(const gguf::GgufFile& file) {
  for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_gate.0.weight"}) {
    const gguf::TensorInfo* t = file.FindTensor(name);
    if (t != nullptr && t->dims.size() >= 2) return static_cast<int>(t->dims[1]);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file.path(), ": no routed expert tensors (blk.0.ffn_gate_exps.weight)"));
}

absl::StatusOr<int> ReadExpertWidth(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix) {
  absl::StatusOr<int> width = ReadOptionalInt(file, arch, suffix, -1);
  if (!width.ok()) return width.status();
  if (*width > 0) return *width;
  return ExpertWidthFromTensors(file);
}

}  // namespace colibri::arch
