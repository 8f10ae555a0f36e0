#include "coordinator/api/grpc_health_publisher.h"

#include <utility>

namespace colibri::coordinator {

GrpcHealthPublisher::GrpcHealthPublisher(const Options& options,
                                         grpc::HealthCheckServiceInterface* health,
                                         std::function<absl::Status()> ready)
    : options_(options), health_(health), ready_(std::move(ready)) {
  const bool serving = ready_().ok();
  Publish(serving);
  thread_ = std::thread([this, serving] { Loop(serving); });
}

GrpcHealthPublisher::~GrpcHealthPublisher() { Stop(); }

void GrpcHealthPublisher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void GrpcHealthPublisher::Publish(bool serving) {
  health_->SetServingStatus(serving);
  for (const std::string& service : options_.services) health_->SetServingStatus(service, serving);
}

void GrpcHealthPublisher::Loop(bool serving) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.interval)) return;
    }
    const bool now = ready_().ok();
    if (now != serving) {
      Publish(now);
      serving = now;
    }
  }
}

}  // namespace colibri::coordinator
