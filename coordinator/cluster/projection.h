// A throughput projection for clusters this host cannot be: from a model's
// shape, a described cluster and this machine's measured weight-streaming
// rates, the expected decode time per step split by resource (`plan
// --project`, docs/projection.md).
//
// The model. Decode on CPUs is bound by reading weights, so every compute
// figure is bytes of weights read / a measured rate (MachineRates: the real
// kernels streaming weights from RAM, not a datasheet). One step evaluates
// `streams` generations of 1 + drafts tokens each; per layer:
//   coordinator   its dense weights once per step, at the coordinator's rate
//                 for the step's token count;
//   experts       the distinct experts the step's routes touch, assuming
//                 uniform routing (E x (1 - (1 - k/E)^tokens)), spread evenly
//                 over the nodes, each node reading its part at its rate;
//   disk          of those, the share a node's RAM cannot hold (uniform
//                 access: the miss rate is 1 - RAM / the node's share of
//                 expert bytes), read at the node's disk rate;
//   network       one call per involved node per layer: the round trip, the
//                 per-call overhead, and the hidden rows both ways through
//                 the coordinator's link (the shared bottleneck);
// and a layer waits for its slowest node: coordinator + network + node
// compute + disk, in sequence (no overlap is assumed, so the projection
// leans low where prefetch and pipelining would hide disk or network).
// Speculation multiplies the tokens a step yields by the expected accepted
// length 1 + a + a^2 + ... + a^d at acceptance a and d drafts.
//
// Thread-safety: plain values and pure functions.
#ifndef COLIBRI_COORDINATOR_CLUSTER_PROJECTION_H_
#define COLIBRI_COORDINATOR_CLUSTER_PROJECTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::coordinator {

// What the projection needs of a model. Bytes as stored (quantized).
struct ModelShape {
  std::string name;
  int layers = 0;       // all blocks
  int moe_layers = 0;   // blocks with routed experts
  int experts = 0;      // routed experts per MoE layer
  int experts_used = 0; // top-k
  int embd = 0;         // hidden size
  double expert_bytes = 0;  // one routed expert (gate + up + down)
  // Weights read once per step outside the routed experts: attention, norms,
  // routers, shared experts, dense layers and the output head (the token
  // embedding table is not: a step reads one row of it per token).
  double dense_bytes = 0;
};

// Parses "key=value,..." with keys name, layers, moe_layers, experts,
// experts_used, embd, expert_mib, dense_gib (all required but name), or one
// of the presets in ShapePresets() by name. InvalidArgument naming the key.
absl::StatusOr<ModelShape> ParseModelShape(absl::string_view spec);
// Published shapes at a 4-bit-class quantization (Q4_K_M-like, 4.5-4.85 bits
// per weight): deepseek-v3 (also Kimi-K2's 61 layers, at 256 experts),
// qwen3-235b, glm-4.5, qwen3-30b.
std::vector<ModelShape> ShapePresets();

struct ClusterShape {
  int nodes = 1;             // expert nodes; 0: experts computed by the coordinator
  double rtt_seconds = 0;    // round trip coordinator <-> node
  double link_gbit = 1;      // the coordinator's link, Gbit/s
  int node_threads = 1;      // threads of each node's expert compute
  double node_ram_bytes = 0; // each node's RAM for experts (its RAM tier); 0: all fit
  double disk_gbs = 1;       // each node's disk read rate, GB/s
  int replicas = 1;          // copies of each expert
  int wire_bytes = 4;        // bytes per hidden element on the wire (f32 4, bf16 2)
  // Each node's memory bandwidth, GB/s: the ceiling of its threads' rate.
  // 0: this machine's measured all-thread rate (nodes like this machine).
  double node_mem_gbs = 0;
  // The same for the coordinator's PC. 0: this machine's threads / rate.
  int coordinator_threads = 0;
  double coordinator_mem_gbs = 0;
};

// This machine's measured rates: bytes of quantized weights the real kernels
// read per second, for a one-token product (decode) and an eight-token one
// (a batched or verifying step), on one thread and on all of them, and what
// one call costs beyond the wire (gRPC on both ends, the node's dispatch).
struct MachineRates {
  int threads = 1;                  // the coordinator's threads (all of this machine's)
  double bytes_per_s_1tok_1thread = 0;
  double bytes_per_s_1tok = 0;      // all threads
  double bytes_per_s_8tok_1thread = 0;
  double bytes_per_s_8tok = 0;
  double call_overhead_seconds = 0;
};

struct StepShape {
  int streams = 1;                // concurrent generations
  int drafts = 0;                 // draft tokens per generation and step
  double acceptance = 0;          // chance each draft is accepted
};

// A step's time by part, summed over layers; seconds.
struct Projection {
  double coordinator = 0;  // dense weights
  double network = 0;      // round trips, per-call overhead, transfer
  double transfer = 0;     // of network: the hidden rows through the link
  double node_compute = 0;
  double disk = 0;
  double step = 0;         // the sum
  double tokens_per_step = 0;  // generated tokens a step yields (all streams)
  double tokens_per_second = 0;
  double disk_bytes_per_token = 0;
  double miss_rate = 0;    // of expert reads, from disk
  // "coordinator compute", "network latency", "link bandwidth",
  // "node compute" or "disk": the largest part.
  std::string binding;
};

// InvalidArgument for a shape, cluster or rates that cannot be projected
// (non-positive sizes or rates, top-k above the experts).
absl::StatusOr<Projection> Project(const ModelShape& model, const ClusterShape& cluster,
                                   const MachineRates& rates, const StepShape& step);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_PROJECTION_H_
