#include "expert_node/node_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "expert_node/event_log.h"
#include "expert_node/node_config.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"

namespace colibri::expert_node {

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Start(const Options& options) {
  if (!IsLoopbackListenAddress(options.listen) && options.service.auth_token.empty() &&
      !options.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to listen on ", options.listen,
        " (beyond loopback) without an auth token; give --auth-token-file, or --insecure to "
        "accept unauthenticated calls"));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  const bool tls = !options.tls_cert_file.empty() || !options.tls_key_file.empty();
  if (tls) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both a certificate and a key");
    }
    grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    COLIBRI_ASSIGN_OR_RETURN(pair.private_key, ReadWholeFile(options.tls_key_file));
    COLIBRI_ASSIGN_OR_RETURN(pair.cert_chain, ReadWholeFile(options.tls_cert_file));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!options.tls_ca_file.empty()) {
      COLIBRI_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadWholeFile(options.tls_ca_file));
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(ssl);
  } else if (!options.tls_ca_file.empty()) {
    return absl::InvalidArgumentError("a TLS CA without a certificate and key");
  } else {
    credentials = grpc::InsecureServerCredentials();
  }

  if (options.pin_budget_bytes > options.ram.budget_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pin budget of ", options.pin_budget_bytes, " bytes exceeds the RAM budget of ",
        options.ram.budget_bytes, " bytes (--pin-budget must be <= --ram-budget)"));
  }

  std::unique_ptr<NodeServer> node(new NodeServer());
  COLIBRI_ASSIGN_OR_RETURN(node->store_, ExpertStore::Open(options.store));
  ExpertStore* store = node->store_.get();
  node->tier_ = std::make_unique<RamTier>(
      options.ram, [store](const ExpertId& id) { return store->Get(id); });
  COLIBRI_ASSIGN_OR_RETURN(node->usage_, UsageCounts::Open(options.usage, store));
  if (options.pin_budget_bytes > 0) {
    const absl::Time start = absl::Now();
    const PinReport pinned =
        PinHottestExperts(*node->usage_, store, node->tier_.get(), options.pin_budget_bytes);
    std::string which;
    for (size_t i = 0; i < pinned.pinned.size() && i < 8; ++i) {
      absl::StrAppend(&which, i == 0 ? ": " : ", ", "L", pinned.pinned[i].layer, "E",
                      pinned.pinned[i].expert);
    }
    if (pinned.pinned.size() > 8) absl::StrAppend(&which, ", ...");
    LogEvent(absl::StrFormat("pinned %d experts (%d bytes of a %d-byte pin budget) in %.2f s%s",
                             pinned.experts, pinned.bytes, options.pin_budget_bytes,
                             absl::ToDoubleSeconds(absl::Now() - start), which));
  }
  COLIBRI_ASSIGN_OR_RETURN(node->service_,
                           ExpertServiceImpl::Create(options.service, store, node->tier_.get(),
                                                     node->usage_.get()));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &node->port_);
  builder.RegisterService(node->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Accept client keepalive pings as often as every 10 s, even between calls.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  node->server_ = builder.BuildAndStart();
  if (node->server_ == nullptr || node->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  node->address_ = absl::StrCat(ListenHost(options.listen), ":", node->port_);
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
  usage_.reset();  // flushes the usage counts
  tier_.reset();
  store_.reset();
}

}  // namespace colibri::expert_node
