// One relayed TCP connection: the accepted client socket, the socket to the
// target, and a Direction for each way through its own LinkModel.
//
// Each Direction has a reader thread (reads chunks, stamps their delivery time,
// queues them) and a writer thread (sleeps until a chunk's delivery time, then
// writes it). The reader stops reading while the queue holds more than
// `queue_limit_bytes`, so memory stays bounded and a slow receiver slows the
// sender down, as TCP would. End of stream is forwarded as a half-close after
// the queued data; a reset or error on either socket aborts both ways.
//
// Thread-safety: Run() once, from one thread; Abort() from any thread, any
// number of times, until the Connection is destroyed.
#ifndef COLIBRI_TOOLS_RELAY_CONNECTION_H_
#define COLIBRI_TOOLS_RELAY_CONNECTION_H_

#include <netdb.h>

#include <atomic>
#include <cstddef>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tools/relay/link_model.h"

namespace colibri::relay {

// One way of a connection, from `src` to `dst`. The sockets are borrowed.
class Direction {
 public:
  Direction(int src, int dst, const LinkModel::Options& link, size_t queue_limit_bytes);
  Direction(const Direction&) = delete;
  Direction& operator=(const Direction&) = delete;

  // ReadLoop reads `src` into the queue, WriteLoop writes the queue to `dst` as
  // the link delivers it (a half-close for the end of stream). Each returns
  // true at the end of the stream, false on an error or after Abort().
  bool ReadLoop();
  bool WriteLoop();
  // Wakes both loops; they return without delivering what is queued.
  void Abort();

 private:
  struct Chunk {
    LinkModel::TimePoint deliver;
    std::vector<char> data;  // empty: end of stream
  };

  // Sleeps until `deadline` (CLOCK_MONOTONIC, absolute) unless aborted first.
  // False when aborted.
  bool SleepUntil(LinkModel::TimePoint deadline) const;
  bool WriteAll(const std::vector<char>& data) const;

  const int src_;
  const int dst_;
  const size_t queue_limit_bytes_;
  LinkModel link_;  // used by the reader thread only
  std::atomic<bool> aborted_{false};

  absl::Mutex mu_;
  std::deque<Chunk> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class Connection {
 public:
  // Takes ownership of `client_fd`; `target` is resolved already.
  Connection(int client_fd, const addrinfo& target, const LinkModel::Options& link,
             size_t queue_limit_bytes);
  ~Connection();  // closes both sockets
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to the target (closing the client when that fails), then relays
  // until both ways have ended or the connection is aborted.
  void Run();
  // Ends both ways now: shuts both sockets down so that blocked reads and
  // writes return.
  void Abort();

 private:
  bool ConnectTarget();

  const int client_fd_;
  const int target_fd_;  // -1 when socket() failed
  const sockaddr_storage target_addr_;
  const socklen_t target_addr_len_;
  std::atomic<bool> aborted_{false};
  Direction upstream_;    // client -> target
  Direction downstream_;  // target -> client
};

}  // namespace colibri::relay

#endif  // COLIBRI_TOOLS_RELAY_CONNECTION_H_
