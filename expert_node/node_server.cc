#include "expert_node/node_server.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "expert_node/event_log.h"
#include "expert_node/node_config.h"
#include "expert_node/node_identity.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "rpc/auth_token.h"
#include "rpc/call_auth.h"
#include "rpc/server_support.h"

namespace colibri::expert_node {

namespace {

// Opens the store, applying the ways forward the operator allowed when it is
// damaged.
absl::StatusOr<std::unique_ptr<ExpertStore>> OpenStore(const ExpertStore::Options& options,
                                                       bool repair, bool reset) {
  absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(options);
  if (!absl::IsDataLoss(store.status())) return store;
  LogEvent(std::string(store.status().message()));
  if (repair) {
    LogEvent(absl::StrCat("repairing ", options.data_dir, " (--repair)"));
    absl::Status repaired = ExpertStore::Repair(options.data_dir);
    if (repaired.ok()) {
      store = ExpertStore::Open(options);
      if (store.ok()) {
        absl::StatusOr<int64_t> dropped = (*store)->VerifyAll();
        if (dropped.ok()) {
          LogEvent(absl::StrCat("repaired ", options.data_dir, ": ", (*store)->experts_stored(),
                                " experts verified, ", *dropped,
                                " dropped (the coordinator re-sends them)"));
          return store;
        }
        store = dropped.status();
      }
    } else {
      store = repaired;
    }
    LogEvent(absl::StrCat("repair failed: ", store.status().message()));
  }
  if (!reset) return store;
  COLIBRI_ASSIGN_OR_RETURN(const std::string aside, ExpertStore::ResetStore(options.data_dir));
  LogEvent(absl::StrCat("moved the damaged store to ", aside,
                        " (--reset-store); starting empty: the coordinator re-sends the experts"));
  return ExpertStore::Open(options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertStore>> OpenNodeStore(const NodeServer::Options& options) {
  ExpertStore::Options store_options = options.store;
  store_options.buffer_pool = BlobBufferPool::Create(options.buffer_pool);
  return OpenStore(store_options, options.repair_damaged_store, options.reset_damaged_store);
}

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Start(const Options& options) {
  COLIBRI_RETURN_IF_ERROR(rpc::CheckListenAllowed(
      options.listen, !options.service.auth_token.empty(), options.insecure));
  if (!options.service.auth_token.empty()) {
    COLIBRI_RETURN_IF_ERROR(rpc::CheckAuthToken(options.service.auth_token));
  }
  if (!options.service.node_id.empty()) {
    COLIBRI_RETURN_IF_ERROR(ValidateNodeId(options.service.node_id));
  }
  rpc::ServerTlsFiles tls;
  tls.cert_file = options.tls_cert_file;
  tls.key_file = options.tls_key_file;
  tls.ca_file = options.tls_ca_file;
  // The token is checked on each call's metadata, before its request is read.
  COLIBRI_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           rpc::MakeTokenCheckedServerCredentials(tls, options.service.auth_token));

  if (options.pin_budget_bytes > options.ram.budget_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pin budget of ", options.pin_budget_bytes, " bytes exceeds the RAM budget of ",
        options.ram.budget_bytes, " bytes (--pin-budget must be <= --ram-budget)"));
  }

  std::unique_ptr<NodeServer> node(new NodeServer());
  COLIBRI_ASSIGN_OR_RETURN(node->store_, OpenNodeStore(options));
  ExpertStore* store = node->store_.get();
  node->tier_ = std::make_unique<RamTier>(
      options.ram, [store](const ExpertId& id) { return store->Get(id); },
      [store](const ExpertId& id, const ReadControl* control) { return store->Get(id, control); });
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
  ExpertServiceImpl::Options service_options = options.service;
  // What a reply may hold besides the output rows (shape, counters): small.
  constexpr uint64_t kReplyOverhead = 64 << 10;
  const uint64_t max_message = static_cast<uint64_t>(std::max(options.max_message_bytes, 0));
  service_options.max_reply_bytes =
      std::min(service_options.max_reply_bytes,
               max_message > kReplyOverhead ? max_message - kReplyOverhead : 0);
  COLIBRI_ASSIGN_OR_RETURN(
      node->service_,
      ExpertServiceImpl::Create(service_options, store, node->tier_.get(), node->usage_.get()));

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
  std::unique_ptr<grpc::ServerCompletionQueue> compute_queue = builder.AddCompletionQueue();
  node->server_ = builder.BuildAndStart();
  if (node->server_ == nullptr || node->port_ == 0) {
    compute_queue->Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (compute_queue->Next(&tag, &ok)) {
    }
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  node->service_->ServeComputeLayer(std::move(compute_queue));
  node->address_ = rpc::BoundAddress(options.listen, node->port_);
  if (options.warm_ram) {
    node->warmer_ = std::make_unique<RamWarmer>(store, node->tier_.get(), node->usage_.get());
  }
  return node;
}

NodeServer::~NodeServer() { Shutdown(absl::Seconds(5)); }

void NodeServer::Shutdown(absl::Duration deadline) {
  warmer_.reset();
  if (service_ != nullptr) service_->BeginShutdown();
  if (server_ != nullptr) {
    // gRPC's graceful shutdown also waits for clients to close their idle
    // connections, which a coordinator never does; so wait for this node's
    // own calls to finish (until the deadline), then cut everything else.
    const absl::Time end = absl::Now() + deadline;
    while (service_->active_calls() > 0 && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    server_->Shutdown(std::chrono::system_clock::now());
    service_->StopComputeLayer();  // after Shutdown, which fails the calls awaited
    server_->Wait();
    server_.reset();
  }
  service_.reset();
  usage_.reset();  // flushes the usage counts
  tier_.reset();
  store_.reset();
}

}  // namespace colibri::expert_node
