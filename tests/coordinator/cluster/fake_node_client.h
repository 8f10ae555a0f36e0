// A NodeClient for unit tests: every call answers Unimplemented except
// Inventory and NodeStats (empty replies) and CheckHealth, which follows
// set_down(). Tests derive from it and override what they exercise.
#ifndef COLIBRI_TESTS_COORDINATOR_CLUSTER_FAKE_NODE_CLIENT_H_
#define COLIBRI_TESTS_COORDINATOR_CLUSTER_FAKE_NODE_CLIENT_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "coordinator/cluster/node_client.h"

namespace colibri::coordinator::testing {

class FakeNodeClient : public NodeClient {
 public:
  explicit FakeNodeClient(std::string address) : address_(std::move(address)) {}

  const std::string& address() const override { return address_; }
  absl::StatusOr<v1::ComputeLayerReply> ComputeLayer(const v1::ComputeLayerRequest&) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<v1::PrefetchReply> Prefetch(const v1::PrefetchRequest&) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<std::unique_ptr<IngestStream>> StartIngest() override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<v1::ImportReply> Import(const v1::ImportRequest&) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<v1::InventoryReply> Inventory(const v1::InventoryRequest&) override {
    return v1::InventoryReply();
  }
  absl::StatusOr<v1::NodeStatsReply> NodeStats() override { return v1::NodeStatsReply(); }
  absl::Status CheckHealth() override {
    absl::MutexLock lock(&health_mu_);
    return down_ ? absl::UnavailableError(address_ + " is down") : absl::OkStatus();
  }

  void set_down(bool down) {
    absl::MutexLock lock(&health_mu_);
    down_ = down;
  }
  bool down() const {
    absl::MutexLock lock(&health_mu_);
    return down_;
  }

 private:
  const std::string address_;
  mutable absl::Mutex health_mu_;
  bool down_ ABSL_GUARDED_BY(health_mu_) = false;
};

}  // namespace colibri::coordinator::testing

#endif  // COLIBRI_TESTS_COORDINATOR_CLUSTER_FAKE_NODE_CLIENT_H_
