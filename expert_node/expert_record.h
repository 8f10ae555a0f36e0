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
// Value header (kHeaderBytes, little-endian, no padding):
//   u32 magic "CLXE"   u32 version (1)   i32 layer   i32 expert
//   3 x { u32 ggml_type, u32 reserved (0), i64 rows, i64 cols, u64 bytes }
//       for gate, up, down (rows x cols in GGML order: cols is the row length)
//   u64 xxh64 of the payload (seed 0)
// followed, in the value only, by the payload: the gate, up and down bytes
// exactly as in the GGUF file.
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
  uint64_t xxh64 = 0;

  uint64_t payload_bytes() const { return gate.bytes + up.bytes + down.bytes; }
  int64_t n_embd() const { return gate.cols; }
};

inline constexpr uint32_t kValueMagic = 0x45584C43;  // "CLXE" little-endian
inline constexpr uint32_t kValueVersion = 1;
inline constexpr size_t kHeaderBytes = 120;
// Largest dimension the node accepts (guards the size arithmetic).
inline constexpr int64_t kMaxDim = int64_t{1} << 24;

// InvalidArgument unless fingerprint is 1..128 characters of [0-9A-Za-z_.-].
absl::Status ValidateFingerprint(absl::string_view fingerprint);

// Checks that the three tensors are supported types, well-formed FFN shapes
// (gate/up [n_ff][n_embd], down [n_embd][n_ff]) and that their byte sizes match
// their shapes. InvalidArgument naming `what` otherwise.
absl::Status ValidateLayout(const ExpertLayout& layout, absl::string_view what);

// Layout of `w` (views into a GGUF or an owned buffer); xxh64 left 0.
ExpertLayout LayoutOf(const moe::ExpertWeights& w);

// XXH64 (seed 0) of gate|up|down concatenated.
uint64_t PayloadChecksum(absl::Span<const uint8_t> gate, absl::Span<const uint8_t> up,
                         absl::Span<const uint8_t> down);

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

// Header of (layer, expert) with `layout`: kHeaderBytes bytes.
std::string EncodeHeader(int32_t layer, int32_t expert, const ExpertLayout& layout);
// Decodes and validates a header at the start of `bytes` (which may be longer:
// a whole value). DataLoss on anything malformed.
absl::StatusOr<ExpertLayout> DecodeHeader(absl::string_view bytes, int32_t layer, int32_t expert);

std::string EncodeModelInfo(const ModelInfo& info);
absl::StatusOr<ModelInfo> DecodeModelInfo(absl::string_view bytes);

// An expert's bytes owned in RAM, each matrix 64-byte aligned, with
// ExpertWeights views into them. Immutable after construction.
class ExpertBlob {
 public:
  // Copies gate, up and down (whose sizes must match `layout`, already
  // validated) into one aligned buffer of SizeFor(layout) bytes, taken from
  // `pool` (given back to it when the blob goes) or, when null, allocated
  // for this blob alone.
  static std::unique_ptr<ExpertBlob> Copy(const ExpertLayout& layout,
                                          absl::Span<const uint8_t> gate,
                                          absl::Span<const uint8_t> up,
                                          absl::Span<const uint8_t> down,
                                          BlobBufferPool* pool = nullptr);

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
