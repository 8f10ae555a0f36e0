// Routing traces: which experts every forward step routed to, layer by layer,
// recorded by the coordinator (`run` / `serve --trace-routing FILE`) and
// replayed by the cache simulator (tools/cache_sim/).
//
// Format (text, one record a line, fields separated by one space):
//   colibri-routing-trace 1                    first line: magic and version
//   # ...                                      a comment, ignored
//   R <step> <layer> <expert>:<tokens> ...     the experts one forward step
//                                              routed at one MoE layer, by
//                                              increasing expert, each with
//                                              the batch's tokens routed to it
//   H <step> <layer> <expert> ...              next-layer prediction hints for
//                                              <layer> of <step>, issued before
//                                              an earlier layer's R line, most
//                                              voted first
// <step> counts forward steps from 0 (a step: one pass over the layers; a
// batch of several generations is one step). A step's R lines come in layer
// order; a layer run in two half-batches gives two R lines for that layer,
// one after the other. The writer starts a step at an R line whose layer is
// before the last one's, so a model with a single MoE layer is one step.
// A trace cut at its byte limit ends with "# truncated" and a step may miss
// its last layers.
#ifndef COLIBRI_MODEL_MOE_ROUTING_TRACE_H_
#define COLIBRI_MODEL_MOE_ROUTING_TRACE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "model/moe/routing_observer.h"

namespace colibri::moe {

// Appends trace records to a file. Records are formatted into a memory
// buffer by the caller's thread (no I/O); full buffers are written by a
// background thread. Bounded: beyond Options::max_bytes nothing more is
// written, and when the writer falls behind by more than
// Options::max_pending_bytes, records are dropped (dropped_records counts
// them) rather than held.
//
// Records what an ObservedExpertBackend (model/moe/routing_observer.h)
// reports.
//
// Thread-safety: all methods may be called concurrently.
class RoutingTraceWriter final : public RoutingObserver {
 public:
  struct Options {
    // Bytes of records the file may hold at most. Default: 256 MiB.
    uint64_t max_bytes = uint64_t{256} << 20;
    // A buffer goes to the writer thread once it holds this much. Default: 256 KiB.
    size_t buffer_bytes = size_t{256} << 10;
    // Formatted bytes waiting for the writer beyond which records are
    // dropped. Default: 16 MiB.
    size_t max_pending_bytes = size_t{16} << 20;
  };

  // Creates (truncates) `path` and writes the header. InvalidArgument naming
  // the path when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> Open(const std::string& path,
                                                                  const Options& options);
  // Writes what is buffered and closes the file.
  ~RoutingTraceWriter() override;
  RoutingTraceWriter(const RoutingTraceWriter&) = delete;
  RoutingTraceWriter& operator=(const RoutingTraceWriter&) = delete;

  // One layer's routing: experts [n_tokens][k] (negative ids are skipped).
  void OnRoutes(int layer, int64_t n_tokens, int k, const int32_t* experts) override;
  // Hints for `layer` (issued before an earlier layer of the same step).
  void OnHints(int layer, absl::Span<const int32_t> experts) override;
  // Hands the buffer to the writer thread and waits until the file has it.
  void Flush();

  uint64_t dropped_records() const;
  uint64_t written_bytes() const;

 private:
  RoutingTraceWriter(std::FILE* file, const Options& options);
  void Append(const std::string& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Handoff() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteLoop();

  const Options options_;
  std::FILE* const file_;

  mutable absl::Mutex mu_;
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> pending_ ABSL_GUARDED_BY(mu_);
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t accepted_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // header + records kept
  uint64_t written_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool truncated_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // the thread holds a batch
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  int last_layer_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<std::pair<int32_t, int32_t>> scratch_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

// A parsed trace record.
struct TraceRecord {
  enum class Kind { kRoute, kHint };
  Kind kind = Kind::kRoute;
  int64_t step = 0;
  int layer = 0;
  // kRoute: (expert, tokens) by increasing expert; kHint: (expert, 0) in
  // hint order.
  std::vector<std::pair<int32_t, int32_t>> experts;
};

// Parses a whole trace. InvalidArgument "<name>:<line>: what" for a bad
// header or record.
absl::StatusOr<std::vector<TraceRecord>> ParseRoutingTrace(absl::string_view text,
                                                           absl::string_view name);
// Reads and parses `path`; NotFound when it cannot be read.
absl::StatusOr<std::vector<TraceRecord>> ReadRoutingTrace(const std::string& path);

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_ROUTING_TRACE_H_
