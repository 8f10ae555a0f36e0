#include "expert_node/ingest_assembly.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "expert_node/expert_key.h"

namespace colibri::expert_node {
namespace {

// An ExpertTensor header (GGML dims: dims[0] is the row length) as a layout.
absl::StatusOr<TensorLayout> ParseTensorHeader(const v1::ExpertTensor& t, absl::string_view name) {
  if (ops::FindTensorType(t.ggml_type()) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": type ", t.ggml_type(), " is not a GGML type"));
  }
  if (t.dims_size() < 1 || t.dims_size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", t.dims_size(), " dims"));
  }
  for (int i = 2; i < t.dims_size(); ++i) {
    if (t.dims(i) != 1) return absl::InvalidArgumentError(absl::StrCat(name, ": not a matrix"));
  }
  TensorLayout layout;
  layout.type = static_cast<ops::TensorType>(t.ggml_type());
  layout.cols = t.dims(0);
  layout.rows = t.dims_size() >= 2 ? t.dims(1) : 1;
  if (layout.cols <= 0 || layout.rows <= 0 || layout.cols > kMaxDim || layout.rows > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad dims"));
  }
  absl::StatusOr<uint64_t> row_bytes = ops::RowBytes(layout.type, layout.cols);
  if (!row_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", row_bytes.status().message()));
  }
  layout.bytes = *row_bytes * static_cast<uint64_t>(layout.rows);
  return layout;
}

// Sets the version 2 part of `layout` (biases, activation) from a header
// chunk; gate, up and down must be set already. A bias must be F32 with dims
// [rows of its matrix].
absl::Status ParseBiasesAndActivation(const v1::IngestChunk& chunk, absl::string_view what,
                                      ExpertLayout* layout) {
  auto bias = [&](bool present, const v1::ExpertTensor& t, const TensorLayout& matrix,
                  absl::string_view name, bool* out) -> absl::Status {
    *out = present;
    if (!present) return absl::OkStatus();
    if (t.ggml_type() != static_cast<uint32_t>(ops::TensorType::kF32) || t.dims_size() != 1 ||
        t.dims(0) != matrix.rows || !t.data().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", name, ": must be F32 [",
                                                     matrix.rows, "] with no data in the header"));
    }
    return absl::OkStatus();
  };
  COLIBRI_RETURN_IF_ERROR(bias(chunk.has_gate_bias(), chunk.gate_bias(), layout->gate, "gate_bias",
                               &layout->gate_bias));
  COLIBRI_RETURN_IF_ERROR(
      bias(chunk.has_up_bias(), chunk.up_bias(), layout->up, "up_bias", &layout->up_bias));
  COLIBRI_RETURN_IF_ERROR(bias(chunk.has_down_bias(), chunk.down_bias(), layout->down, "down_bias",
                               &layout->down_bias));
  layout->activation = moe::Activation::kSilu;
  layout->alpha = chunk.activation().alpha();
  layout->limit = chunk.activation().limit();
  switch (chunk.activation().kind()) {
    case v1::ACTIVATION_SILU:
      break;
    case v1::ACTIVATION_SWIGLU_OAI:
      layout->activation = moe::Activation::kSwigluOai;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": unknown activation ", chunk.activation().kind()));
  }
  return absl::OkStatus();
}

}  // namespace

IngestAssembly::IngestAssembly(const Options& options, ExpertStore* store, ModelRegistry* registry)
    : options_(options), store_(store), registry_(registry) {}

bool IngestAssembly::Reserve(uint64_t bytes) {
  uint64_t now = buffered_.load();
  do {
    if (bytes > options_.max_buffer_bytes || now > options_.max_buffer_bytes - bytes) {
      refused_.fetch_add(1);
      return false;
    }
  } while (!buffered_.compare_exchange_weak(now, now + bytes));
  return true;
}

void IngestAssembly::Stream::Release() {
  buffer_.reset();
  assembly_->buffered_.fetch_sub(reserved_);
  reserved_ = 0;
}

std::string IngestAssembly::Stream::PartialNote() const {
  return assembling_ ? absl::StrCat("; nothing of ", ToString(id_), " was stored") : "";
}

absl::Status IngestAssembly::Stream::End() const {
  if (!assembling_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("stream ended after ", received_, " of ",
                                                 layout_.payload_bytes(), " bytes of ",
                                                 ToString(id_)));
}

absl::Status IngestAssembly::Stream::Add(const v1::IngestChunk& chunk) {
  COLIBRI_ASSIGN_OR_RETURN(ExpertId id, ParseExpertKey(chunk.key()));
  if (chunk.has_gate()) {
    if (assembling_) {
      return absl::InvalidArgumentError(
          absl::StrCat("header of ", ToString(id), " before ", ToString(id_), " was complete"));
    }
    COLIBRI_RETURN_IF_ERROR(StartExpert(chunk, std::move(id)));
  } else if (!assembling_ || !(id == id_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data chunk for ", ToString(id), " without its header"));
  }
  const std::string& data = chunk.data();
  if (data.empty()) return absl::OkStatus();
  if (chunk.offset() != received_) {
    return absl::InvalidArgumentError(absl::StrCat(ToString(id_), ": chunk at offset ",
                                                   chunk.offset(), ", expected ", received_));
  }
  if (data.size() > layout_.payload_bytes() - received_) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToString(id_), ": data beyond total_bytes ", layout_.payload_bytes()));
  }
  std::memcpy(buffer_.get() + received_, data.data(), data.size());
  received_ += data.size();
  return absl::OkStatus();
}

absl::Status IngestAssembly::Stream::StartExpert(const v1::IngestChunk& chunk, ExpertId id) {
  const Options& limits = assembly_->options_;
  const std::string what = ToString(id);
  COLIBRI_ASSIGN_OR_RETURN(layout_.gate, ParseTensorHeader(chunk.gate(), what + " gate"));
  COLIBRI_ASSIGN_OR_RETURN(layout_.up, ParseTensorHeader(chunk.up(), what + " up"));
  COLIBRI_ASSIGN_OR_RETURN(layout_.down, ParseTensorHeader(chunk.down(), what + " down"));
  COLIBRI_RETURN_IF_ERROR(ParseBiasesAndActivation(chunk, what, &layout_));
  layout_.xxh64 = chunk.xxh64();
  COLIBRI_RETURN_IF_ERROR(ValidateLayout(layout_, what));
  if (chunk.total_bytes() != layout_.payload_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": total_bytes ", chunk.total_bytes(),
                                                   ", the shapes need ", layout_.payload_bytes()));
  }
  if (layout_.payload_bytes() > limits.max_expert_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", layout_.payload_bytes(),
                                                   " bytes exceed the node's limit of ",
                                                   limits.max_expert_bytes));
  }
  shape_ = ModelInfo{};
  if (chunk.has_model()) {
    shape_.n_layer = chunk.model().n_layer();
    shape_.n_expert = chunk.model().n_expert();
    shape_.n_embd = chunk.model().n_embd();
    if (shape_.n_layer < 0 || shape_.n_expert < 0 || shape_.n_embd < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": negative model shape"));
    }
    if (shape_.n_embd != 0 && shape_.n_embd != layout_.n_embd()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": width ", layout_.n_embd(),
                                                     ", the model's n_embd is ", shape_.n_embd));
    }
  }
  shape_.n_embd = layout_.n_embd();
  absl::StatusOr<ModelInfo> known = assembly_->registry_->Find(id.fingerprint);
  if (known.ok()) {
    const int32_t n_layer = shape_.n_layer > 0 ? shape_.n_layer : known->n_layer;
    const int32_t n_expert = shape_.n_expert > 0 ? shape_.n_expert : known->n_expert;
    if ((n_layer > 0 && id.layer >= n_layer) || (n_expert > 0 && id.expert >= n_expert)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": outside the model's ", n_layer,
                                                     " layers x ", n_expert, " experts"));
    }
  }
  Release();
  if (!assembly_->Reserve(layout_.payload_bytes())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": the node's ingest streams already buffer ", assembly_->buffered_bytes(),
        " bytes; ", layout_.payload_bytes(), " more would exceed its limit of ",
        limits.max_buffer_bytes, " (retry later)"));
  }
  reserved_ = layout_.payload_bytes();
  buffer_.reset(new uint8_t[layout_.payload_bytes()]);
  received_ = 0;
  id_ = std::move(id);
  assembling_ = true;
  return absl::OkStatus();
}

absl::Status IngestAssembly::Stream::Store(v1::IngestReply* reply) {
  assembling_ = false;
  const uint8_t* p = buffer_.get();
  const absl::Span<const uint8_t> gate(p, layout_.gate.bytes);
  const absl::Span<const uint8_t> up(p + layout_.gate.bytes, layout_.up.bytes);
  const absl::Span<const uint8_t> down(p + layout_.gate.bytes + layout_.up.bytes,
                                       layout_.down.bytes);
  const absl::Span<const uint8_t> biases(p + layout_.matrix_bytes(), layout_.bias_bytes());
  absl::Status s;
  const uint64_t actual = PayloadChecksum(gate, up, down, biases);
  if (actual != layout_.xxh64) {
    s =
        absl::DataLossError(absl::StrFormat("%s: xxh64 of the received bytes is %016x, header "
                                            "says %016x",
                                            ToString(id_), actual, layout_.xxh64));
  }
  if (s.ok()) s = assembly_->registry_->Register(id_.fingerprint, shape_);
  if (s.ok()) s = assembly_->store_->Put(id_, layout_, gate, up, down, biases);
  Release();
  COLIBRI_RETURN_IF_ERROR(s);
  *reply->add_stored() = ToExpertKey(id_);
  reply->set_bytes_stored(reply->bytes_stored() + layout_.payload_bytes());
  return absl::OkStatus();
}

}  // namespace colibri::expert_node
