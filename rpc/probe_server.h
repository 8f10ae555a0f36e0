// A plaintext HTTP listener for the probes of an orchestrator or a load
// balancer (kubelet's httpGet, a monitoring check), open without a token, so
// that a process whose API wants TLS, client certificates or a token can
// still be probed:
//   GET /healthz  200 "ok" once the process has started (the model loaded,
//                 the store open), 503 "starting" before: liveness and
//                 start-up probes.
//   GET /readyz   200 "ready" when the process can serve, 503 and one line
//                 saying why not otherwise (starting, no healthy expert
//                 node): readiness probes.
//   GET /metrics  only with Options::metrics: the Prometheus text, without a
//                 token (a deliberate choice of the operator: counts,
//                 timings and node ids, no prompts, tokens or keys).
// Everything else is 404. The answers say nothing about the configuration.
//
// Thread-safety: Start, MarkStarted and Stop from the owning thread; the
// checks and the metrics renderer run on the server's threads.
#ifndef COLIBRI_RPC_PROBE_SERVER_H_
#define COLIBRI_RPC_PROBE_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace colibri::rpc {

class ProbeServer {
 public:
  // OK: ready; an error: not ready, its message the 503's body.
  using Check = std::function<absl::Status()>;

  struct Options {
    // "HOST:PORT" (port 0: the OS picks). Beyond loopback needs no token:
    // the probes reveal nothing. Required.
    std::string listen;
    // The flag that set `listen`, for error messages. Default: "--health-listen".
    std::string flag = "--health-listen";
    // Serve GET /metrics too (the renderer given to MarkStarted). Default: false.
    bool metrics = false;
  };

  // Binds and serves; /healthz and /readyz are 503 "starting" until
  // MarkStarted. InvalidArgument for a malformed address, Unavailable when it
  // cannot bind.
  static absl::StatusOr<std::unique_ptr<ProbeServer>> Start(const Options& options);
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  // From now on /healthz is 200 and /readyz asks `ready` (null: always
  // ready); /metrics (with Options::metrics) answers `metrics()` (null: 404).
  // What they read must stay valid until Stop.
  void MarkStarted(Check ready, std::function<std::string()> metrics);
  // "host:port" with the bound port.
  const std::string& address() const { return address_; }
  // Stops serving and joins the listener. Idempotent.
  void Stop();

 private:
  explicit ProbeServer(const Options& options);
  // Null until MarkStarted.
  struct Started {
    Check ready;
    std::function<std::string()> metrics;
  };
  std::shared_ptr<const Started> started() const;

  const Options options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Started> started_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::string address_;
};

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_PROBE_SERVER_H_
