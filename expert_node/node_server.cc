#include "expert_node/node_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "rpc/server_support.h"

namespace colibri::expert_node {

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Start(const Options& options) {
  COLIBRI_RETURN_IF_ERROR(rpc::CheckListenAllowed(
      options.listen, !options.service.auth_token.empty(), options.insecure));
  rpc::ServerTlsFiles tls;
  tls.cert_file = options.tls_cert_file;
  tls.key_file = options.tls_key_file;
  tls.ca_file = options.tls_ca_file;
  COLIBRI_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           rpc::MakeServerCredentials(tls));

  std::unique_ptr<NodeServer> node(new NodeServer());
  COLIBRI_ASSIGN_OR_RETURN(node->store_, ExpertStore::Open(options.store));
  ExpertStore* store = node->store_.get();
  node->tier_ = std::make_unique<RamTier>(
      options.ram, [store](const ExpertId& id) { return store->Get(id); });
  COLIBRI_ASSIGN_OR_RETURN(node->service_,
                           ExpertServiceImpl::Create(options.service, store, node->tier_.get()));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &node->port_);
  builder.RegisterService(node->service_.get());
  rpc::ServerTransportOptions transport;
  transport.max_message_bytes = options.max_message_bytes;
  transport.keepalive_time = options.keepalive_time;
  transport.keepalive_timeout = options.keepalive_timeout;
  rpc::ConfigureServerBuilder(transport, &builder);
  node->server_ = builder.BuildAndStart();
  if (node->server_ == nullptr || node->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  node->address_ = absl::StrCat(rpc::ListenHost(options.listen), ":", node->port_);
  return node;
}

NodeServer::~NodeServer() { Shutdown(absl::Seconds(5)); }

void NodeServer::Shutdown(absl::Duration deadline) {
  if (server_ != nullptr) {
    // gRPC's graceful shutdown also waits for clients to close their idle
    // connections, which a coordinator never does; so wait for this node's
    // own calls to finish (until the deadline), then cut everything else.
    const absl::Time end = absl::Now() + deadline;
    while (service_->active_calls() > 0 && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
  service_.reset();
  tier_.reset();
  store_.reset();
}

}  // namespace colibri::expert_node
