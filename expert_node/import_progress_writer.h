// The server side of one ImportWithProgress call: a gRPC write reactor that
// the importing thread feeds.
//
// Progress messages are coalesced: while a write is in flight the newest
// message waits and replaces any older one still waiting, so a slow caller
// costs the import nothing and gets the latest counts. Finish writes the
// final reply (on OK) after whatever is in flight, then ends the call with
// the status. A caller that goes away only makes later writes no-ops: the
// import goes on, and the call still ends at Finish.
//
// Thread-safety: Progress and Finish from one thread (the importer's) while
// gRPC calls the reactor methods from its own; Finish exactly once, after
// which the object belongs to gRPC (it deletes itself once the call is done
// and calls `on_done` then).
#ifndef COLIBRI_EXPERT_NODE_IMPORT_PROGRESS_WRITER_H_
#define COLIBRI_EXPERT_NODE_IMPORT_PROGRESS_WRITER_H_

#include <functional>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "colibri/v1/expert.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"

namespace colibri::expert_node {

class ImportProgressWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit ImportProgressWriter(std::function<void()> on_done) : on_done_(std::move(on_done)) {}
  ImportProgressWriter(const ImportProgressWriter&) = delete;
  ImportProgressWriter& operator=(const ImportProgressWriter&) = delete;

  // Sends `so_far` now, or once the write in flight is done unless a newer
  // one comes first.
  void Progress(const v1::ImportReply& so_far);
  // Sends `reply` when `status` is OK, then ends the call with `status`.
  void Finish(const absl::Status& status, const v1::ImportReply& reply);

 private:
  void OnWriteDone(bool ok) override;
  void OnDone() override;

  // Starts the next write, or finishes once nothing waits and Finish was
  // called. Returns the status to finish with, when the call should finish
  // (done by the caller after unlocking: Finish may delete this).
  std::optional<grpc::Status> Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<void()> on_done_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed: the caller left
  std::optional<grpc::ByteBuffer> waiting_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer in_flight_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);  // set by Finish
  bool finished_ ABSL_GUARDED_BY(mu_) = false;               // the call's Finish was made
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_IMPORT_PROGRESS_WRITER_H_
