#include "model/gguf/gguf_fingerprint.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_encoding.h"

namespace colibri::gguf {
namespace {

constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
// Second lane: a different start and each byte perturbed, so the lanes disagree
// on collisions of the first.
constexpr uint64_t kSecondOffset = 0x84222325cbf29ce4ull;

class HashSink : public internal::ByteSink {
 public:
  void Append(const void* data, size_t size) override {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t k = 0; k < size; ++k) {
      a_ = (a_ ^ p[k]) * kFnvPrime;
      b_ = (b_ ^ static_cast<uint8_t>(p[k] + 0x9d)) * kFnvPrime;
    }
  }
  std::string Hex() const { return absl::StrFormat("%016x%016x", a_, b_); }

 private:
  uint64_t a_ = kFnvOffset;
  uint64_t b_ = kSecondOffset;
};

constexpr const char* kDescriptiveExact[] = {
    "general.name",         "general.basename",      "general.finetune",
    "general.description",  "general.author",        "general.organization",
    "general.url",          "general.repo_url",      "general.doi",
    "general.uuid",         "general.version",       "general.size_label",
    "general.tags",         "general.languages",     "general.datasets",
    "general.quantized_by", "quantize.imatrix.file", "quantize.imatrix.dataset",
};
constexpr const char* kDescriptivePrefixes[] = {
    "general.license",
    "general.source.",
    "general.base_model.",
    "split.",
};

}  // namespace

bool IsDescriptiveKey(absl::string_view key) {
  for (const char* k : kDescriptiveExact) {
    if (key == k) return true;
  }
  for (const char* p : kDescriptivePrefixes) {
    if (absl::StartsWith(key, p)) return true;
  }
  return false;
}

absl::StatusOr<std::string> ModelFingerprint(const GgufFile& file) {
  COLIBRI_ASSIGN_OR_RETURN(const std::string arch, file.GetString("general.architecture"));
  HashSink sink;
  sink.String("colibri-model-fingerprint-v1");
  sink.String(arch);
  uint64_t n_keys = 0;
  for (const auto& [key, value] : file.metadata()) {
    if (IsDescriptiveKey(key)) continue;
    internal::EncodeKeyValue(key, value, sink);
    ++n_keys;
  }
  sink.U64(n_keys);
  sink.U64(file.tensors().size());
  for (const TensorInfo& t : file.tensors()) {
    sink.String(t.name);
    sink.U32(static_cast<uint32_t>(t.type));
    sink.U32(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.U64(static_cast<uint64_t>(d));
    sink.U32(static_cast<uint32_t>(t.split_index));
    sink.U64(t.offset_in_file - file.data_offset(t.split_index));
  }
  return sink.Hex();
}

}  // namespace colibri::gguf
