// A TCP relay that emulates a network link on one machine: each route listens
// on an address and relays every accepted connection to a target, delaying each
// direction by a propagation delay and optionally capping its bandwidth (see
// LinkModel). A test tool: colibri-relay puts it between the coordinator and
// expert nodes on loopback.
//
//   Relay::Options options;
//   options.routes = {{"127.0.0.1:0", "127.0.0.1:7070"}};
//   options.link.delay = std::chrono::microseconds(250);
//   options.link.bytes_per_second = 125'000'000;  // 1 Gbit/s
//   COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<Relay> relay, Relay::Start(options));
//   relay->listen_addresses()[0];  // "127.0.0.1:41234"
//
// Connections are set up immediately (the TCP handshake is not delayed); the
// data of each direction then runs through its own LinkModel. A target that is
// down, or an error on either socket, closes that connection pair only.
//
// Thread-safety: listen_addresses() from any thread; Stop() from one thread at
// a time.
#ifndef COLIBRI_TOOLS_RELAY_RELAY_H_
#define COLIBRI_TOOLS_RELAY_RELAY_H_

#include <netdb.h>

#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tools/relay/link_model.h"
#include "tools/relay/relay_flags.h"

namespace colibri::relay {

class Connection;

class Relay {
 public:
  struct Options {
    // Where to listen and where to relay to, each HOST:PORT; a listen port of
    // 0 lets the OS pick. Default: none (Start fails).
    std::vector<RouteSpec> routes;
    // The link of each direction of each connection. Default: no delay, no cap.
    LinkModel::Options link;
    // Bytes a direction queues before it stops reading. Default: 0, meaning
    // bandwidth x delay + 4 MiB, enough to keep the emulated link busy.
    size_t queue_limit_bytes = 0;
  };

  // Resolves the targets, binds and listens on every route, and starts
  // accepting. InvalidArgument for a bad address, Unavailable when a listen
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Relay>> Start(const Options& options);
  ~Relay();  // Stop()
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // The bound address of each route, in the order of Options::routes.
  const std::vector<std::string>& listen_addresses() const { return listen_addresses_; }

  // Stops accepting, closes every relayed connection and waits for their
  // threads. Idempotent.
  void Stop();

 private:
  struct Listener {
    int fd = -1;
    addrinfo target{};
    sockaddr_storage target_addr{};
  };

  // The running connections, shared with the detached thread of each so that
  // none of them outlives what it deregisters from.
  struct Registry {
    absl::Mutex mu;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    absl::flat_hash_set<Connection*> connections ABSL_GUARDED_BY(mu);
  };

  explicit Relay(const Options& options);
  void AcceptLoop(Listener* listener);
  // Runs one connection to its end; the body of its detached thread.
  static void Serve(std::shared_ptr<Registry> registry, std::unique_ptr<Connection> connection);

  // Constant after Start.
  const LinkModel::Options link_;
  const size_t queue_limit_bytes_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::string> listen_addresses_;
  std::vector<std::thread> accept_threads_;
  const std::shared_ptr<Registry> registry_ = std::make_shared<Registry>();
};

}  // namespace colibri::relay

#endif  // COLIBRI_TOOLS_RELAY_RELAY_H_
