// What the expert node stores about one routed expert, and how it is encoded.
//
// RocksDB keys (text, fixed width so that keys sort by layer, then expert):
//   "x/<fingerprint>/<LLLLL>/<EEEEE>"  the expert's value: header + gate|up|down
//   "i/<fingerprint>/<LLLLL>/<EEEEE>"  its index entry: the same header alone
//   "m/<fingerprint>"                  the model record (ModelInfo)
//   "u/<fingerprint>/<LLLLL>/<EEEEE>"  the expert's usage count (usage_counts.h)
// where LLLLL and EEEEE are the layer and expert as 5 decimal digits. Index
// entries are small (inlined in SST files) so that inventory scans never read
// the large values, which live in blob files.
//
// Value header, version 1 (kHeaderBytes, little-endian, no padding):
//   u32 magic "CLXE"   u32 version (1)   i32 layer   i32 expert
//   3 x { u32 ggml_type, u32 reserved (0), i64 rows, i64 cols, u64 bytes }
//       for gate, up, down (rows x cols in GGML order: cols is the row length)
//   u64 xxh64 of the payload (seed 0)
// followed, in the value only, by the payload: the gate, up and down bytes
// exactly as in the GGUF file.
//
// Version 2 (kHeaderBytesV2) is version 1 with version = 2 followed by
//   u32 activation (0 SiLU, 1 gpt-oss's clamped SwiGLU)
//   f32 alpha   f32 limit       (the SwiGLU's parameters; both 0 for SiLU)
//   u32 biases: bit 0 gate, bit 1 up, bit 2 down (other bits 0)
// and its payload continues after down with the biases that are present, in
// that order, as little-endian f32: gate [n_ff], up [n_ff], down [n_embd].
// The xxh64 covers the whole payload, biases included. A record is written as
// version 2 only when it needs to be (an expert with biases or another
// activation than SiLU), so experts of the other families keep their version 1
// bytes, and stores written before version 2 open and serve unchanged.
//
// Every decoder here validates before it trusts: bad magic, versions, types,
// shapes or sizes give DataLoss, never a crash.
#ifndef COLIBRI_EXPERT_NODE_EXPERT_RECORD_H_
#define COLIBRI_EXPERT_NODE_EXPERT_RECORD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "expert_node/blob_buffer_pool.h"
#include "model/moe/expert_ffn.h"
#include "model/ops/tensor_type.h"

namespace colibri::expert_node {

// Identifies one routed expert of one model.
struct ExpertId {
  std::string fingerprint;
  int32_t layer = 0;
  int32_t expert = 0;

  friend bool operator==(const ExpertId& a, const ExpertId& b) {
    return a.layer == b.layer && a.expert == b.expert && a.fingerprint == b.fingerprint;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ExpertId& id) {
    return H::combine(std::move(h), id.fingerprint, id.layer, id.expert);
  }
};
std::string ToString(const ExpertId& id);  // "<fp> layer L expert E"

// Shape of a model as far as the node needs it. n_layer and n_expert are 0
// when unknown (experts ingested without a model descriptor); n_embd is always
// known once one expert is stored.
struct ModelInfo {
  int32_t n_layer = 0;
  int32_t n_expert = 0;
  int64_t n_embd = 0;
};

// One weight matrix: rows x cols elements of `type`, `bytes` bytes in total.
struct TensorLayout {
  ops::TensorType type = ops::TensorType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t bytes = 0;
};

struct ExpertLayout {
  TensorLayout gate;  // [n_ff][n_embd]
  TensorLayout up;    // [n_ff][n_embd]
  TensorLayout down;  // [n_embd][n_ff]
  // Version 2 only: which f32 biases follow down in the payload, and the
  // activation with its parameters (alpha, limit: 0 for SiLU).
  bool gate_bias = false;  // [n_ff]
  bool up_bias = false;    // [n_ff]
  bool down_bias = false;  // [n_embd]
  moe::Activation activation = moe::Activation::kSilu;
  float alpha = 0.0f;
  float limit = 0.0f;
  uint64_t xxh64 = 0;

  uint64_t bias_bytes() const {
    return 4 * static_cast<uint64_t>((gate_bias ? gate.rows : 0) + (up_bias ? up.rows : 0) +
                                     (down_bias ? down.rows : 0));
  }
  uint64_t matrix_bytes() const { return gate.bytes + up.bytes + down.bytes; }
  uint64_t payload_bytes() const { return matrix_bytes() + bias_bytes(); }
  int64_t n_embd() const { return gate.cols; }
  // Whether the record must be version 2 (biases or a non-SiLU activation).
  bool needs_v2() const {
    return gate_bias || up_bias || down_bias || activation != moe::Activation::kSilu;
  }
  // Bytes of the value header this layout is written with.
  size_t header_bytes() const;
};

inline constexpr uint32_t kValueMagic = 0x45584C43;  // "CLXE" little-endian
inline constexpr size_t kHeaderBytes = 120;          // version 1
inline constexpr size_t kHeaderBytesV2 = 136;
inline size_t ExpertLayout::header_bytes() const {
  return needs_v2() ? kHeaderBytesV2 : kHeaderBytes;
}
// Largest dimension the node accepts (guards the size arithmetic).
inline constexpr int64_t kMaxDim = int64_t{1} << 24;

// InvalidArgument unless fingerprint is 1..128 characters of [0-9A-Za-z_.-].
absl::Status ValidateFingerprint(absl::string_view fingerprint);

// Checks that the three tensors are supported types, well-formed FFN shapes
// (gate/up [n_ff][n_embd], down [n_embd][n_ff]), that their byte sizes match
// their shapes, and that the activation is known with sane parameters (SiLU:
// alpha and limit 0; clamped SwiGLU: both finite and > 0). InvalidArgument
// naming `what` otherwise.
absl::Status ValidateLayout(const ExpertLayout& layout, absl::string_view what);

// Layout of `w` (views into a GGUF or an owned buffer), its biases and
// activation included; xxh64 left 0.
ExpertLayout LayoutOf(const moe::ExpertWeights& w);
// The payload's bias part of `w`: its biases that are present, gate, up,
// down, as little-endian f32 (empty without biases).
std::string BiasBytesOf(const moe::ExpertWeights& w);

// XXH64 (seed 0) of gate|up|down|biases concatenated (biases: the payload's
// bias part, empty in version 1).
uint64_t PayloadChecksum(absl::Span<const uint8_t> gate, absl::Span<const uint8_t> up,
                         absl::Span<const uint8_t> down, absl::Span<const uint8_t> biases = {});

// Keys (see the file comment). ExpertKeyPrefix / IndexKeyPrefix("") cover
// every model.
std::string ExpertValueKey(const ExpertId& id);
std::string ExpertIndexKey(const ExpertId& id);
std::string IndexKeyPrefix(absl::string_view fingerprint);
std::string ModelKey(absl::string_view fingerprint);
inline constexpr absl::string_view kModelKeyPrefix = "m/";
std::string UsageKey(const ExpertId& id);
inline constexpr absl::string_view kUsageKeyPrefix = "u/";
// Parses an index, value or usage key; DataLoss when it is not one.
absl::StatusOr<ExpertId> ParseExpertKey(absl::string_view key);

// Header of (layer, expert) with `layout`: layout.header_bytes() bytes
// (version 1 unless layout.needs_v2()).
std::string EncodeHeader(int32_t layer, int32_t expert, const ExpertLayout& layout);
// Decodes and validates a version 1 or 2 header at the start of `bytes`
// (which may be longer: a whole value). DataLoss on anything malformed,
// including a version 2 header that carries nothing of version 2 (so that
// every layout has exactly one encoding).
absl::StatusOr<ExpertLayout> DecodeHeader(absl::string_view bytes, int32_t layer, int32_t expert);

std::string EncodeModelInfo(const ModelInfo& info);
absl::StatusOr<ModelInfo> DecodeModelInfo(absl::string_view bytes);

// An expert's bytes owned in RAM, each matrix 64-byte aligned, with
// ExpertWeights views into them. A matrix that MatMul reads faster in the
// interleaved layout (ops::PrefersInterleaved) is held in that layout
// (weights() says which), so the bytes are for computing, not for sending on
// as GGUF rows. Immutable after construction.
class ExpertBlob {
 public:
  // Copies gate, up, down and biases (the payload's bias part; sizes must
  // match `layout`, already validated) into one aligned buffer of
  // SizeFor(layout) bytes, taken from `pool` (given back to it when the blob
  // goes) or, when null, allocated for this blob alone. weights() carries
  // the biases and the activation of `layout`.
  static std::unique_ptr<ExpertBlob> Copy(const ExpertLayout& layout,
                                          absl::Span<const uint8_t> gate,
                                          absl::Span<const uint8_t> up,
                                          absl::Span<const uint8_t> down,
                                          BlobBufferPool* pool = nullptr,
                                          absl::Span<const uint8_t> biases = {});

  // Bytes a blob of `layout` holds in RAM (size_bytes() of its Copy).
  static uint64_t SizeFor(const ExpertLayout& layout);

  ExpertBlob(const ExpertBlob&) = delete;
  ExpertBlob& operator=(const ExpertBlob&) = delete;

  const ExpertLayout& layout() const { return layout_; }
  const moe::ExpertWeights& weights() const { return weights_; }
  // Bytes this blob holds in RAM (what the RAM tier charges for it).
  uint64_t size_bytes() const { return size_bytes_; }

 private:
  ExpertBlob() = default;

  ExpertLayout layout_;
  BlobBuffer data_;
  uint64_t size_bytes_ = 0;
  moe::ExpertWeights weights_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_EXPERT_RECORD_H_
