// A running expert node: store, RAM tier, ExpertService, gRPC server (with
// health checking and reflection), assembled from one Options struct. main.cc
// and the in-process tests both start nodes through this.
//
// Thread-safety: Start, Shutdown and the destructor from one thread; the
// accessors from any.
#ifndef COLIBRI_EXPERT_NODE_NODE_SERVER_H_
#define COLIBRI_EXPERT_NODE_NODE_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "expert_node/blob_buffer_pool.h"
#include "expert_node/expert_service.h"
#include "expert_node/expert_store.h"
#include "expert_node/ram_tier.h"
#include "expert_node/ram_warmer.h"
#include "expert_node/usage_counts.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace colibri::expert_node {

class NodeServer {
 public:
  struct Options {
    // gRPC listen address; port 0 lets the OS choose. Default: "127.0.0.1:0".
    std::string listen = "127.0.0.1:0";
    // Beyond loopback without auth_token, Start refuses unless this is set.
    // Default: false.
    bool insecure = false;
    // PEM files; TLS when cert and key are both set, client certificates
    // required when ca is set too. Default: "" (plaintext).
    std::string tls_cert_file;
    std::string tls_key_file;
    std::string tls_ca_file;
    // Largest gRPC message received or sent. Default: 256 MiB.
    int max_message_bytes = 256 << 20;
    // Server keepalive ping interval / ack timeout. Default: 30 s / 10 s.
    absl::Duration keepalive_time = absl::Seconds(30);
    absl::Duration keepalive_timeout = absl::Seconds(10);
    ExpertStore::Options store;     // store.data_dir is required
    // The pool of expert buffers Start creates for the store (overrides
    // store.buffer_pool); see blob_buffer_pool.h.
    BlobBufferPool::Options buffer_pool;
    RamTier::Options ram;           // see ram_tier.h
    ExpertServiceImpl::Options service;  // auth_token, node_id, threads, ...
    UsageCounts::Options usage;     // see usage_counts.h
    // Bytes of the hottest experts (by persisted usage) loaded and pinned
    // resident before serving; must be <= ram.budget_bytes. Default: 0.
    uint64_t pin_budget_bytes = 0;
    // Fill the RAM tier's free room from the store in the background once
    // serving, and again whenever experts are ingested or imported
    // (ram_warmer.h; --warm-ram, on by default in the binary). Default: false.
    bool warm_ram = false;
    // When the store cannot be opened because it is damaged (DataLoss):
    // run RocksDB's repair, then verify every expert, dropping what fails
    // (--repair). Default: false.
    bool repair_damaged_store = false;
    // When the store is (still) damaged: move it aside (never deleted), start
    // with an empty one and let the coordinator re-send (--reset-store). Both
    // act only on a damaged store, so leaving them set is harmless.
    // Default: false.
    bool reset_damaged_store = false;
  };

  // Opens the store, pins the hottest experts (pin_budget_bytes; before
  // listening, logging what was pinned), starts serving and then the RAM
  // warm-up (warm_ram).
  // FailedPrecondition when the address is beyond loopback with neither a
  // token nor `insecure`; InvalidArgument when the token breaks
  // rpc::CheckAuthToken's rule, the node id breaks ValidateNodeId's rule or
  // pin_budget_bytes exceeds the RAM budget; Unavailable when the address cannot be bound; store
  // errors pass through (DataLoss for a damaged store unless the flags above handle it).
  static absl::StatusOr<std::unique_ptr<NodeServer>> Start(const Options& options);
  // Shuts down (deadline 5 s) unless Shutdown was called.
  ~NodeServer();
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  // Stops the RAM warm-up and an Import in progress
  // (ExpertServiceImpl::BeginShutdown), waits
  // (until the deadline) for the service's calls in progress to finish,
  // then stops the server, cancelling whatever is left, and drains the
  // executors. Calls arriving meanwhile are cancelled. Idempotent.
  void Shutdown(absl::Duration deadline);

  int port() const { return port_; }
  // "host:port" with the bound port, e.g. "127.0.0.1:40123"; for a unix
  // socket the listen address itself ("unix:/run/node.sock").
  const std::string& address() const { return address_; }
  ExpertServiceImpl* service() { return service_.get(); }
  ExpertStore* store() { return store_.get(); }
  RamTier* ram_tier() { return tier_.get(); }
  UsageCounts* usage_counts() { return usage_.get(); }
  RamWarmer* ram_warmer() { return warmer_.get(); }  // null unless warm_ram

 private:
  NodeServer() = default;

  int port_ = 0;
  std::string address_;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<RamTier> tier_;
  std::unique_ptr<UsageCounts> usage_;
  std::unique_ptr<ExpertServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<RamWarmer> warmer_;
};

// Opens the node's store as Start does: options.store with a buffer pool of
// options.buffer_pool; a damaged store (DataLoss) repaired and/or moved aside
// as repair_damaged_store and reset_damaged_store allow, each step logged.
// What needs the store without serving (--import-gguf --exit-after-import)
// opens it with this. Errors as ExpertStore::Open.
absl::StatusOr<std::unique_ptr<ExpertStore>> OpenNodeStore(const NodeServer::Options& options);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_NODE_SERVER_H_
