// Internal to model/gguf: the little-endian on-disk encoding of GGUF values,
// written to a byte sink. Shared by the writer (file images) and the fingerprint
// (hashing the same bytes the file would hold).
#ifndef COLIBRI_MODEL_GGUF_GGUF_ENCODING_H_
#define COLIBRI_MODEL_GGUF_GGUF_ENCODING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/gguf/gguf_value.h"

namespace colibri::gguf::internal {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void Append(const void* data, size_t size) = 0;

  void U8(uint8_t v) { Append(&v, 1); }
  void U16(uint16_t v);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void F32(float v);
  void F64(double v);
  void String(absl::string_view s);  // uint64 length + bytes
};

class VectorSink : public ByteSink {
 public:
  explicit VectorSink(std::vector<uint8_t>* out) : out_(out) {}
  void Append(const void* data, size_t size) override;

 private:
  std::vector<uint8_t>* out_;
};

// The value body only (no type id): what follows the type in a metadata KV.
void EncodeValue(const Value& value, ByteSink& sink);
// Key, type id and value, as one metadata KV.
void EncodeKeyValue(absl::string_view key, const Value& value, ByteSink& sink);

}  // namespace colibri::gguf::internal

#endif  // COLIBRI_MODEL_GGUF_GGUF_ENCODING_H_
