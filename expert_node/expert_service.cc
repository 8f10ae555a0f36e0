#include "expert_node/expert_service.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "grpc/support/time.h"
#include "common/status_macros.h"
#include "expert_node/event_log.h"
#include "expert_node/layer_compute.h"
#include "model/arch/model.h"
#include "model/gguf/gguf_fingerprint.h"
#include "rpc/server_support.h"
#include "rpc/untrusted_text.h"

namespace colibri::expert_node {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

const grpc::Status kUnauthenticated = rpc::UnauthenticatedStatus();

absl::StatusOr<ExpertId> ParseKey(const v1::ExpertKey& key) {
  COLIBRI_RETURN_IF_ERROR(ValidateFingerprint(key.model_fingerprint()));
  if (key.layer() < 0 || key.layer() > 99999 || key.expert() < 0 || key.expert() > 99999) {
    return absl::InvalidArgumentError(absl::StrCat("expert key: layer ", key.layer(), " expert ",
                                                   key.expert(), " out of range"));
  }
  return ExpertId{key.model_fingerprint(), key.layer(), key.expert()};
}

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

// Sets the version 2 part of `layout` (biases, activation) from an ingest
// header chunk; gate, up and down must be set already. A bias must be F32
// with dims [rows of its matrix].
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

absl::Span<const uint8_t> BytesOf(const ops::WeightMatrix& m) {
  return absl::Span<const uint8_t>(m.data, static_cast<size_t>(m.rows) * m.row_bytes);
}

}  // namespace

// Client stream of IngestChunks: assembles one expert at a time in memory,
// hands each complete expert to the io executor for verification and a durable
// write, and reads on only after that write (backpressure). The first error
// finishes the stream; experts acknowledged before it stay stored.
class ExpertServiceImpl::IngestReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  IngestReactor(ExpertServiceImpl* service, grpc::CallbackServerContext* context,
                grpc::ByteBuffer* response)
      : service_(service),
        context_(context),
        response_(response),
        reply_(&reply_storage_),
        start_(absl::Now()) {
    // The token is checked before any message of the stream is read.
    if (!service_->Authorized(context_)) {
      Finish(kUnauthenticated);
      return;
    }
    {
      absl::MutexLock lock(&service_->ingest_mu_);
      service_->ingest_streams_.insert(this);
    }
    ReadNext();
  }

  // The watchdog's check: when the stream has waited for a message since
  // before now - timeout, marks it finished and returns the status to finish
  // it with (outside the service's lock: FinishExpired).
  std::optional<grpc::Status> ExpireIfIdle(absl::Time now, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (finished_ || !waiting_ || now - waiting_since_ < timeout) return std::nullopt;
    finished_ = true;
    waiting_ = false;
    // The reactor does not touch these while it waits for a read.
    const std::string partial =
        assembling_ ? absl::StrCat("; nothing of ", ToString(id_), " was stored") : "";
    return grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("ingest stream idle for more than ", absl::FormatDuration(timeout),
                     " (the node's --ingest-idle-timeout) after ", messages_, " messages",
                     partial));
  }
  // Frees the partial expert at once (the reactor, marked finished, no
  // longer touches it; OnDone comes only after this Finish).
  void FinishExpired(const grpc::Status& status) {
    ReleaseBuffer();
    grpc::ServerReadReactor<grpc::ByteBuffer>::Finish(status);
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;  // timed out meanwhile
      waiting_ = false;
    }
    if (ok) {
      ++messages_;
      absl::Status parsed = ParseChunk();
      if (!parsed.ok()) {
        Finish(ToGrpc(parsed));
        return;
      }
    }
    OnChunk(ok);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&service_->ingest_mu_);
      service_->ingest_streams_.erase(this);
    }
    ReleaseBuffer();
    service_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  // Frees the expert being assembled and its share of the node's bound.
  void ReleaseBuffer() {
    buffer_.reset();
    service_->ingest_buffered_.fetch_sub(reserved_);
    reserved_ = 0;
  }

  // raw_ -> chunk_, bounded before parsing.
  absl::Status ParseChunk() {
    const std::string partial =
        assembling_ ? absl::StrCat("; nothing of ", ToString(id_), " was stored") : "";
    const size_t size = raw_.Length();
    if (size > service_->options_.max_ingest_chunk_bytes) {
      raw_.Clear();
      return absl::ResourceExhaustedError(
          absl::StrCat("ingest message ", messages_, " has ", size, " bytes, more than the node's ",
                       service_->options_.max_ingest_chunk_bytes, partial));
    }
    chunk_.Clear();
    if (!grpc::SerializationTraits<v1::IngestChunk>::Deserialize(&raw_, &chunk_).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("ingest message ", messages_, " (", size,
                                                     " bytes) is not an IngestChunk", partial));
    }
    return absl::OkStatus();
  }

  // Reads the next message, noting since when the stream waits for it.
  void ReadNext() {
    {
      absl::MutexLock lock(&mu_);
      waiting_ = true;
      waiting_since_ = absl::Now();
    }
    StartRead(&raw_);
  }

  // Finish (unless the watchdog did), with the reply serialized when the
  // stream succeeded.
  void Finish(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      waiting_ = false;
    }
    if (status.ok()) {
      bool own = false;
      grpc::Status serialized =
          grpc::SerializationTraits<v1::IngestReply>::Serialize(reply_storage_, response_, &own);
      if (!serialized.ok()) {
        grpc::ServerReadReactor<grpc::ByteBuffer>::Finish(serialized);
        return;
      }
    }
    grpc::ServerReadReactor<grpc::ByteBuffer>::Finish(status);
  }

  void OnChunk(bool ok) {
    if (!ok) {
      if (context_->IsCancelled()) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "ingest cancelled"));
      } else if (assembling_) {
        Finish(ToGrpc(absl::InvalidArgumentError(
            absl::StrCat("stream ended after ", received_, " of ", layout_.payload_bytes(),
                         " bytes of ", ToString(id_)))));
      } else {
        const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
        if (reply_->stored_size() > 0) {
          LogEvent(absl::StrFormat("ingest done: %d experts, %d bytes in %.1f s (%.1f MB/s)",
                                   reply_->stored_size(), reply_->bytes_stored(), seconds,
                                   seconds > 0 ? reply_->bytes_stored() / seconds / 1e6 : 0.0));
        }
        Finish(grpc::Status::OK);
      }
      return;
    }
    absl::Status s = Consume();
    if (!s.ok()) {
      Finish(ToGrpc(s));
      return;
    }
    if (assembling_ && received_ == layout_.payload_bytes()) {
      assembling_ = false;
      if (!service_->io_queue_->Post([this] { WriteExpert(); })) {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "node is shutting down"));
      }
      return;
    }
    ReadNext();
  }

  absl::Status Consume() {
    COLIBRI_ASSIGN_OR_RETURN(ExpertId id, ParseKey(chunk_.key()));
    if (chunk_.has_gate()) {
      if (assembling_) {
        return absl::InvalidArgumentError(absl::StrCat("header of ", ToString(id), " before ",
                                                       ToString(id_), " was complete"));
      }
      COLIBRI_RETURN_IF_ERROR(StartExpert(std::move(id)));
    } else if (!assembling_ || !(id == id_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data chunk for ", ToString(id), " without its header"));
    }
    const std::string& data = chunk_.data();
    if (data.empty()) return absl::OkStatus();
    if (chunk_.offset() != received_) {
      return absl::InvalidArgumentError(absl::StrCat(ToString(id_), ": chunk at offset ",
                                                     chunk_.offset(), ", expected ", received_));
    }
    if (data.size() > layout_.payload_bytes() - received_) {
      return absl::InvalidArgumentError(
          absl::StrCat(ToString(id_), ": data beyond total_bytes ", layout_.payload_bytes()));
    }
    std::memcpy(buffer_.get() + received_, data.data(), data.size());
    received_ += data.size();
    return absl::OkStatus();
  }

  absl::Status StartExpert(ExpertId id) {
    const std::string what = ToString(id);
    COLIBRI_ASSIGN_OR_RETURN(layout_.gate, ParseTensorHeader(chunk_.gate(), what + " gate"));
    COLIBRI_ASSIGN_OR_RETURN(layout_.up, ParseTensorHeader(chunk_.up(), what + " up"));
    COLIBRI_ASSIGN_OR_RETURN(layout_.down, ParseTensorHeader(chunk_.down(), what + " down"));
    COLIBRI_RETURN_IF_ERROR(ParseBiasesAndActivation(chunk_, what, &layout_));
    layout_.xxh64 = chunk_.xxh64();
    COLIBRI_RETURN_IF_ERROR(ValidateLayout(layout_, what));
    if (chunk_.total_bytes() != layout_.payload_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": total_bytes ", chunk_.total_bytes(),
                                                     ", the shapes need ",
                                                     layout_.payload_bytes()));
    }
    if (layout_.payload_bytes() > service_->options_.max_expert_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", layout_.payload_bytes(),
                                                     " bytes exceed the node's limit of ",
                                                     service_->options_.max_expert_bytes));
    }
    shape_ = ModelInfo{};
    if (chunk_.has_model()) {
      shape_.n_layer = chunk_.model().n_layer();
      shape_.n_expert = chunk_.model().n_expert();
      shape_.n_embd = chunk_.model().n_embd();
      if (shape_.n_layer < 0 || shape_.n_expert < 0 || shape_.n_embd < 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": negative model shape"));
      }
      if (shape_.n_embd != 0 && shape_.n_embd != layout_.n_embd()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": width ", layout_.n_embd(),
                                                       ", the model's n_embd is ", shape_.n_embd));
      }
    }
    shape_.n_embd = layout_.n_embd();
    absl::StatusOr<ModelInfo> known = service_->FindModel(id.fingerprint);
    if (known.ok()) {
      const int32_t n_layer = shape_.n_layer > 0 ? shape_.n_layer : known->n_layer;
      const int32_t n_expert = shape_.n_expert > 0 ? shape_.n_expert : known->n_expert;
      if ((n_layer > 0 && id.layer >= n_layer) || (n_expert > 0 && id.expert >= n_expert)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": outside the model's ", n_layer,
                                                       " layers x ", n_expert, " experts"));
      }
    }
    ReleaseBuffer();
    if (!service_->ReserveIngestBytes(layout_.payload_bytes())) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": the node's ingest streams already buffer ", service_->ingest_buffered_.load(),
          " bytes; ", layout_.payload_bytes(), " more would exceed its limit of ",
          service_->options_.max_ingest_buffer_bytes, " (retry later)"));
    }
    reserved_ = layout_.payload_bytes();
    buffer_.reset(new uint8_t[layout_.payload_bytes()]);
    received_ = 0;
    id_ = std::move(id);
    assembling_ = true;
    return absl::OkStatus();
  }

  // On the io executor.
  void WriteExpert() {
    const uint8_t* p = buffer_.get();
    const absl::Span<const uint8_t> gate(p, layout_.gate.bytes);
    const absl::Span<const uint8_t> up(p + layout_.gate.bytes, layout_.up.bytes);
    const absl::Span<const uint8_t> down(p + layout_.gate.bytes + layout_.up.bytes,
                                         layout_.down.bytes);
    const absl::Span<const uint8_t> biases(p + layout_.matrix_bytes(), layout_.bias_bytes());
    absl::Status s;
    const uint64_t actual = PayloadChecksum(gate, up, down, biases);
    if (actual != layout_.xxh64) {
      s = absl::DataLossError(absl::StrFormat("%s: xxh64 of the received bytes is %016x, header "
                                              "says %016x",
                                              ToString(id_), actual, layout_.xxh64));
    }
    if (s.ok()) s = service_->RegisterModel(id_.fingerprint, shape_);
    if (s.ok()) s = service_->store_->Put(id_, layout_, gate, up, down, biases);
    ReleaseBuffer();
    if (!s.ok()) {
      Finish(ToGrpc(s));
      return;
    }
    v1::ExpertKey* key = reply_->add_stored();
    key->set_model_fingerprint(id_.fingerprint);
    key->set_layer(id_.layer);
    key->set_expert(id_.expert);
    reply_->set_bytes_stored(reply_->bytes_stored() + layout_.payload_bytes());
    ReadNext();
  }

  ExpertServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;  // the serialized reply_storage_
  v1::IngestReply reply_storage_;
  v1::IngestReply* const reply_;
  const absl::Time start_;
  grpc::ByteBuffer raw_;  // the message being read
  int64_t messages_ = 0;  // read so far
  v1::IngestChunk chunk_;
  // The expert being assembled.
  bool assembling_ = false;
  ExpertId id_;
  ExpertLayout layout_;
  ModelInfo shape_;
  std::unique_ptr<uint8_t[]> buffer_;  // [payload_bytes]
  uint64_t reserved_ = 0;              // of service_->ingest_buffered_
  uint64_t received_ = 0;
  // Shared with the watchdog thread.
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;  // for a message
  absl::Time waiting_since_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<ExpertServiceImpl>> ExpertServiceImpl::Create(
    const Options& options, ExpertStore* store, RamTier* tier, UsageCounts* usage) {
  std::unique_ptr<ExpertServiceImpl> service(new ExpertServiceImpl(options, store, tier, usage));
  COLIBRI_ASSIGN_OR_RETURN(auto models, store->ListModels());
  absl::MutexLock lock(&service->mu_);
  for (const auto& [fp, info] : models) service->models_[fp] = info;
  return service;
}

ExpertServiceImpl::ExpertServiceImpl(const Options& options, ExpertStore* store, RamTier* tier,
                                     UsageCounts* usage)
    : options_(options),
      store_(store),
      tier_(tier),
      usage_(usage),
      compute_pool_(options.compute_threads, ThreadPool::ForIntermittentJobs()),
      io_queue_(std::make_unique<TaskQueue>(1, 0)),
      import_queue_(std::make_unique<TaskQueue>(1, 0)),
      prefetch_queue_(std::make_unique<TaskQueue>(std::max(options.io_threads, 1),
                                                   options.prefetch_queue_limit)) {
  if (options_.ingest_idle_timeout > absl::ZeroDuration()) {
    watchdog_ = std::thread([this] { WatchIngestStreams(); });
  }
}

void ExpertServiceImpl::WatchIngestStreams() {
  const absl::Duration timeout = options_.ingest_idle_timeout;
  const absl::Duration period = std::clamp(timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
  for (;;) {
    std::vector<std::pair<IngestReactor*, grpc::Status>> expired;
    {
      absl::MutexLock lock(&ingest_mu_);
      ingest_mu_.AwaitWithTimeout(absl::Condition(&watchdog_stop_), period);
      if (watchdog_stop_) return;
      const absl::Time now = absl::Now();
      for (IngestReactor* stream : ingest_streams_) {
        std::optional<grpc::Status> status = stream->ExpireIfIdle(now, timeout);
        if (status.has_value()) expired.emplace_back(stream, std::move(*status));
      }
    }
    // A stream marked finished stays alive until it is finished here (gRPC
    // calls OnDone only after Finish).
    for (auto& [stream, status] : expired) {
      ingest_timeouts_.fetch_add(1);
      LogEvent(status.error_message());
      stream->FinishExpired(status);
    }
  }
}

void ExpertServiceImpl::BeginShutdown() { shutting_down_.store(true); }

bool ExpertServiceImpl::ReserveIngestBytes(uint64_t bytes) {
  uint64_t now = ingest_buffered_.load();
  do {
    if (bytes > options_.max_ingest_buffer_bytes ||
        now > options_.max_ingest_buffer_bytes - bytes) {
      ingest_refused_.fetch_add(1);
      return false;
    }
  } while (!ingest_buffered_.compare_exchange_weak(now, now + bytes));
  return true;
}

ExpertServiceImpl::~ExpertServiceImpl() {
  {
    absl::MutexLock lock(&ingest_mu_);
    watchdog_stop_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
  StopComputeLayer();
  prefetch_queue_.reset();
  import_queue_.reset();
  io_queue_.reset();
}

bool ExpertServiceImpl::Authorized(const grpc::ServerContextBase* context) const {
  return rpc::BearerTokenMatches(*context, options_.auth_token);
}

absl::StatusOr<ModelInfo> ExpertServiceImpl::FindModel(const std::string& fingerprint) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(fingerprint);
  if (it == models_.end()) {
    return absl::NotFoundError(
        absl::StrCat("node holds no experts of model '", rpc::EscapeUntrusted(fingerprint), "'"));
  }
  return it->second;
}

absl::Status ExpertServiceImpl::RegisterModel(const std::string& fingerprint,
                                              const ModelInfo& shape) {
  absl::MutexLock write_lock(&model_write_mu_);
  ModelInfo merged = shape;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(fingerprint);
    if (it != models_.end()) {
      const ModelInfo& known = it->second;
      if ((shape.n_embd != 0 && shape.n_embd != known.n_embd) ||
          (shape.n_layer != 0 && known.n_layer != 0 && shape.n_layer != known.n_layer) ||
          (shape.n_expert != 0 && known.n_expert != 0 && shape.n_expert != known.n_expert)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model ", fingerprint, ": shape ", shape.n_layer, "x", shape.n_expert, "x",
            shape.n_embd, " contradicts the stored ", known.n_layer, "x", known.n_expert, "x",
            known.n_embd));
      }
      merged.n_embd = known.n_embd;
      if (merged.n_layer == 0) merged.n_layer = known.n_layer;
      if (merged.n_expert == 0) merged.n_expert = known.n_expert;
      if (merged.n_layer == known.n_layer && merged.n_expert == known.n_expert) {
        return absl::OkStatus();
      }
    }
  }
  COLIBRI_RETURN_IF_ERROR(store_->PutModel(fingerprint, merged));
  absl::MutexLock lock(&mu_);
  models_[fingerprint] = merged;
  return absl::OkStatus();
}

bool ExpertServiceImpl::QueuePrefetch(const v1::ExpertKey& key) {
  prefetch_hints_.fetch_add(1);
  absl::StatusOr<ExpertId> parsed = ParseKey(key);
  if (!parsed.ok()) {
    prefetch_ignored_.fetch_add(1);
    return false;
  }
  ExpertId id = std::move(*parsed);
  {
    absl::MutexLock lock(&mu_);
    auto model = models_.find(id.fingerprint);
    if (model == models_.end() ||
        (model->second.n_layer > 0 && id.layer >= model->second.n_layer) ||
        (model->second.n_expert > 0 && id.expert >= model->second.n_expert)) {
      prefetch_ignored_.fetch_add(1);
      return false;
    }
  }
  if (tier_->Contains(id)) {
    prefetch_resident_.fetch_add(1);
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!prefetch_pending_.insert(id).second) {
      prefetch_coalesced_.fetch_add(1);
      return false;
    }
  }
  // Counted before Post so that issued >= what the pool has seen.
  prefetch_issued_.fetch_add(1);
  if (!prefetch_queue_->Post([this, id] { RunPrefetch(id); })) {
    prefetch_issued_.fetch_sub(1);
    prefetch_queue_full_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    prefetch_pending_.erase(id);
    return false;
  }
  return true;
}

void ExpertServiceImpl::RunPrefetch(const ExpertId& id) {
  absl::StatusOr<uint64_t> bytes = store_->RamBytes(id);
  bool ignored = absl::IsNotFound(bytes.status());
  if (bytes.ok()) {
    // The tier counts resident / coalesced / no-room outcomes itself; a hint
    // is advice, so a failure is simply not acted on.
    const absl::Status s = tier_->Prefetch(id, *bytes);
    ignored = absl::IsNotFound(s);  // deleted meanwhile
  }
  {
    absl::MutexLock lock(&mu_);
    prefetch_pending_.erase(id);
  }
  // Counted once the hint no longer pends: whoever sees the count and hints
  // the same expert again gets a new prefetch, not a coalesced one (the
  // other order failed expert_service_test now and then under load).
  if (ignored) prefetch_ignored_.fetch_add(1);
}

void ExpertServiceImpl::Finish(rpc::RawUnaryReactor* reactor, const grpc::Status& status) {
  reactor->FinishCall(status);
  active_calls_.fetch_sub(1);
}

uint64_t ExpertServiceImpl::ComputeLayerRequestLimit() const {
  // Serialized sizes, generously: a Route (token, expert, weight, framing)
  // and an ExpertKey of a prefetch hint (fingerprint <= 128 bytes).
  constexpr uint64_t kRouteBytes = 24;
  constexpr uint64_t kKeyBytes = 160;
  constexpr uint64_t kOverhead = 64 << 10;
  const uint64_t tokens = static_cast<uint64_t>(std::max<int64_t>(options_.max_batch_tokens, 1));
  uint64_t limit = kOverhead;
  absl::MutexLock lock(&mu_);
  for (const auto& [fingerprint, model] : models_) {
    const uint64_t n_embd = static_cast<uint64_t>(std::max<int64_t>(model.n_embd, 1));
    const uint64_t n_expert = static_cast<uint64_t>(std::max(model.n_expert, 1));
    const uint64_t n_layer = static_cast<uint64_t>(std::max(model.n_layer, 1));
    limit = std::max(limit, tokens * n_embd * 4 + tokens * n_expert * kRouteBytes +
                                n_layer * n_expert * kKeyBytes + kOverhead);
  }
  return limit;
}

// One ComputeLayer call on the asynchronous API: its tag on the queue.
struct ExpertServiceImpl::ComputeCall {
  grpc::ServerContext context;
  grpc::ByteBuffer request;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder{&context};
  // False while the call is awaited, true once it was finished (its next
  // event is the last).
  bool finishing = false;
};

void ExpertServiceImpl::ServeComputeLayer(std::unique_ptr<grpc::ServerCompletionQueue> queue) {
  compute_cq_ = std::move(queue);
  const int workers = std::max(options_.compute_workers, 1);
  // One call awaited per worker: a call that arrives while every worker is
  // busy waits in gRPC until one registers its next.
  for (int i = 0; i < workers; ++i) AwaitComputeCall();
  for (int i = 0; i < workers; ++i) {
    compute_workers_.emplace_back([this] { ComputeWorkerLoop(); });
  }
}

namespace {
// The tag of the alarms that stop the ComputeLayer workers (no ComputeCall).
char kStopWorkerTag;
}  // namespace

void ExpertServiceImpl::StopComputeLayer() {
  {
    absl::MutexLock lock(&compute_mu_);
    if (compute_stopping_) return;
    compute_stopping_ = true;  // AwaitComputeCall registers no more calls
  }
  if (compute_cq_ == nullptr) return;
  // Shutting the queue down while a worker computes would fail that worker's
  // Finish (an operation started on a shut-down queue aborts the process).
  // So each worker is told to return by an event of its own, taken after the
  // call it serves has been finished, and the queue is shut down once no
  // thread can start an operation on it.
  for (size_t i = 0; i < compute_workers_.size(); ++i) {
    stop_alarms_.push_back(std::make_unique<grpc::Alarm>());
    stop_alarms_.back()->Set(compute_cq_.get(), gpr_now(GPR_CLOCK_MONOTONIC), &kStopWorkerTag);
  }
  for (std::thread& worker : compute_workers_) worker.join();
  compute_workers_.clear();
  compute_cq_->Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (compute_cq_->Next(&tag, &ok)) {
    if (tag == &kStopWorkerTag) continue;
    auto* call = static_cast<ComputeCall*>(tag);
    if (call->finishing) active_calls_.fetch_sub(1);
    // A call received now (ok, not finishing) cannot be answered any more;
    // the server's Shutdown, which comes first, cancels those.
    delete call;
  }
}

void ExpertServiceImpl::AwaitComputeCall() {
  absl::MutexLock lock(&compute_mu_);
  if (compute_stopping_) return;
  auto* call = new ComputeCall;
  RequestComputeLayer(&call->context, &call->request, &call->responder, compute_cq_.get(),
                      compute_cq_.get(), call);
}

void ExpertServiceImpl::ComputeWorkerLoop() {
  void* tag = nullptr;
  bool ok = false;
  while (compute_cq_->Next(&tag, &ok)) {
    if (tag == &kStopWorkerTag) return;  // StopComputeLayer: the queue stays open
    auto* call = static_cast<ComputeCall*>(tag);
    if (call->finishing) {  // the reply went out (or the call was cancelled)
      delete call;
      active_calls_.fetch_sub(1);
      continue;
    }
    if (!ok) {  // the server is shutting down: no call came
      delete call;
      continue;
    }
    AwaitComputeCall();  // the next call can arrive while this one runs
    ServeComputeCall(call);
  }
}

void ExpertServiceImpl::ServeComputeCall(ComputeCall* call) {
  active_calls_.fetch_add(1);
  call->finishing = true;
  if (!Authorized(&call->context)) {
    call->responder.FinishWithError(kUnauthenticated, call);
    return;
  }
  v1::ComputeLayerRequest request;
  if (absl::Status s =
          rpc::ParseRequest(call->request, ComputeLayerRequestLimit(), "ComputeLayer", &request);
      !s.ok()) {
    call->responder.FinishWithError(ToGrpc(s), call);
    return;
  }
  call->request.Clear();
  for (const v1::ExpertKey& key : request.prefetch()) QueuePrefetch(key);
  v1::ComputeLayerReply reply;
  in_flight_.fetch_add(1);
  const absl::Time start = absl::Now();
  const absl::Status s = DoComputeLayer(request, &reply);
  compute_seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  in_flight_.fetch_sub(1);
  if (!s.ok()) {
    call->responder.FinishWithError(ToGrpc(s), call);
    return;
  }
  grpc::ByteBuffer out;
  bool own = false;
  const grpc::Status serialized =
      grpc::SerializationTraits<v1::ComputeLayerReply>::Serialize(reply, &out, &own);
  if (!serialized.ok()) {
    call->responder.FinishWithError(serialized, call);
    return;
  }
  call->responder.Finish(out, grpc::Status::OK, call);
}

absl::Status ExpertServiceImpl::DoComputeLayer(const v1::ComputeLayerRequest& request,
                                               v1::ComputeLayerReply* reply) {
  const absl::Time start = absl::Now();
  COLIBRI_ASSIGN_OR_RETURN(const ModelInfo model, FindModel(request.model_fingerprint()));
  COLIBRI_ASSIGN_OR_RETURN(const LayerWork work,
                           ParseLayerRequest(request, model, options_.max_reply_bytes));

  std::vector<PinnedExpert> pinned;  // held until the outputs are computed
  int64_t disk_wait_micros = 0;
  int32_t hits = 0;
  int32_t misses = 0;
  const absl::Time now = absl::Now();
  auto lookup = [&](int layer, int expert) -> absl::StatusOr<moe::ExpertWeights> {
    ExpertId id{request.model_fingerprint(), layer, expert};
    COLIBRI_ASSIGN_OR_RETURN(PinnedExpert handle, tier_->Acquire(id));
    if (usage_ != nullptr) usage_->Record(id, now);
    if (handle.hit()) {
      ++hits;
    } else {
      ++misses;
    }
    disk_wait_micros += handle.disk_wait_micros();
    pinned.push_back(std::move(handle));
    return pinned.back().weights();
  };
  std::vector<float> out;
  COLIBRI_RETURN_IF_ERROR(ComputeLayerWork(work, lookup, &compute_pool_, &out));
  pinned.clear();

  EncodeLayerOutputs(work, out, reply->mutable_outputs());
  reply->set_compute_micros(absl::ToInt64Microseconds(absl::Now() - start) - disk_wait_micros);
  reply->set_disk_wait_micros(disk_wait_micros);
  reply->set_ram_hits(hits);
  reply->set_ram_misses(misses);
  compute_requests_.fetch_add(1);
  compute_routes_.fetch_add(static_cast<uint64_t>(work.n_routes()));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ExpertServiceImpl::Prefetch(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw,
                                                      grpc::ByteBuffer* response) {
  active_calls_.fetch_add(1);
  auto* reactor = new rpc::ParsedUnaryCall<v1::PrefetchRequest, v1::PrefetchReply>(response);
  if (!Authorized(context)) {
    Finish(reactor, kUnauthenticated);
    return reactor;
  }
  if (absl::Status s = reactor->Parse(*raw, kMaxControlRequestBytes, "Prefetch"); !s.ok()) {
    Finish(reactor, ToGrpc(s));
    return reactor;
  }
  const v1::PrefetchRequest* request = &reactor->request();
  v1::PrefetchReply* reply = reactor->reply();
  int32_t accepted = 0;
  for (const v1::ExpertKey& key : request->experts()) {
    if (QueuePrefetch(key)) ++accepted;
  }
  reply->set_accepted(accepted);
  Finish(reactor, grpc::Status::OK);
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ExpertServiceImpl::Ingest(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  active_calls_.fetch_add(1);
  return new IngestReactor(this, context, response);
}

grpc::ServerUnaryReactor* ExpertServiceImpl::Import(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  active_calls_.fetch_add(1);
  auto* reactor = new rpc::ParsedUnaryCall<v1::ImportRequest, v1::ImportReply>(response);
  if (!Authorized(context)) {
    Finish(reactor, kUnauthenticated);
    return reactor;
  }
  if (absl::Status s = reactor->Parse(*raw, kMaxControlRequestBytes, "Import"); !s.ok()) {
    Finish(reactor, ToGrpc(s));
    return reactor;
  }
  const v1::ImportRequest* request = &reactor->request();
  v1::ImportReply* reply = reactor->reply();
  if (!import_queue_->Post(
          [this, request, reply, reactor] { Finish(reactor, ToGrpc(DoImport(*request, reply))); })) {
    Finish(reactor, grpc::Status(grpc::StatusCode::UNAVAILABLE, "node is shutting down"));
  }
  return reactor;
}

absl::Status ExpertServiceImpl::DoImport(const v1::ImportRequest& request,
                                         v1::ImportReply* reply) {
  if (shutting_down_.load()) return absl::UnavailableError("node is shutting down");
  // The caller learns nothing about the path beyond "cannot import" (whether
  // it exists, is readable, is a GGUF): the details go to the node's log.
  const std::string shown_path = rpc::EscapeUntrusted(request.gguf_path());
  absl::StatusOr<std::unique_ptr<arch::Model>> opened = arch::Model::Open(request.gguf_path());
  if (!opened.ok()) {
    LogEvent(absl::StrCat("import of ", shown_path,
                          " failed: ", rpc::EscapeUntrusted(opened.status().message())));
    return absl::NotFoundError(absl::StrCat("cannot import ", shown_path));
  }
  std::unique_ptr<arch::Model> model = std::move(*opened);
  COLIBRI_ASSIGN_OR_RETURN(const std::string fingerprint, gguf::ModelFingerprint(model->file()));
  if (!request.model_fingerprint().empty() && request.model_fingerprint() != fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(shown_path, " has fingerprint ", fingerprint,
                                                   ", the request names ",
                                                   request.model_fingerprint()));
  }
  const arch::ModelConfig& config = model->config();
  const auto& experts = model->experts();
  std::vector<ExpertId> wanted;
  if (request.experts_size() == 0) {
    for (int l = 0; l < static_cast<int>(experts.size()); ++l) {
      for (int e = 0; e < static_cast<int>(experts[l].size()); ++e) {
        wanted.push_back(ExpertId{fingerprint, l, e});
      }
    }
  } else {
    for (const v1::ExpertKey& key : request.experts()) {
      COLIBRI_ASSIGN_OR_RETURN(ExpertId id, ParseKey(key));
      if (id.fingerprint != fingerprint || id.layer >= static_cast<int>(experts.size()) ||
          id.expert >= static_cast<int>(experts[id.layer].size())) {
        return absl::InvalidArgumentError(
            absl::StrCat(ToString(id), " is not an expert of ", shown_path));
      }
      wanted.push_back(std::move(id));
    }
  }
  COLIBRI_RETURN_IF_ERROR(RegisterModel(
      fingerprint, ModelInfo{config.n_layer, config.n_expert, config.n_embd}));

  uint64_t total_bytes = 0;
  for (const ExpertId& id : wanted) total_bytes += experts[id.layer][id.expert].bytes();
  const absl::Time start = absl::Now();
  absl::Time last_log = start;
  uint64_t done_bytes = 0;
  int32_t imported = 0;
  uint64_t stored_bytes = 0;
  for (const ExpertId& id : wanted) {
    if (shutting_down_.load()) {
      return absl::UnavailableError(absl::StrCat("node is shutting down: import of ", shown_path,
                                                 " stopped after ", imported,
                                                 " experts (they stay stored)"));
    }
    const moe::ExpertWeights& w = experts[id.layer][id.expert];
    COLIBRI_ASSIGN_OR_RETURN(const bool present, store_->Contains(id));
    if (!present) {
      ExpertLayout layout = LayoutOf(w);
      const std::string biases = BiasBytesOf(w);
      const absl::Span<const uint8_t> bias_span(reinterpret_cast<const uint8_t*>(biases.data()),
                                                biases.size());
      layout.xxh64 = PayloadChecksum(BytesOf(w.gate), BytesOf(w.up), BytesOf(w.down), bias_span);
      COLIBRI_RETURN_IF_ERROR(
          store_->Put(id, layout, BytesOf(w.gate), BytesOf(w.up), BytesOf(w.down), bias_span));
      ++imported;
      stored_bytes += w.bytes();
    }
    done_bytes += w.bytes();
    const absl::Time now = absl::Now();
    if (now - last_log >= options_.progress_interval) {
      last_log = now;
      const double seconds = absl::ToDoubleSeconds(now - start);
      const double rate = seconds > 0 ? done_bytes / seconds : 0;
      LogEvent(absl::StrFormat("import %s: %d / %d bytes (%.1f%%), %.1f MB/s, ETA %.0f s",
                               shown_path, done_bytes, total_bytes,
                               100.0 * done_bytes / std::max<uint64_t>(total_bytes, 1), rate / 1e6,
                               rate > 0 ? (total_bytes - done_bytes) / rate : 0.0));
    }
  }
  LogEvent(
      absl::StrFormat("import done: %s: %d experts written (%d bytes), %d already stored, "
                      "%.1f s",
                      shown_path, imported, stored_bytes, wanted.size() - imported,
                      absl::ToDoubleSeconds(absl::Now() - start)));
  reply->set_imported(imported);
  reply->set_bytes_stored(stored_bytes);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ExpertServiceImpl::Inventory(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* response) {
  active_calls_.fetch_add(1);
  auto* reactor = new rpc::ParsedUnaryCall<v1::InventoryRequest, v1::InventoryReply>(response);
  if (!Authorized(context)) {
    Finish(reactor, kUnauthenticated);
    return reactor;
  }
  if (absl::Status s = reactor->Parse(*raw, kMaxQueryRequestBytes, "Inventory"); !s.ok()) {
    Finish(reactor, ToGrpc(s));
    return reactor;
  }
  const v1::InventoryRequest* request = &reactor->request();
  v1::InventoryReply* reply = reactor->reply();
  if (!io_queue_->Post([this, request, reply, reactor] {
        Finish(reactor, ToGrpc(DoInventory(*request, reply)));
      })) {
    Finish(reactor, grpc::Status(grpc::StatusCode::UNAVAILABLE, "node is shutting down"));
  }
  return reactor;
}

absl::Status ExpertServiceImpl::DoInventory(const v1::InventoryRequest& request,
                                            v1::InventoryReply* reply) {
  if (!request.model_fingerprint().empty()) {
    COLIBRI_RETURN_IF_ERROR(ValidateFingerprint(request.model_fingerprint()));
  }
  COLIBRI_ASSIGN_OR_RETURN(const auto models, store_->ListHashed(request.model_fingerprint()));
  reply->set_node_id(options_.node_id);
  reply->set_advertise_address(options_.advertise_address);
  reply->set_disk_budget_bytes(options_.disk_budget_bytes);
  reply->set_ram_budget_bytes(tier_->budget_bytes());
  for (const auto& [fingerprint, layers] : models) {
    for (const auto& [layer, experts] : layers) {
      v1::InventoryEntry* entry = reply->add_entries();
      entry->set_model_fingerprint(fingerprint);
      entry->set_layer(layer);
      for (const ExpertStore::HashedExpert& e : experts) {
        entry->add_experts(e.expert);
        entry->add_xxh64(e.xxh64);
      }
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ExpertServiceImpl::NodeStats(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* response) {
  active_calls_.fetch_add(1);
  auto* reactor = new rpc::ParsedUnaryCall<v1::NodeStatsRequest, v1::NodeStatsReply>(response);
  if (!Authorized(context)) {
    Finish(reactor, kUnauthenticated);
    return reactor;
  }
  if (absl::Status s = reactor->Parse(*raw, kMaxQueryRequestBytes, "NodeStats"); !s.ok()) {
    Finish(reactor, ToGrpc(s));
    return reactor;
  }
  FillNodeStats(reactor->reply());
  Finish(reactor, grpc::Status::OK);
  return reactor;
}

void ExpertServiceImpl::FillNodeStats(v1::NodeStatsReply* reply) const {
  const RamTier::Counters c = tier_->counters();
  reply->set_node_id(options_.node_id);
  reply->set_ram_budget_bytes(tier_->budget_bytes());
  reply->set_ram_used_bytes(c.used_bytes);
  reply->set_experts_stored(store_->experts_stored());
  reply->set_bytes_stored(store_->payload_bytes_stored());
  reply->set_experts_in_ram(tier_->resident_count());
  reply->set_ram_hits(c.hits);
  reply->set_ram_misses(c.misses);
  reply->set_disk_bytes_read(c.disk_bytes_read);
  reply->set_disk_wait_micros(c.disk_wait_micros);
  reply->set_compute_requests(compute_requests_.load());
  reply->set_compute_routes(compute_routes_.load());
  reply->set_checksum_failures(store_->checksum_failures());
  reply->set_ingest_buffered_bytes(ingest_buffered_.load());
  reply->set_ingest_refused(ingest_refused_.load());
  reply->set_ingest_timeouts(ingest_timeouts_.load());
  reply->set_prefetch_issued(prefetch_issued_.load());
  reply->set_prefetch_used(c.prefetch_used);
  reply->set_prefetch_wasted(c.prefetch_wasted);
  reply->set_prefetch_dropped(prefetch_queue_full_.load() + c.prefetch_no_room);
  reply->set_in_flight(in_flight_.load());
  reply->set_ram_peak_used_bytes(c.peak_used_bytes);
  reply->set_pinned_experts(c.pinned_experts);
  reply->set_pinned_bytes(c.pinned_bytes);
  reply->set_prefetch_hints(prefetch_hints_.load());
  reply->set_prefetch_ignored(prefetch_ignored_.load());
  reply->set_prefetch_resident(prefetch_resident_.load() + c.prefetch_resident);
  reply->set_prefetch_coalesced(prefetch_coalesced_.load() + c.prefetch_coalesced);
  reply->set_prefetch_loaded(c.prefetch_loaded);
  reply->set_ram_warmed_experts(c.warm_loaded);
  reply->set_load_waits(c.load_waits);
  reply->set_evictions(c.evictions);
  reply->set_uncached(c.uncached);
  reply->set_disk_read_micros(c.disk_read_micros);
  if (const BlobBufferPool* pool = store_->buffer_pool(); pool != nullptr) {
    const BlobBufferPool::Counters b = pool->counters();
    reply->set_buffer_allocations(b.allocations);
    reply->set_buffer_reuses(b.reuses);
    reply->set_free_buffer_bytes(b.free_bytes);
  }
}

}  // namespace colibri::expert_node
