// Unary methods registered raw (grpc::ByteBuffer in and out), so that the
// service parses each request itself. gRPC's generated handler answers a
// request that does not parse with UNIMPLEMENTED (and libprotobuf may log a
// line for it); a raw one answers INVALID_ARGUMENT, and refuses a request
// larger than its method's cap before parsing it (no proto copy is made).
// libprotobuf's own log lines stay rate-limited by InstallRateLimitedProtobufLog.
//
// Usage, in a handler of a WithRawCallbackMethod_X service:
//   auto* call = new rpc::ParsedUnaryCall<XRequest, XReply>(response);
//   absl::Status parsed = call->Parse(*raw_request, kMaxXBytes, "X");
//   if (!parsed.ok()) { call->FinishCall(rpc::ToGrpcStatus(parsed)); return call; }
//   ... call->request(), call->reply() ...; call->FinishCall(status);
//   return call;
//
// Thread-safety: one call is used by one thread at a time (as gRPC reactors
// are); FinishCall exactly once. The call deletes itself when gRPC is done.
#ifndef COLIBRI_RPC_RAW_UNARY_H_
#define COLIBRI_RPC_RAW_UNARY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/server_callback.h"

namespace colibri::rpc {

// The gRPC status of an absl::Status (same code and message).
inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// Parses `raw` into *request. ResourceExhausted when it has more than
// `max_bytes` bytes (checked first); InvalidArgument when the bytes are not a
// Request. Both messages name `method` and the size, never the bytes.
template <typename Request>
absl::Status ParseRequest(const grpc::ByteBuffer& raw, uint64_t max_bytes, absl::string_view method,
                          Request* request) {
  const size_t size = raw.Length();
  if (size > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(method, " request of ", size,
                                                     " bytes exceeds the limit of ", max_bytes,
                                                     " bytes for this method"));
  }
  grpc::ByteBuffer copy(raw);  // shares the slices
  if (!grpc::SerializationTraits<Request>::Deserialize(&copy, request).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(method, " request (", size, " bytes) is not a ",
                                                   Request::descriptor()->full_name()));
  }
  return absl::OkStatus();
}

// The reactor of one raw unary call; see ParsedUnaryCall.
class RawUnaryReactor : public grpc::ServerUnaryReactor {
 public:
  // Serializes the reply into the response when `status` is OK (INTERNAL
  // when that fails), then finishes the call.
  void FinishCall(const grpc::Status& status) {
    if (!status.ok()) {
      Finish(status);
      return;
    }
    Finish(SerializeReply(response_));
  }

 protected:
  explicit RawUnaryReactor(grpc::ByteBuffer* response) : response_(response) {}
  virtual grpc::Status SerializeReply(grpc::ByteBuffer* out) = 0;

 private:
  void OnDone() override { delete this; }

  grpc::ByteBuffer* const response_;
};

template <typename Request, typename Reply>
class ParsedUnaryCall final : public RawUnaryReactor {
 public:
  // `response` is the raw handler's response buffer.
  explicit ParsedUnaryCall(grpc::ByteBuffer* response) : RawUnaryReactor(response) {}

  // ParseRequest into request().
  absl::Status Parse(const grpc::ByteBuffer& raw, uint64_t max_bytes, absl::string_view method) {
    return ParseRequest(raw, max_bytes, method, &request_);
  }

  const Request& request() const { return request_; }
  // For a caller that parses the request itself.
  Request* mutable_request() { return &request_; }
  Reply* reply() { return &reply_; }

 private:
  grpc::Status SerializeReply(grpc::ByteBuffer* out) override {
    bool own = false;
    return grpc::SerializationTraits<Reply>::Serialize(reply_, out, &own);
  }

  Request request_;
  Reply reply_;
};

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_RAW_UNARY_H_
