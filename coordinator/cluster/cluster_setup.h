// Start-up of a cluster for one model: give every node the experts placement
// assigns it and that it does not hold yet, either streamed from the
// coordinator's GGUF (Ingest) or imported by the node from its own copy of the
// file (Import). Re-running sends nothing a node already holds durably.
#ifndef COLIBRI_COORDINATOR_CLUSTER_CLUSTER_SETUP_H_
#define COLIBRI_COORDINATOR_CLUSTER_CLUSTER_SETUP_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/cluster/cluster.h"
#include "model/arch/model.h"

namespace colibri::coordinator {

class ExpertChecksums;

struct ExpertSetupOptions {
  // When set, each node imports its experts from the GGUF at this path on its
  // own file system instead of receiving them. Default: empty (stream them).
  std::string node_gguf_path;
  // Data bytes per IngestChunk. Default: 1 MiB.
  uint64_t chunk_bytes = 1 << 20;
  // Progress lines (per node: bytes, rate, ETA). Default: null, no progress.
  std::ostream* progress = nullptr;
  // Time between progress lines of one node. Default: 1 s.
  absl::Duration progress_interval = absl::Seconds(1);
  // Rewrite each node's progress line in place (common/progress_line.h: a
  // terminal) instead of writing a line per update. Default: false.
  bool progress_in_place = false;
  // Ask every node for its inventory again instead of using the one the
  // cluster read at start-up (re-placement does, since nodes may have gained
  // or lost experts since). Default: false.
  bool refresh_inventory = false;
  // Polled between experts; when it returns true the transfer stops with
  // Cancelled. Default: empty (never).
  std::function<bool()> cancelled;
  // A node whose transfer fails is listed in ExpertSetupResult::failed_nodes
  // instead of failing the whole call (start-up goes on without it: its
  // experts are computed by the coordinator until it is back and repaired).
  // Default: false.
  bool skip_failed_nodes = false;
  // The model's expert hashes, for checking what nodes hold and for Ingest:
  // borrowed; kept between starts (expert_checksums.h). Default: null, every
  // hash computed from the model's bytes.
  ExpertChecksums* checksums = nullptr;
};

struct ExpertSetupResult {
  int64_t experts_sent = 0;      // streamed with Ingest
  uint64_t bytes_sent = 0;       // expert bytes streamed (gate + up + down + biases)
  int64_t experts_imported = 0;  // imported by nodes from their own GGUF
  // With skip_failed_nodes: each node whose transfer failed, and why.
  std::vector<std::pair<int, absl::Status>> failed_nodes;
};

// The node-side checksum of an expert: xxh64 (seed 0) over gate, up and down
// bytes and its biases (float32, when it has them) concatenated, as in
// IngestChunk.xxh64.
uint64_t ExpertChecksum(const moe::ExpertWeights& w);

// Bytes of an expert as sent and stored: gate, up, down and its biases.
uint64_t ExpertBytes(const moe::ExpertWeights& w);

// Sends or imports what is missing on every node for `placement`, nodes in
// parallel. The experts a node already holds are verified by the content
// hash its inventory reports (InventoryEntry.xxh64) against `model`'s bytes.
// Unavailable when a node fails mid-transfer; DataLoss when a node does not
// acknowledge an expert as stored or holds other bytes than the model's for
// an assigned expert; Cancelled when options.cancelled says so (with
// skip_failed_nodes, only Cancelled; node failures are listed in the result).
absl::StatusOr<ExpertSetupResult> EnsureExperts(const Cluster& cluster,
                                                const Placement& placement,
                                                const arch::Model& model,
                                                const ExpertSetupOptions& options);
// The same for the placement in force.
absl::StatusOr<ExpertSetupResult> EnsureExperts(const Cluster& cluster, const arch::Model& model,
                                                const ExpertSetupOptions& options);

// Drops the coordinator's resident pages of every routed expert tensor
// (MappedFile::DropPages), so that its RSS stays near the dense part once
// experts live on nodes. The pages read back from the file if the local
// fallback ever needs them.
void ReleaseExpertPages(const arch::Model& model);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_CLUSTER_SETUP_H_
