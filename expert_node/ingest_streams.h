// Ingest on gRPC's callback API: the reactors of the node's Ingest streams
// over an IngestAssembly, and the watchdog that ends idle ones.
//
// A stream's messages are serialized IngestChunks, read one at a time: a
// message larger than Options::max_chunk_bytes ends the stream with
// RESOURCE_EXHAUSTED before it is parsed, one that does not parse with
// INVALID_ARGUMENT (never as if the stream had ended), and a chunk the
// assembly refuses with the assembly's error. Each complete expert is stored
// on the `io` executor, and the stream reads on only after that write
// (backpressure). The first error finishes the stream; experts acknowledged
// before it stay stored, nothing of the one it interrupted is.
//
// A stream from which no message arrives for Options::idle_timeout (while the
// node waits for one) ends with DEADLINE_EXCEEDED, counted by
// IngestAssembly::CountIdleTimeout; its partial expert is freed at once.
//
// Thread-safety: Open from gRPC's callback threads; the destructor once no
// stream is open any more (after the server has shut down).
#ifndef COLIBRI_EXPERT_NODE_INGEST_STREAMS_H_
#define COLIBRI_EXPERT_NODE_INGEST_STREAMS_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "expert_node/ingest_assembly.h"
#include "expert_node/task_queue.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/server_callback.h"

namespace colibri::expert_node {

class IngestStreams {
 public:
  struct Options {
    // Largest serialized IngestChunk. Default: 64 MiB.
    uint64_t max_chunk_bytes = uint64_t{64} << 20;
    // A stream waiting this long for a message ends; checked about every
    // quarter of it (at most every second). <= 0: never. Default: 60 s.
    absl::Duration idle_timeout = absl::Seconds(60);
  };

  // assembly and io are borrowed and must outlive every stream. on_done runs
  // when a stream's call is over (from gRPC's threads).
  IngestStreams(const Options& options, IngestAssembly* assembly, TaskQueue* io,
                std::function<void()> on_done);
  // Stops the watchdog.
  ~IngestStreams();
  IngestStreams(const IngestStreams&) = delete;
  IngestStreams& operator=(const IngestStreams&) = delete;

  // The reactor of a new stream; unless `authorized` it finishes at once
  // with UNAUTHENTICATED, before any message is read.
  grpc::ServerReadReactor<grpc::ByteBuffer>* Open(grpc::CallbackServerContext* context,
                                                  grpc::ByteBuffer* response, bool authorized);

 private:
  class Reactor;

  // Ends the streams idle for longer than Options::idle_timeout until
  // stop_ is set.
  void Watch();

  const Options options_;
  IngestAssembly* const assembly_;
  TaskQueue* const io_;
  const std::function<void()> on_done_;
  // Streams in progress (registered by their reactors, unregistered in
  // OnDone before they are deleted). Lock order: mu_, then a reactor's own.
  absl::Mutex mu_;
  absl::flat_hash_set<Reactor*> open_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_INGEST_STREAMS_H_
