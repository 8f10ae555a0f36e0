// One relayed TCP connection: the accepted client socket, the socket to the
// target, and a Direction for each way through its own LinkModel.
//
// Each Direction is one thread that waits (ppoll) for whichever comes first:
// its source readable, the delivery time of the chunk at the head of its
// queue, or (when a write would block) its destination writable. It reads
// chunks, stamps their delivery time and queues them, and writes each when
// it is due, so a chunk costs no hand-off between threads. It stops reading
// while the queue holds more than `queue_limit_bytes`, so memory stays
// bounded and a slow receiver slows the sender down, as TCP would. End of
// stream is forwarded as a half-close after the queued data; a reset or error
// on either socket aborts both ways.
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

#include "tools/relay/link_model.h"

namespace colibri::relay {

// One way of a connection, from `src` to `dst`. The sockets are borrowed;
// they stay blocking (reads and writes pass MSG_DONTWAIT), since the other
// Direction shares them.
class Direction {
 public:
  Direction(int src, int dst, const LinkModel::Options& link, size_t queue_limit_bytes);
  Direction(const Direction&) = delete;
  Direction& operator=(const Direction&) = delete;

  // Relays `src` to `dst` as the link delivers it (a half-close for the end
  // of the stream). True at the end of the stream, false on an error or
  // after Abort().
  bool Run();
  // Makes Run() return within kWaitSlice without delivering what is queued
  // (at once when the sockets are shut down too, as Connection::Abort does).
  void Abort() { aborted_.store(true); }

 private:
  struct Chunk {
    LinkModel::TimePoint deliver;
    std::vector<char> data;  // empty: end of stream
  };

  // Writes the due chunks at the queue's head. Returns false on an error,
  // and sets *blocked when the destination takes no more for now, *ended
  // after the end of stream was forwarded.
  bool WriteDue(LinkModel::TimePoint now, bool* blocked, bool* ended);

  const int src_;
  const int dst_;
  const size_t queue_limit_bytes_;
  LinkModel link_;
  std::atomic<bool> aborted_{false};
  // Owned by the thread in Run().
  std::deque<Chunk> queue_;
  size_t queued_bytes_ = 0;
  size_t head_written_ = 0;  // bytes of queue_.front() already written
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
