#include "expert_node/ingest_streams.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "expert_node/event_log.h"
#include "rpc/raw_unary.h"
#include "rpc/server_support.h"

namespace colibri::expert_node {

// One Ingest stream: reads a message, hands it to its assembly stream, and
// reads the next one once that is done (for a complete expert: once the io
// executor has stored it).
class IngestStreams::Reactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  Reactor(IngestStreams* streams, grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
          bool authorized)
      : streams_(streams),
        context_(context),
        response_(response),
        stream_(streams->assembly_->OpenStream()),
        start_(absl::Now()) {
    if (!authorized) {
      Finish(rpc::UnauthenticatedStatus());
      return;
    }
    {
      absl::MutexLock lock(&streams_->mu_);
      streams_->open_.insert(this);
    }
    ReadNext();
  }

  // The watchdog's check: when the stream has waited for a message since
  // before now - timeout, marks it finished and returns the status to finish
  // it with (outside the streams' lock: FinishExpired).
  std::optional<grpc::Status> ExpireIfIdle(absl::Time now, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (finished_ || !waiting_ || now - waiting_since_ < timeout) return std::nullopt;
    finished_ = true;
    waiting_ = false;
    // The reactor does not touch its stream while it waits for a read.
    return grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("ingest stream idle for more than ", absl::FormatDuration(timeout),
                     " (the node's --ingest-idle-timeout) after ", messages_, " messages",
                     stream_->PartialNote()));
  }
  // Frees the partial expert at once (the reactor, marked finished, no
  // longer touches it; OnDone comes only after this Finish).
  void FinishExpired(const grpc::Status& status) {
    stream_->Release();
    grpc::ServerReadReactor<grpc::ByteBuffer>::Finish(status);
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;  // timed out meanwhile
      waiting_ = false;
    }
    if (!ok) {
      EndOfStream();
      return;
    }
    ++messages_;
    absl::Status s = ParseChunk();
    if (s.ok()) s = stream_->Add(chunk_);
    if (!s.ok()) {
      Finish(rpc::ToGrpcStatus(s));
    } else if (!stream_->expert_complete()) {
      ReadNext();
    } else if (!streams_->io_->Post([this] { StoreExpert(); })) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "node is shutting down"));
    }
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&streams_->mu_);
      streams_->open_.erase(this);
    }
    stream_.reset();
    streams_->on_done_();
    delete this;
  }

 private:
  // raw_ -> chunk_, bounded before parsing.
  absl::Status ParseChunk() {
    const size_t size = raw_.Length();
    const uint64_t limit = streams_->options_.max_chunk_bytes;
    if (size > limit) {
      raw_.Clear();
      return absl::ResourceExhaustedError(absl::StrCat("ingest message ", messages_, " has ", size,
                                                       " bytes, more than the node's ", limit,
                                                       stream_->PartialNote()));
    }
    chunk_.Clear();
    if (!grpc::SerializationTraits<v1::IngestChunk>::Deserialize(&raw_, &chunk_).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("ingest message ", messages_, " (", size,
                                                     " bytes) is not an IngestChunk",
                                                     stream_->PartialNote()));
    }
    return absl::OkStatus();
  }

  // The client closed its side (or the call was cancelled).
  void EndOfStream() {
    if (context_->IsCancelled()) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "ingest cancelled"));
      return;
    }
    if (absl::Status s = stream_->End(); !s.ok()) {
      Finish(rpc::ToGrpcStatus(s));
      return;
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    if (reply_.stored_size() > 0) {
      LogEvent(absl::StrFormat("ingest done: %d experts, %d bytes in %.1f s (%.1f MB/s)",
                               reply_.stored_size(), reply_.bytes_stored(), seconds,
                               seconds > 0 ? reply_.bytes_stored() / seconds / 1e6 : 0.0));
    }
    Finish(grpc::Status::OK);
  }

  // On the io executor.
  void StoreExpert() {
    if (absl::Status s = stream_->Store(&reply_); !s.ok()) {
      Finish(rpc::ToGrpcStatus(s));
      return;
    }
    ReadNext();
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
          grpc::SerializationTraits<v1::IngestReply>::Serialize(reply_, response_, &own);
      if (!serialized.ok()) {
        grpc::ServerReadReactor<grpc::ByteBuffer>::Finish(serialized);
        return;
      }
    }
    grpc::ServerReadReactor<grpc::ByteBuffer>::Finish(status);
  }

  IngestStreams* const streams_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;  // the serialized reply_
  std::unique_ptr<IngestAssembly::Stream> stream_;
  v1::IngestReply reply_;
  const absl::Time start_;
  grpc::ByteBuffer raw_;  // the message being read
  int64_t messages_ = 0;  // read so far
  v1::IngestChunk chunk_;
  // Shared with the watchdog thread.
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;  // for a message
  absl::Time waiting_since_ ABSL_GUARDED_BY(mu_);
};

IngestStreams::IngestStreams(const Options& options, IngestAssembly* assembly, TaskQueue* io,
                             std::function<void()> on_done)
    : options_(options), assembly_(assembly), io_(io), on_done_(std::move(on_done)) {
  if (options_.idle_timeout > absl::ZeroDuration()) {
    watchdog_ = std::thread([this] { Watch(); });
  }
}

IngestStreams::~IngestStreams() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
}

grpc::ServerReadReactor<grpc::ByteBuffer>* IngestStreams::Open(grpc::CallbackServerContext* context,
                                                               grpc::ByteBuffer* response,
                                                               bool authorized) {
  return new Reactor(this, context, response, authorized);
}

void IngestStreams::Watch() {
  const absl::Duration timeout = options_.idle_timeout;
  const absl::Duration period = std::clamp(timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
  for (;;) {
    std::vector<std::pair<Reactor*, grpc::Status>> expired;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), period);
      if (stop_) return;
      const absl::Time now = absl::Now();
      for (Reactor* stream : open_) {
        std::optional<grpc::Status> status = stream->ExpireIfIdle(now, timeout);
        if (status.has_value()) expired.emplace_back(stream, std::move(*status));
      }
    }
    // A stream marked finished stays alive until it is finished here (gRPC
    // calls OnDone only after Finish).
    for (auto& [stream, status] : expired) {
      assembly_->CountIdleTimeout();
      LogEvent(status.error_message());
      stream->FinishExpired(status);
    }
  }
}

}  // namespace colibri::expert_node
