// C++ client of a Colibri coordinator (colibri.v1.Inference,
// proto/colibri/v1/inference.proto, served by `colibri-coordinator serve`).
//
//   ClientOptions options;
//   options.address = "127.0.0.1:7070";
//   COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
//   v1::GenerateRequest request;
//   request.set_text("The small birds");
//   COLIBRI_ASSIGN_OR_RETURN(GenerateResult result, client->Generate(request,
//       [](const v1::GenerateReply& r) { std::cout << r.text(); return true; }));
//
// gRPC statuses become absl::Status here, with their code kept and a message
// naming the coordinator's address and the method ("coordinator
// 127.0.0.1:7070 Generate: ..."). An unreachable coordinator is Unavailable
// (or DeadlineExceeded), a wrong or missing token Unauthenticated, a bad
// request InvalidArgument.
//
// Thread-safety: every method may be called from any number of threads.
#ifndef COLIBRI_CLIENT_CLIENT_H_
#define COLIBRI_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "colibri/v1/inference.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace colibri::client {

namespace v1 = ::colibri::v1;

struct ClientOptions {
  // host:port of the coordinator. Required.
  std::string address;
  // Sent as "authorization: Bearer <token>" on every call; never logged.
  // Default: "" (no authorization metadata).
  std::string auth_token;
  // TLS to the coordinator with this PEM CA (empty with use_tls: the system
  // roots). Default: false (plaintext).
  bool use_tls = false;
  std::string tls_ca_pem;
  // Deadline of one whole Generate call. Default: 30 min.
  absl::Duration generate_deadline = absl::Minutes(30);
  // Deadline of Tokenize, ModelInfo, ClusterStatus and Health. Default: 30 s.
  absl::Duration call_deadline = absl::Seconds(30);
  // Largest message received. Default: 64 MiB.
  int max_message_bytes = 64 << 20;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // the generated ids, in order
  std::string text;             // their text, the last reply's held-back bytes included
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::GenerateStats stats;      // from the last reply
  // A chat prompt's reply split (every reply's `chat` joined): content,
  // reasoning and the tool calls in order.
  v1::ChatDelta chat;
  // The callback returned false: the call was cancelled, tokens and text
  // hold what arrived before; no finish reason, no stats.
  bool cancelled = false;
};

// Called with every reply as it arrives: one per token, then the last one
// (done set, no token). Returning false cancels the generation.
using ReplyCallback = std::function<bool(const v1::GenerateReply& reply)>;

class Client {
 public:
  // Creates the channel. Does not connect (that happens on the first call),
  // so it fails only for bad options: InvalidArgument.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& address() const { return options_.address; }

  // Streams one generation. on_reply may be null. `cancel`, when set, is
  // polled every 50 ms from a thread of the call while it runs (before its
  // first reply too); true cancels it as on_reply returning false does.
  absl::StatusOr<GenerateResult> Generate(const v1::GenerateRequest& request,
                                          const ReplyCallback& on_reply = nullptr,
                                          const std::function<bool()>& cancel = nullptr);
  absl::StatusOr<v1::TokenizeReply> Tokenize(const v1::TokenizeRequest& request);
  absl::StatusOr<v1::ModelInfoReply> ModelInfo();
  absl::StatusOr<v1::ClusterStatusReply> ClusterStatus();
  // grpc.health.v1 Check of `service` ("": the whole server): true when
  // SERVING, false for any other answer; an error when the coordinator does
  // not answer (NotFound for a service it does not know).
  absl::StatusOr<bool> Health(const std::string& service = "");

 private:
  class Impl;
  Client(ClientOptions options, std::unique_ptr<Impl> impl);

  const ClientOptions options_;
  const std::unique_ptr<Impl> impl_;
};

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_CLIENT_H_
