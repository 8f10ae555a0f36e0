#include "tools/relay/connection.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
// Sleeps are cut into slices of at most this so that Abort() is noticed.
constexpr auto kSleepSlice = std::chrono::milliseconds(50);
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

bool Direction::ReadLoop() {
  std::vector<char> buffer(kReadChunkBytes);
  const auto may_read = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return aborted_.load() || queued_bytes_ <= queue_limit_bytes_;
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&may_read));
    }
    if (aborted_.load()) return false;
    const ssize_t n = ::read(src_, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || aborted_.load()) return false;
    Chunk chunk;
    chunk.deliver = link_.Deliver(Clock::now(), static_cast<uint64_t>(n));
    chunk.data.assign(buffer.begin(), buffer.begin() + n);
    absl::MutexLock lock(&mu_);
    queued_bytes_ += chunk.data.size();
    queue_.push_back(std::move(chunk));
    if (n == 0) return true;
  }
}

bool Direction::WriteLoop() {
  // The default 50 us timer slack would dominate sub-millisecond delays.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return aborted_.load() || !queue_.empty();
  };
  while (true) {
    Chunk chunk;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (aborted_.load()) return false;
      chunk = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= chunk.data.size();
    }
    if (!SleepUntil(chunk.deliver)) return false;
    if (chunk.data.empty()) {
      ::shutdown(dst_, SHUT_WR);
      return true;
    }
    if (!WriteAll(chunk.data)) return false;
  }
}

void Direction::Abort() {
  aborted_.store(true);
  // Taking and releasing the lock makes waiters re-check their conditions.
  absl::MutexLock lock(&mu_);
}

bool Direction::SleepUntil(LinkModel::TimePoint deadline) const {
  while (!aborted_.load()) {
    const auto now = Clock::now();
    if (now >= deadline) return true;
    const LinkModel::TimePoint wake = std::min<LinkModel::TimePoint>(deadline, now + kSleepSlice);
    // steady_clock is CLOCK_MONOTONIC in libstdc++ and libc++ on Linux.
    const int64_t ns = wake.time_since_epoch().count();
    timespec ts;
    ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
  }
  return false;
}

bool Direction::WriteAll(const std::vector<char>& data) const {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(dst_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || aborted_.load()) return false;
    done += static_cast<size_t>(n);
  }
  return true;
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
  const auto run = [this](Direction* d, bool (Direction::*loop)()) {
    if (!(d->*loop)()) Abort();
  };
  std::thread up_read(run, &upstream_, &Direction::ReadLoop);
  std::thread up_write(run, &upstream_, &Direction::WriteLoop);
  std::thread down_read(run, &downstream_, &Direction::ReadLoop);
  run(&downstream_, &Direction::WriteLoop);
  up_read.join();
  up_write.join();
  down_read.join();
}

void Connection::Abort() {
  aborted_.store(true);
  upstream_.Abort();
  downstream_.Abort();
  ::shutdown(client_fd_, SHUT_RDWR);
  if (target_fd_ >= 0) ::shutdown(target_fd_, SHUT_RDWR);
}

}  // namespace colibri::relay
