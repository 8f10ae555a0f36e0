// What GET /v1/cluster answers (and the dashboard page draws): the model's
// shape, the scheduler's queue, every expert node (health, reply times,
// call counters and its tiers' figures), the placement, the routes per
// layer and expert, and the newest forward steps split into where their
// time went. JSON; every figure is a number the coordinator already has.
//
// The nodes' tier figures (RAM, disk, hit rate) come from their NodeStats
// RPC, read by a background thread while someone looks: a request returns
// at once with the newest figures (their age in "stats_age_s"), and asks the
// thread for fresh ones when they are older than Options::stats_max_age.
// A node that is unhealthy is not asked (its last figures stay, marked
// with their age), so a hung node never holds a dashboard request.
//
// Thread-safety: Render may be called from any thread concurrently.
#ifndef COLIBRI_COORDINATOR_API_CLUSTER_VIEW_H_
#define COLIBRI_COORDINATOR_API_CLUSTER_VIEW_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "colibri/v1/expert.pb.h"

namespace colibri {
namespace arch {
class Model;
}
namespace coordinator {

class Cluster;
class ExpertUse;
class GenerationScheduler;
class StepTimeline;

class ClusterView {
 public:
  struct Sources {
    // Each may be null (left out of the answer, or null in it); borrowed,
    // must outlive the view.
    const arch::Model* model = nullptr;
    const GenerationScheduler* scheduler = nullptr;
    Cluster* cluster = nullptr;  // null: experts computed here
    const ExpertUse* expert_use = nullptr;
    const StepTimeline* timeline = nullptr;
  };
  struct Options {
    // Node figures older than this are read again. Default: 2 s.
    absl::Duration stats_max_age = absl::Seconds(2);
    // The clock of "time" and the steps' ages. Default: absl::Now.
    std::function<absl::Time()> clock;
  };

  explicit ClusterView(Sources sources) : ClusterView(sources, Options()) {}
  ClusterView(Sources sources, Options options);
  // Joins the stats thread (waits for a NodeStats call in progress).
  ~ClusterView();
  ClusterView(const ClusterView&) = delete;
  ClusterView& operator=(const ClusterView&) = delete;

  // The whole answer, serialized JSON.
  std::string Render();

 private:
  struct NodeFigures {
    absl::Time read = absl::InfinitePast();
    absl::StatusOr<v1::NodeStatsReply> stats = absl::UnavailableError("not read yet");
  };
  absl::Time Now() const;
  void StatsLoop();

  const Sources sources_;
  const Options options_;
  absl::Mutex mu_;
  std::vector<NodeFigures> figures_ ABSL_GUARDED_BY(mu_);  // [node]
  bool wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_read_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread stats_thread_;  // only with a cluster
};

}  // namespace coordinator
}  // namespace colibri

#endif  // COLIBRI_COORDINATOR_API_CLUSTER_VIEW_H_
