// The Prometheus metrics of an expert node (`--metrics-listen HOST:PORT`):
// every NodeStatsReply field, the compute time histogram, and a small HTTP
// server answering GET /metrics.
//
// Naming: a NodeStatsReply field F becomes colibri_node_F_total (a counter)
// or colibri_node_F (a gauge, for the fields the proto marks "now" and the
// budget); "_micros" fields are converted to seconds ("_seconds"). The node
// id is the `node` label of colibri_node_info. New uint64/int32 fields are
// picked up by reflection as counters unless listed in kNodeGaugeFields.
//
// Thread-safety: RenderNodeMetrics is a pure function; NodeMetricsServer's
// Start and Stop from the owning thread, requests on its threads.
#ifndef COLIBRI_EXPERT_NODE_NODE_METRICS_H_
#define COLIBRI_EXPERT_NODE_NODE_METRICS_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "colibri/v1/expert.pb.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace colibri::expert_node {

class NodeReport;

// The fields of NodeStatsReply that are values now, not cumulative counts.
inline constexpr const char* kNodeGaugeFields[] = {
    "ram_budget_bytes", "ram_used_bytes",    "experts_stored",       "bytes_stored",
    "experts_in_ram",   "in_flight",         "ram_peak_used_bytes",  "pinned_experts",
    "pinned_bytes",     "free_buffer_bytes", "ingest_buffered_bytes"};

// The text exposition of `stats` and the compute time histogram.
std::string RenderNodeMetrics(const v1::NodeStatsReply& stats,
                              const metrics::Histogram::Snapshot& compute_seconds);

// RenderNodeMetrics of the report's stats now (thread-safe as NodeReport).
std::string RenderNodeReport(const NodeReport& report);

class NodeMetricsServer {
 public:
  struct Options {
    // "HOST:PORT" (port 0: the OS picks). Beyond loopback it needs
    // auth_token or insecure. Required.
    std::string listen;
    // Required bearer token ("Authorization: Bearer ..."); empty: none.
    // Default: "".
    std::string auth_token;
    // Allow listening beyond loopback without a token. Default: false.
    bool insecure = false;
  };

  // Binds and serves the metrics of `report` (borrowed; Stop before it goes).
  // FailedPrecondition beyond loopback without token or insecure,
  // InvalidArgument for a malformed address, Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<NodeMetricsServer>> Start(const Options& options,
                                                                  const NodeReport* report);
  ~NodeMetricsServer();
  NodeMetricsServer(const NodeMetricsServer&) = delete;
  NodeMetricsServer& operator=(const NodeMetricsServer&) = delete;

  // "host:port" with the bound port.
  const std::string& address() const { return address_; }
  // Stops serving and joins the listener. Idempotent.
  void Stop();

 private:
  NodeMetricsServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::string address_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_NODE_METRICS_H_
