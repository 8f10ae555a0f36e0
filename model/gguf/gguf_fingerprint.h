// A stable identity for a model file's structure, for caches and for checking
// that every node of a cluster loaded the same model.
#ifndef COLIBRI_MODEL_GGUF_GGUF_FINGERPRINT_H_
#define COLIBRI_MODEL_GGUF_GGUF_FINGERPRINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/gguf/gguf_file.h"

namespace colibri::gguf {

// 32 lowercase hex digits (two independent 64-bit FNV-1a lanes) over:
// general.architecture; every metadata key and value (in their on-disk encoding,
// in file order) except the purely descriptive ones (general.name, .basename,
// .finetune, .description, .author, .organization, .url, .repo_url, .doi,
// .uuid, .version, .size_label, .license*, .source.*, .base_model.*, .tags,
// .languages, .datasets, .quantized_by, quantize.imatrix.file and
// quantize.imatrix.dataset) and the split.* bookkeeping keys; and the tensor
// table (name, type, dims, split index, offset within the data section) in
// order.
// The weight bytes are not read, so this is fast on a 100 GB file; it detects a
// different model, quantization or layout, not a bit flip in the weights.
// Renaming a model keeps its fingerprint.
//
// NotFound / InvalidArgument if general.architecture is absent or not a string.
absl::StatusOr<std::string> ModelFingerprint(const GgufFile& file);

// True if `key` is one the fingerprint ignores.
bool IsDescriptiveKey(absl::string_view key);

}  // namespace colibri::gguf

#endif  // COLIBRI_MODEL_GGUF_GGUF_FINGERPRINT_H_
