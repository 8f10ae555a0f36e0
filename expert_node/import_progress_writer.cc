#include "expert_node/import_progress_writer.h"

#include "colibri/v1/expert.grpc.pb.h"
#include "rpc/raw_unary.h"

namespace colibri::expert_node {
namespace {

grpc::ByteBuffer Serialized(const v1::ImportReply& reply) {
  grpc::ByteBuffer out;
  bool own = false;
  (void)grpc::SerializationTraits<v1::ImportReply>::Serialize(reply, &out, &own);
  return out;
}

}  // namespace

void ImportProgressWriter::Progress(const v1::ImportReply& so_far) {
  grpc::ByteBuffer bytes = Serialized(so_far);
  absl::MutexLock lock(&mu_);
  if (broken_ || finish_.has_value()) return;  // Finish is not called before Progress
  waiting_ = std::move(bytes);
  if (!writing_) Next();  // no finish: finish_ is not set
}

void ImportProgressWriter::Finish(const absl::Status& status, const v1::ImportReply& reply) {
  std::optional<grpc::Status> finish;
  {
    absl::MutexLock lock(&mu_);
    if (status.ok() && !broken_) {
      waiting_ = Serialized(reply);
    } else {
      waiting_.reset();
    }
    finish_ = rpc::ToGrpcStatus(status);
    if (!writing_) finish = Next();
  }
  if (finish.has_value()) grpc::ServerWriteReactor<grpc::ByteBuffer>::Finish(*finish);
}

void ImportProgressWriter::OnWriteDone(bool ok) {
  std::optional<grpc::Status> finish;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      broken_ = true;
      waiting_.reset();
    }
    finish = Next();
  }
  if (finish.has_value()) grpc::ServerWriteReactor<grpc::ByteBuffer>::Finish(*finish);
}

std::optional<grpc::Status> ImportProgressWriter::Next() {
  if (waiting_.has_value() && !broken_) {
    in_flight_ = std::move(*waiting_);
    waiting_.reset();
    writing_ = true;
    StartWrite(&in_flight_);
    return std::nullopt;
  }
  if (finish_.has_value() && !finished_) {
    finished_ = true;
    return finish_;
  }
  return std::nullopt;
}

void ImportProgressWriter::OnDone() {
  on_done_();
  delete this;
}

}  // namespace colibri::expert_node
