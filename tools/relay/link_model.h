// The timing of one direction of an emulated network link: a propagation delay
// plus, optionally, a serialization rate. No sockets, no clocks: the caller
// passes arrival times and gets delivery times, so the arithmetic is testable.
//
// A chunk of b bytes that arrives at t is delivered at
//   start    = max(t + delay, link_free)
//   delivery = link_free = start + b / rate
// which is a real link seen from its far end: the first bit comes out after the
// propagation delay, and the link carries one chunk at a time at `rate`.
// Equal to serializing at the sender (max(t, free) + b / rate + delay) shifted
// by the constant delay. Serialization times are rounded up to whole
// nanoseconds per chunk, so a capped link is never faster than its rate.
//
// Thread-compatible: one LinkModel per direction, used by one thread.
#ifndef COLIBRI_TOOLS_RELAY_LINK_MODEL_H_
#define COLIBRI_TOOLS_RELAY_LINK_MODEL_H_

#include <chrono>
#include <cstdint>

namespace colibri::relay {

class LinkModel {
 public:
  using Duration = std::chrono::nanoseconds;
  // A steady_clock time point in nanoseconds.
  using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

  struct Options {
    // One-way propagation delay. Default: 0.
    Duration delay{0};
    // Serialization rate in bytes per second. Default: 0, unlimited (chunks
    // are delivered at arrival + delay).
    uint64_t bytes_per_second = 0;
  };

  explicit LinkModel(const Options& options) : options_(options) {}

  // When a chunk of `bytes` read at `arrival` is to be written out. Arrivals
  // must not go back in time; delivery times never do.
  TimePoint Deliver(TimePoint arrival, uint64_t bytes);

  // How long `bytes` occupy the link: ceil(bytes * 1e9 / rate) ns (0 when
  // unlimited).
  Duration SerializationTime(uint64_t bytes) const;

  const Options& options() const { return options_; }

 private:
  const Options options_;
  // When the link has finished the last chunk given to Deliver.
  TimePoint link_free_{};
};

}  // namespace colibri::relay

#endif  // COLIBRI_TOOLS_RELAY_LINK_MODEL_H_
