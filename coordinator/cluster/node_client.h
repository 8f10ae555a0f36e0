// The coordinator's connection to one expert node: a thin StatusOr wrapper over
// the colibri.v1.ExpertService stub (proto/colibri/v1/expert.proto) and the
// grpc.health.v1 health check, behind an interface so tests can substitute a
// mock.
//
// The gRPC implementation holds one long-lived channel with keepalive and
// explicit message size limits, puts a deadline on every call, and attaches
// "authorization: Bearer <token>" when a token is configured. gRPC statuses
// are converted to absl::Status here and nowhere else.
//
// Thread-safety: every method may be called from any number of threads.
#ifndef COLIBRI_COORDINATOR_CLUSTER_NODE_CLIENT_H_
#define COLIBRI_COORDINATOR_CLUSTER_NODE_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "colibri/v1/expert.pb.h"

namespace colibri::coordinator {

struct NodeClientOptions {
  // host:port of the node. Required.
  std::string address;
  // Shared secret sent as "authorization: Bearer <token>"; never logged.
  // Default: empty, meaning no authorization metadata.
  std::string auth_token;
  // TLS: when use_tls, the channel is secured with these PEM contents
  // (tls_ca_pem empty: the system roots; cert and key empty: no client
  // certificate). Default: false (plaintext, for loopback and trusted LANs).
  bool use_tls = false;
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // Deadline of one ComputeLayer call (ComputeLayer; StartComputeLayer takes
  // its own). Default: 30 s.
  absl::Duration compute_deadline = absl::Seconds(30);
  // Deadline of Inventory, NodeStats and Prefetch. Default: 10 s.
  absl::Duration control_deadline = absl::Seconds(10);
  // Deadline of a whole Ingest stream or Import call. Default: 6 h.
  absl::Duration transfer_deadline = absl::Hours(6);
  // Deadline of one health check. Default: 2 s.
  absl::Duration health_deadline = absl::Seconds(2);
  // Keepalive pings on the idle channel (GRPC_ARG_KEEPALIVE_TIME_MS /
  // _TIMEOUT_MS, permitted without calls). Defaults: 20 s and 10 s.
  absl::Duration keepalive_time = absl::Seconds(20);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Reconnect backoff bounds, so that a restarted node is found quickly.
  // Defaults: 250 ms and 5 s.
  absl::Duration min_reconnect_backoff = absl::Milliseconds(250);
  absl::Duration max_reconnect_backoff = absl::Seconds(5);
  // Largest message sent or received. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
};

// Where ComputeLayer calls started with NodeClient::StartComputeLayer complete,
// on any number of clients: the thread that takes them (Next) drives the gRPC
// calls itself, so a layer's calls to several nodes cost no thread hand-off.
// A call can be cancelled while outstanding (Cancel); it still completes once.
//
// Thread-safety: StartComputeLayer on it, Next, NextUntil and Cancel from one
// thread at a time (the owner's); Complete from any thread (a client that
// answers later, registered with StartedElsewhere, wakes a blocked Next).
class ComputeQueue {
 public:
  struct Completion {
    void* tag = nullptr;
    absl::StatusOr<v1::ComputeLayerReply> reply;
  };

  ComputeQueue();
  // Cancels the calls still outstanding and waits until each has completed
  // (gRPC has let go of it, a client registered with StartedElsewhere has
  // called Complete).
  ~ComputeQueue();
  ComputeQueue(const ComputeQueue&) = delete;
  ComputeQueue& operator=(const ComputeQueue&) = delete;

  // Calls started and not yet taken by Next.
  int outstanding() const;
  // Blocks until one of the outstanding calls completes and returns it
  // (calls completed at their start first). Requires outstanding() > 0.
  Completion Next();
  // The same, but returns nullopt once `deadline` passes first.
  std::optional<Completion> NextUntil(std::chrono::steady_clock::time_point deadline);
  // Asks the outstanding calls started with `tag` to end now: a gRPC call is
  // cancelled (it completes with Cancelled, or with its reply if that came
  // first); a call registered with StartedElsewhere has its `cancel` run
  // (once). No-op for a tag that is not outstanding.
  void Cancel(void* tag);
  // Records a call that completed (NodeClient's default StartComputeLayer, a
  // client with no node behind it, or one registered with StartedElsewhere).
  void Complete(void* tag, absl::StatusOr<v1::ComputeLayerReply> reply);
  // A client without a gRPC call behind StartComputeLayer (a test fake) that
  // completes the call later, from any thread, through Complete(tag, ...):
  // registers it as outstanding until then. `cancel` (may be empty) is what
  // Cancel(tag) runs; it must lead to Complete(tag, ...) and may call it
  // itself.
  void StartedElsewhere(void* tag, std::function<void()> cancel);

  class Impl;  // node_client.cc
  Impl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

// A client-streaming Ingest call in progress.
class IngestStream {
 public:
  virtual ~IngestStream() = default;
  // Queues one chunk; Unavailable (etc.) when the stream broke, in which case
  // Finish() tells why.
  virtual absl::Status Write(const v1::IngestChunk& chunk) = 0;
  // Half-closes the stream and waits for the node's acknowledgement.
  virtual absl::StatusOr<v1::IngestReply> Finish() = 0;
};

class NodeClient {
 public:
  virtual ~NodeClient() = default;

  virtual const std::string& address() const = 0;

  virtual absl::StatusOr<v1::ComputeLayerReply> ComputeLayer(
      const v1::ComputeLayerRequest& request) = 0;
  // Starts ComputeLayer without waiting: its result comes out of
  // queue->Next() with `tag` (DeadlineExceeded when `deadline` passes first).
  // The request may go as soon as this returns. The gRPC client sends it and
  // returns; this default (for clients with no asynchronous path, such as
  // test fakes) calls ComputeLayer, ignoring `deadline`, and records its
  // result.
  virtual void StartComputeLayer(const v1::ComputeLayerRequest& request, absl::Duration deadline,
                                 ComputeQueue* queue, void* tag);
  virtual absl::StatusOr<v1::PrefetchReply> Prefetch(const v1::PrefetchRequest& request) = 0;
  virtual absl::StatusOr<std::unique_ptr<IngestStream>> StartIngest() = 0;
  virtual absl::StatusOr<v1::ImportReply> Import(const v1::ImportRequest& request) = 0;
  // Import, calling `progress` with each count the node streams while it
  // runs (ImportWithProgress); returns the final reply. Against a node
  // without ImportWithProgress (UNIMPLEMENTED) the gRPC client falls back to
  // Import, with no progress; so does this default (for test fakes).
  virtual absl::StatusOr<v1::ImportReply> ImportWithProgress(
      const v1::ImportRequest& request,
      const std::function<void(const v1::ImportReply& so_far)>& progress);
  virtual absl::StatusOr<v1::InventoryReply> Inventory(const v1::InventoryRequest& request) = 0;
  virtual absl::StatusOr<v1::NodeStatsReply> NodeStats() = 0;
  // OK when grpc.health.v1.Health/Check answers SERVING for the whole server;
  // Unavailable otherwise.
  virtual absl::Status CheckHealth() = 0;
};

// Creates the gRPC client. Does not connect (the channel connects on first
// use), so it fails only on bad options: InvalidArgument.
absl::StatusOr<std::unique_ptr<NodeClient>> CreateGrpcNodeClient(const NodeClientOptions& options);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_NODE_CLIENT_H_
