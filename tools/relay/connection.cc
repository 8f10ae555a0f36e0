#include "tools/relay/connection.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace colibri::relay {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes per read(): large enough for throughput, small enough that a capped
// link's chunks interleave finely with the other connections' traffic.
constexpr size_t kReadChunkBytes = 64 * 1024;
// Waits are cut into slices of at most this so that Abort() is noticed.
constexpr auto kWaitSlice = std::chrono::milliseconds(50);
constexpr auto kConnectTimeout = std::chrono::seconds(10);

void SetNoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

sockaddr_storage CopyAddress(const addrinfo& ai) {
  sockaddr_storage storage{};
  std::memcpy(&storage, ai.ai_addr, std::min<size_t>(ai.ai_addrlen, sizeof(storage)));
  return storage;
}

}  // namespace

Direction::Direction(int src, int dst, const LinkModel::Options& link, size_t queue_limit_bytes)
    : src_(src), dst_(dst), queue_limit_bytes_(queue_limit_bytes), link_(link) {}

bool Direction::WriteDue(LinkModel::TimePoint now, bool* blocked, bool* ended) {
  *blocked = false;
  *ended = false;
  while (!queue_.empty() && queue_.front().deliver <= now) {
    Chunk& head = queue_.front();
    if (head.data.empty()) {
      ::shutdown(dst_, SHUT_WR);
      *ended = true;
      return true;
    }
    const ssize_t n = ::send(dst_, head.data.data() + head_written_,
                             head.data.size() - head_written_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      *blocked = true;
      return true;
    }
    if (n <= 0) return false;
    head_written_ += static_cast<size_t>(n);
    if (head_written_ == head.data.size()) {
      queued_bytes_ -= head.data.size();
      queue_.pop_front();
      head_written_ = 0;
    }
  }
  return true;
}

bool Direction::Run() {
  // The default 50 us timer slack would dominate sub-millisecond delays.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  std::vector<char> buffer(kReadChunkBytes);
  bool src_open = true;
  while (!aborted_.load()) {
    bool blocked = false, ended = false;
    if (!WriteDue(Clock::now(), &blocked, &ended)) return false;
    if (ended) return true;
    // Wait for the source (unless it ended or the queue is full), for the
    // destination when it blocked, and at most until the head is due.
    pollfd fds[2];
    nfds_t n_fds = 0;
    const bool reading = src_open && queued_bytes_ <= queue_limit_bytes_;
    if (reading) fds[n_fds++] = pollfd{src_, POLLIN, 0};
    if (blocked) fds[n_fds++] = pollfd{dst_, POLLOUT, 0};
    auto wait = std::chrono::duration_cast<LinkModel::Duration>(kWaitSlice);
    if (!blocked && !queue_.empty()) {
      wait =
          std::min(wait, std::max(LinkModel::Duration(0), queue_.front().deliver - Clock::now()));
    }
    const timespec timeout{static_cast<time_t>(wait.count() / 1'000'000'000),
                           static_cast<long>(wait.count() % 1'000'000'000)};
    const int ready = ::ppoll(fds, n_fds, &timeout, nullptr);
    if (ready < 0 && errno != EINTR) return false;
    if (aborted_.load()) return false;
    if (ready <= 0 || !reading || fds[0].revents == 0) continue;
    const ssize_t n = ::recv(src_, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) return false;
    Chunk chunk;
    chunk.deliver = link_.Deliver(Clock::now(), static_cast<uint64_t>(n));
    chunk.data.assign(buffer.begin(), buffer.begin() + n);
    queued_bytes_ += chunk.data.size();
    queue_.push_back(std::move(chunk));
    if (n == 0) src_open = false;
  }
  return false;
}

Connection::Connection(int client_fd, const addrinfo& target, const LinkModel::Options& link,
                       size_t queue_limit_bytes)
    : client_fd_(client_fd),
      target_fd_(::socket(target.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)),
      target_addr_(CopyAddress(target)),
      target_addr_len_(target.ai_addrlen),
      upstream_(client_fd_, target_fd_, link, queue_limit_bytes),
      downstream_(target_fd_, client_fd_, link, queue_limit_bytes) {}

Connection::~Connection() {
  ::close(client_fd_);
  if (target_fd_ >= 0) ::close(target_fd_);
}

bool Connection::ConnectTarget() {
  if (target_fd_ < 0) return false;
  // Non-blocking so that Abort() and the timeout are noticed while connecting.
  const int flags = ::fcntl(target_fd_, F_GETFL);
  ::fcntl(target_fd_, F_SETFL, flags | O_NONBLOCK);
  int rc =
      ::connect(target_fd_, reinterpret_cast<const sockaddr*>(&target_addr_), target_addr_len_);
  if (rc != 0 && errno != EINPROGRESS) return false;
  const auto deadline = Clock::now() + kConnectTimeout;
  while (rc != 0) {
    if (aborted_.load() || Clock::now() >= deadline) return false;
    pollfd p{target_fd_, POLLOUT, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int error = 0;
    socklen_t len = sizeof(error);
    if (::getsockopt(target_fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      return false;
    }
    rc = 0;
  }
  ::fcntl(target_fd_, F_SETFL, flags);
  return true;
}

void Connection::Run() {
  if (!ConnectTarget()) return;  // the destructor closes the client: it sees EOF
  SetNoDelay(client_fd_);
  SetNoDelay(target_fd_);
  const auto run = [this](Direction* d) {
    if (!d->Run()) Abort();
  };
  std::thread up(run, &upstream_);
  run(&downstream_);
  up.join();
}

void Connection::Abort() {
  aborted_.store(true);
  upstream_.Abort();
  downstream_.Abort();
  ::shutdown(client_fd_, SHUT_RDWR);
  if (target_fd_ >= 0) ::shutdown(target_fd_, SHUT_RDWR);
}

}  // namespace colibri::relay
