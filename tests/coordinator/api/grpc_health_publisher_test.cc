#include "coordinator/api/grpc_health_publisher.h"

#include <atomic>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

// Records what was published, per service ("" is the server's overall one).
class RecordingHealth : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& service, bool serving) override {
    absl::MutexLock lock(&mu_);
    status_[service] = serving;
    ++updates_;
  }
  void SetServingStatus(bool serving) override { SetServingStatus("", serving); }
  void Shutdown() override {}

  // Waits until `service` is published as `serving` (the test's timeout ends
  // a wait that never comes).
  void AwaitStatus(const std::string& service, bool serving) {
    absl::MutexLock lock(&mu_);
    const auto published = [this, &service, serving]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = status_.find(service);
      return it != status_.end() && it->second == serving;
    };
    mu_.Await(absl::Condition(&published));
  }
  std::map<std::string, bool> status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  int updates() {
    absl::MutexLock lock(&mu_);
    return updates_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, bool> status_ ABSL_GUARDED_BY(mu_);
  int updates_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(GrpcHealthPublisherTest, PublishesAtOnceThenFollowsTheCheck) {
  RecordingHealth health;
  std::atomic<bool> ready{false};
  GrpcHealthPublisher::Options options;
  options.services = {"colibri.v1.Inference"};
  options.interval = absl::Milliseconds(1);
  GrpcHealthPublisher publisher(options, &health, [&ready] {
    return ready.load() ? absl::OkStatus() : absl::UnavailableError("no expert node is healthy");
  });
  // Before the constructor returns: nobody sees SERVING by default.
  EXPECT_EQ(health.status(),
            (std::map<std::string, bool>{{"", false}, {"colibri.v1.Inference", false}}));
  ready = true;
  health.AwaitStatus("", true);
  health.AwaitStatus("colibri.v1.Inference", true);
  ready = false;
  health.AwaitStatus("", false);
  health.AwaitStatus("colibri.v1.Inference", false);
  publisher.Stop();
  // Stopped: nothing is published any more.
  const int updates = health.updates();
  ready = true;
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(health.updates(), updates);
}

}  // namespace
}  // namespace colibri::coordinator
