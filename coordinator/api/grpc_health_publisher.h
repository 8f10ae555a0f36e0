// Keeps a gRPC server's health service (grpc.health.v1) in step with a
// readiness check: SERVING while the check passes, NOT_SERVING while it fails
// (for the coordinator: no healthy expert node), so that clients and gRPC
// probes see what the HTTP /health and /readyz see.
//
// Thread-safety: the constructor starts a thread that calls the check and
// the health service every Options::interval; Stop (or the destructor) joins
// it. Stop before the health service or what the check reads goes away.
#ifndef COLIBRI_COORDINATOR_API_GRPC_HEALTH_PUBLISHER_H_
#define COLIBRI_COORDINATOR_API_GRPC_HEALTH_PUBLISHER_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/health_check_service_interface.h"

namespace colibri::coordinator {

class GrpcHealthPublisher {
 public:
  struct Options {
    // Named services set along with the server's overall status ("").
    // Default: none.
    std::vector<std::string> services;
    // Time between checks. Default: 1 s.
    absl::Duration interval = absl::Seconds(1);
  };

  // Publishes ready() before returning, then again whenever it changes
  // (checked every interval).
  // `health` is borrowed.
  GrpcHealthPublisher(const Options& options, grpc::HealthCheckServiceInterface* health,
                      std::function<absl::Status()> ready);
  ~GrpcHealthPublisher();
  GrpcHealthPublisher(const GrpcHealthPublisher&) = delete;
  GrpcHealthPublisher& operator=(const GrpcHealthPublisher&) = delete;

  // Stops checking; the last published status stays. Idempotent.
  void Stop();

 private:
  void Publish(bool serving);
  // Re-checks every interval until Stop; `serving` is what was published.
  void Loop(bool serving);

  const Options options_;
  grpc::HealthCheckServiceInterface* const health_;
  const std::function<absl::Status()> ready_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_GRPC_HEALTH_PUBLISHER_H_
