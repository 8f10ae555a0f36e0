// `colibri-coordinator plan --project`: the decode throughput of a described
// cluster (coordinator/cluster/projection.h), calibrated on this machine by
// streaming a model's own expert weights through the real kernels.
#ifndef COLIBRI_COORDINATOR_CLI_PROJECT_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_PROJECT_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/cluster/projection.h"

namespace colibri::arch {
class Model;
}

namespace colibri::coordinator {

struct ProjectOptions {
  // The GGUF whose experts calibrate the rates, and whose shape is projected
  // unless `shape` is set.
  std::string model_path;
  // A preset name or "key=value,..." (ParseModelShape). Default: "" (the
  // model's own shape).
  std::string shape;
  // --project-nodes, -rtt-ms, -gbit, -node-threads, -ram-gib, -disk-gbs,
  // -node-mem-gbs; replicas from the cluster flags. Defaults: 3 nodes,
  // 0.5 ms, 1 Gbit/s, this machine's threads, all in RAM, 2 GB/s, this
  // machine's rate.
  ClusterShape cluster{3, 0.0005, 1.0, 0, 0.0, 2.0, 1, 4, 0.0, 0, 0.0};
  // Seconds one call costs beyond the round trip and the wire (both ends'
  // gRPC paths). Default: 0.0003, the network part of a loopback call's reply
  // time measured here (docs/projection.md).
  double call_overhead_seconds = 0.0003;
  // Threads of the coordinator (the probe's "all threads"). Default: 0,
  // meaning every core of this machine.
  int threads = 0;
  // The speculation rows: drafts per step and their acceptance. Defaults: 3
  // and 0.7.
  int drafts = 3;
  double acceptance = 0.7;
  // Instead of the streams table: one line per cluster of 3, 5 and 8 nodes
  // on 1, 2.5 and 10 Gbit/s links (the rest as described). Default: false.
  bool grid = false;
};

// Times this machine's kernels on `model`'s experts: one copy per 2 MiB of a
// buffer of `buffer_bytes` (beyond the caches), products of 1 and 8 tokens
// on 1 thread and on `threads`; best of three passes.
absl::StatusOr<MachineRates> MeasureRates(const arch::Model& model, int threads,
                                          size_t buffer_bytes);

// The shape of a loaded model (bytes as stored).
ModelShape ShapeOf(const arch::Model& model);

absl::Status RunProject(const ProjectOptions& options, std::ostream& out, std::ostream& err);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_PROJECT_COMMAND_H_
