#include "expert_node/expert_record.h"

#include <xxhash.h>

#include <cmath>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace colibri::expert_node {
namespace {

constexpr uint32_t kModelMagic = 0x4D584C43;  // "CLXM"
constexpr uint32_t kVersion1 = 1;
constexpr uint32_t kVersion2 = 2;
// Version 2's activation codes and bias bits.
constexpr uint32_t kActivationSilu = 0;
constexpr uint32_t kActivationSwigluOai = 1;
constexpr uint32_t kGateBiasBit = 1, kUpBiasBit = 2, kDownBiasBit = 4;
constexpr size_t kModelInfoBytes = 4 + 4 + 4 + 4 + 8;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
void PutF32(std::string* out, float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  PutU32(out, v);
}
float GetF32(const char* p) {
  const uint32_t v = GetU32(p);
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

absl::Status ValidateTensor(const TensorLayout& t, absl::string_view what,
                            absl::string_view name) {
  const ops::TensorTypeTraits* traits = ops::FindTensorType(static_cast<uint32_t>(t.type));
  if (traits == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, ": type ",
                                                   static_cast<uint32_t>(t.type),
                                                   " is not a GGML type"));
  }
  if (!traits->supported) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", name, ": unsupported tensor type ", traits->name));
  }
  if (t.rows <= 0 || t.cols <= 0 || t.rows > kMaxDim || t.cols > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, ": bad shape [", t.rows,
                                                   "][", t.cols, "]"));
  }
  absl::StatusOr<uint64_t> row_bytes = ops::RowBytes(t.type, t.cols);
  if (!row_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", name, ": ", row_bytes.status().message()));
  }
  const uint64_t expected = *row_bytes * static_cast<uint64_t>(t.rows);
  if (t.bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, ": ", t.bytes,
                                                   " bytes, shape and type need ", expected));
  }
  return absl::OkStatus();
}

std::string LayerExpertSuffix(int32_t layer, int32_t expert) {
  return absl::StrFormat("/%05d/%05d", layer, expert);
}

}  // namespace

std::string ToString(const ExpertId& id) {
  return absl::StrCat(id.fingerprint, " layer ", id.layer, " expert ", id.expert);
}

absl::Status ValidateFingerprint(absl::string_view fingerprint) {
  if (fingerprint.empty() || fingerprint.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("model fingerprint must be 1..128 characters, got ", fingerprint.size()));
  }
  for (char c : fingerprint) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError("model fingerprint has characters outside [0-9A-Za-z_.-]");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLayout(const ExpertLayout& layout, absl::string_view what) {
  COLIBRI_RETURN_IF_ERROR(ValidateTensor(layout.gate, what, "gate"));
  COLIBRI_RETURN_IF_ERROR(ValidateTensor(layout.up, what, "up"));
  COLIBRI_RETURN_IF_ERROR(ValidateTensor(layout.down, what, "down"));
  const int64_t n_ff = layout.gate.rows;
  const int64_t n_embd = layout.gate.cols;
  if (layout.up.rows != n_ff || layout.up.cols != n_embd || layout.down.rows != n_embd ||
      layout.down.cols != n_ff) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": shapes do not form an FFN: gate [", n_ff, "][", n_embd, "], up [",
        layout.up.rows, "][", layout.up.cols, "], down [", layout.down.rows, "][",
        layout.down.cols, "]"));
  }
  switch (layout.activation) {
    case moe::Activation::kSilu:
      if (layout.alpha != 0.0f || layout.limit != 0.0f) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": SiLU takes no parameters, got alpha ", layout.alpha, " limit ", layout.limit));
      }
      break;
    case moe::Activation::kSwigluOai:
      if (!(layout.alpha > 0.0f) || !(layout.limit > 0.0f) || !std::isfinite(layout.alpha) ||
          !std::isfinite(layout.limit)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": clamped SwiGLU needs a finite alpha and limit > 0, got alpha ",
                         layout.alpha, " limit ", layout.limit));
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": unknown activation ", static_cast<int>(layout.activation)));
  }
  return absl::OkStatus();
}

ExpertLayout LayoutOf(const moe::ExpertWeights& w) {
  auto tensor = [](const ops::WeightMatrix& m) {
    return TensorLayout{m.type, m.rows, m.cols, static_cast<uint64_t>(m.rows) * m.row_bytes};
  };
  ExpertLayout layout;
  layout.gate = tensor(w.gate);
  layout.up = tensor(w.up);
  layout.down = tensor(w.down);
  layout.gate_bias = w.gate_bias != nullptr;
  layout.up_bias = w.up_bias != nullptr;
  layout.down_bias = w.down_bias != nullptr;
  layout.activation = w.activation;
  if (w.activation == moe::Activation::kSwigluOai) {
    layout.alpha = w.swiglu_alpha;
    layout.limit = w.swiglu_limit;
  }
  return layout;
}

std::string BiasBytesOf(const moe::ExpertWeights& w) {
  std::string out;
  auto append = [&out](const float* bias, int64_t n) {
    if (bias == nullptr) return;
    for (int64_t i = 0; i < n; ++i) PutF32(&out, bias[i]);
  };
  append(w.gate_bias, w.gate.rows);
  append(w.up_bias, w.up.rows);
  append(w.down_bias, w.down.rows);
  return out;
}

uint64_t PayloadChecksum(absl::Span<const uint8_t> gate, absl::Span<const uint8_t> up,
                         absl::Span<const uint8_t> down, absl::Span<const uint8_t> biases) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  XXH64_update(state, gate.data(), gate.size());
  XXH64_update(state, up.data(), up.size());
  XXH64_update(state, down.data(), down.size());
  XXH64_update(state, biases.data(), biases.size());
  const uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

std::string ExpertValueKey(const ExpertId& id) {
  return absl::StrCat("x/", id.fingerprint, LayerExpertSuffix(id.layer, id.expert));
}
std::string ExpertIndexKey(const ExpertId& id) {
  return absl::StrCat("i/", id.fingerprint, LayerExpertSuffix(id.layer, id.expert));
}
std::string IndexKeyPrefix(absl::string_view fingerprint) {
  return fingerprint.empty() ? std::string("i/") : absl::StrCat("i/", fingerprint, "/");
}
std::string ModelKey(absl::string_view fingerprint) {
  return absl::StrCat(kModelKeyPrefix, fingerprint);
}

std::string UsageKey(const ExpertId& id) {
  return absl::StrCat(kUsageKeyPrefix, id.fingerprint, LayerExpertSuffix(id.layer, id.expert));
}

absl::StatusOr<ExpertId> ParseExpertKey(absl::string_view key) {
  std::vector<absl::string_view> parts = absl::StrSplit(key, '/');
  ExpertId id;
  if (parts.size() != 4 || (parts[0] != "i" && parts[0] != "x" && parts[0] != "u") || parts[2].size() != 5 ||
      parts[3].size() != 5 || !absl::SimpleAtoi(parts[2], &id.layer) ||
      !absl::SimpleAtoi(parts[3], &id.expert) || id.layer < 0 || id.expert < 0) {
    return absl::DataLossError(absl::StrCat("malformed expert key '", key, "'"));
  }
  id.fingerprint = std::string(parts[1]);
  return id;
}

std::string EncodeHeader(int32_t layer, int32_t expert, const ExpertLayout& layout) {
  std::string out;
  out.reserve(layout.header_bytes());
  PutU32(&out, kValueMagic);
  PutU32(&out, layout.needs_v2() ? kVersion2 : kVersion1);
  PutU32(&out, static_cast<uint32_t>(layer));
  PutU32(&out, static_cast<uint32_t>(expert));
  for (const TensorLayout* t : {&layout.gate, &layout.up, &layout.down}) {
    PutU32(&out, static_cast<uint32_t>(t->type));
    PutU32(&out, 0);
    PutU64(&out, static_cast<uint64_t>(t->rows));
    PutU64(&out, static_cast<uint64_t>(t->cols));
    PutU64(&out, t->bytes);
  }
  PutU64(&out, layout.xxh64);
  if (layout.needs_v2()) {
    PutU32(&out, layout.activation == moe::Activation::kSwigluOai ? kActivationSwigluOai
                                                                  : kActivationSilu);
    PutF32(&out, layout.alpha);
    PutF32(&out, layout.limit);
    PutU32(&out, (layout.gate_bias ? kGateBiasBit : 0) | (layout.up_bias ? kUpBiasBit : 0) |
                     (layout.down_bias ? kDownBiasBit : 0));
  }
  return out;
}

absl::StatusOr<ExpertLayout> DecodeHeader(absl::string_view bytes, int32_t layer, int32_t expert) {
  const std::string where = absl::StrCat("layer ", layer, " expert ", expert);
  if (bytes.size() < kHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(where, ": stored value of ", bytes.size(), " bytes is shorter than a header"));
  }
  const char* p = bytes.data();
  if (GetU32(p) != kValueMagic) return absl::DataLossError(absl::StrCat(where, ": bad magic"));
  const uint32_t version = GetU32(p + 4);
  if (version != kVersion1 && version != kVersion2) {
    return absl::DataLossError(absl::StrCat(where, ": unknown value version ", version));
  }
  if (version == kVersion2 && bytes.size() < kHeaderBytesV2) {
    return absl::DataLossError(absl::StrCat(where, ": stored value of ", bytes.size(),
                                            " bytes is shorter than a version 2 header"));
  }
  if (static_cast<int32_t>(GetU32(p + 8)) != layer ||
      static_cast<int32_t>(GetU32(p + 12)) != expert) {
    return absl::DataLossError(absl::StrCat(where, ": header names another expert"));
  }
  ExpertLayout layout;
  p += 16;
  for (TensorLayout* t : {&layout.gate, &layout.up, &layout.down}) {
    t->type = static_cast<ops::TensorType>(GetU32(p));
    t->rows = static_cast<int64_t>(GetU64(p + 8));
    t->cols = static_cast<int64_t>(GetU64(p + 16));
    t->bytes = GetU64(p + 24);
    p += 32;
  }
  layout.xxh64 = GetU64(p);
  if (version == kVersion2) {
    const uint32_t activation = GetU32(p + 8);
    if (activation != kActivationSilu && activation != kActivationSwigluOai) {
      return absl::DataLossError(absl::StrCat(where, ": unknown activation ", activation));
    }
    layout.activation =
        activation == kActivationSwigluOai ? moe::Activation::kSwigluOai : moe::Activation::kSilu;
    layout.alpha = GetF32(p + 12);
    layout.limit = GetF32(p + 16);
    const uint32_t biases = GetU32(p + 20);
    if ((biases & ~(kGateBiasBit | kUpBiasBit | kDownBiasBit)) != 0) {
      return absl::DataLossError(absl::StrCat(where, ": unknown bias bits ", biases));
    }
    layout.gate_bias = (biases & kGateBiasBit) != 0;
    layout.up_bias = (biases & kUpBiasBit) != 0;
    layout.down_bias = (biases & kDownBiasBit) != 0;
    if (!layout.needs_v2()) {
      return absl::DataLossError(
          absl::StrCat(where, ": version 2 header without biases or a non-SiLU activation"));
    }
  }
  absl::Status valid = ValidateLayout(layout, where);
  if (!valid.ok()) return absl::DataLossError(valid.message());
  return layout;
}

std::string EncodeModelInfo(const ModelInfo& info) {
  std::string out;
  PutU32(&out, kModelMagic);
  PutU32(&out, 1);
  PutU32(&out, static_cast<uint32_t>(info.n_layer));
  PutU32(&out, static_cast<uint32_t>(info.n_expert));
  PutU64(&out, static_cast<uint64_t>(info.n_embd));
  return out;
}

absl::StatusOr<ModelInfo> DecodeModelInfo(absl::string_view bytes) {
  if (bytes.size() != kModelInfoBytes || GetU32(bytes.data()) != kModelMagic ||
      GetU32(bytes.data() + 4) != 1) {
    return absl::DataLossError("malformed model record");
  }
  ModelInfo info;
  info.n_layer = static_cast<int32_t>(GetU32(bytes.data() + 8));
  info.n_expert = static_cast<int32_t>(GetU32(bytes.data() + 12));
  info.n_embd = static_cast<int64_t>(GetU64(bytes.data() + 16));
  if (info.n_layer < 0 || info.n_expert < 0 || info.n_embd <= 0 || info.n_embd > kMaxDim) {
    return absl::DataLossError("model record out of range");
  }
  return info;
}

namespace {
constexpr uint64_t kBlobAlign = 64;
uint64_t RoundUpToBlobAlign(uint64_t n) { return (n + kBlobAlign - 1) / kBlobAlign * kBlobAlign; }
}  // namespace

uint64_t ExpertBlob::SizeFor(const ExpertLayout& layout) {
  return RoundUpToBlobAlign(layout.gate.bytes) + RoundUpToBlobAlign(layout.up.bytes) +
         RoundUpToBlobAlign(layout.down.bytes) + RoundUpToBlobAlign(layout.bias_bytes());
}

std::unique_ptr<ExpertBlob> ExpertBlob::Copy(const ExpertLayout& layout,
                                             absl::Span<const uint8_t> gate,
                                             absl::Span<const uint8_t> up,
                                             absl::Span<const uint8_t> down, BlobBufferPool* pool,
                                             absl::Span<const uint8_t> biases) {
  const uint64_t up_offset = RoundUpToBlobAlign(gate.size());
  const uint64_t down_offset = up_offset + RoundUpToBlobAlign(up.size());
  const uint64_t bias_offset = down_offset + RoundUpToBlobAlign(down.size());
  const uint64_t total = bias_offset + RoundUpToBlobAlign(biases.size());

  std::unique_ptr<ExpertBlob> blob(new ExpertBlob());
  blob->layout_ = layout;
  blob->size_bytes_ = total;
  const uint64_t buffer_bytes = total > 0 ? total : kBlobAlign;
  blob->data_ = pool != nullptr ? pool->Take(buffer_bytes) : BlobBuffer::Unpooled(buffer_bytes);
  uint8_t* base = blob->data_.data();
  // Each matrix in the layout MatMul reads fastest on this machine.
  auto place = [](const TensorLayout& t, absl::Span<const uint8_t> bytes, uint8_t* at) {
    const ops::WeightMatrix m{t.type, bytes.data(), t.rows, t.cols,
                              ops::RowBytesUnchecked(t.type, t.cols)};
    if (ops::PrefersInterleaved(m)) return ops::InterleaveMatrix(m, at);
    std::memcpy(at, bytes.data(), bytes.size());
    ops::WeightMatrix copy = m;
    copy.data = at;
    return copy;
  };
  blob->weights_.gate = place(layout.gate, gate, base);
  blob->weights_.up = place(layout.up, up, base + up_offset);
  blob->weights_.down = place(layout.down, down, base + down_offset);
  if (!biases.empty()) std::memcpy(base + bias_offset, biases.data(), biases.size());

  // [n_ff] gate, [n_ff] up, [n_embd] down, those present, in that order.
  const float* bias = reinterpret_cast<const float*>(base + bias_offset);
  if (layout.gate_bias) {
    blob->weights_.gate_bias = bias;
    bias += layout.gate.rows;
  }
  if (layout.up_bias) {
    blob->weights_.up_bias = bias;
    bias += layout.up.rows;
  }
  if (layout.down_bias) blob->weights_.down_bias = bias;
  blob->weights_.activation = layout.activation;
  if (layout.activation == moe::Activation::kSwigluOai) {
    blob->weights_.swiglu_alpha = layout.alpha;
    blob->weights_.swiglu_limit = layout.limit;
  }
  return blob;
}

}  // namespace colibri::expert_node
