#include "tools/relay/relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/relay/connection.h"

namespace colibri::relay {
namespace {

constexpr size_t kQueueHeadroomBytes = 4 << 20;

// The first address `address` resolves to, as a stream socket address.
absl::Status Resolve(const std::string& address, bool passive, addrinfo* out,
                     sockaddr_storage* storage) {
  std::string host, port;
  COLIBRI_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", address, ": ", ::gai_strerror(rc)));
  }
  *out = *found;
  std::memcpy(storage, found->ai_addr, std::min<size_t>(found->ai_addrlen, sizeof(*storage)));
  out->ai_addr = reinterpret_cast<sockaddr*>(storage);
  out->ai_canonname = nullptr;
  out->ai_next = nullptr;
  ::freeaddrinfo(found);
  return absl::OkStatus();
}

std::string FormatAddress(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a6.sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(a6.sin6_port));
  }
  const auto& a4 = reinterpret_cast<const sockaddr_in&>(addr);
  ::inet_ntop(AF_INET, &a4.sin_addr, host, sizeof(host));
  return absl::StrCat(host, ":", ntohs(a4.sin_port));
}

size_t DefaultQueueLimit(const LinkModel::Options& link) {
  const double in_flight = static_cast<double>(link.bytes_per_second) *
                           std::chrono::duration<double>(link.delay).count();
  return kQueueHeadroomBytes + static_cast<size_t>(in_flight);
}

}  // namespace

Relay::Relay(const Options& options)
    : link_(options.link),
      queue_limit_bytes_(options.queue_limit_bytes != 0 ? options.queue_limit_bytes
                                                        : DefaultQueueLimit(options.link)) {}

absl::StatusOr<std::unique_ptr<Relay>> Relay::Start(const Options& options) {
  if (options.routes.empty()) return absl::InvalidArgumentError("no route to relay");
  std::unique_ptr<Relay> relay(new Relay(options));
  for (const RouteSpec& route : options.routes) {
    auto listener = std::make_unique<Listener>();
    COLIBRI_RETURN_IF_ERROR(
        Resolve(route.target, /*passive=*/false, &listener->target, &listener->target_addr));
    addrinfo listen_ai;
    sockaddr_storage listen_addr;
    COLIBRI_RETURN_IF_ERROR(Resolve(route.listen, /*passive=*/true, &listen_ai, &listen_addr));
    listener->fd = ::socket(listen_ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (listener->fd >= 0) {
      ::setsockopt(listener->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    }
    if (listener->fd < 0 || ::bind(listener->fd, listen_ai.ai_addr, listen_ai.ai_addrlen) != 0 ||
        ::listen(listener->fd, SOMAXCONN) != 0) {
      const std::string error = std::strerror(errno);
      if (listener->fd >= 0) ::close(listener->fd);
      return absl::UnavailableError(absl::StrCat("cannot listen on ", route.listen, ": ", error));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(listener->fd, reinterpret_cast<sockaddr*>(&bound), &len);
    relay->listen_addresses_.push_back(FormatAddress(bound));
    relay->listeners_.push_back(std::move(listener));
  }
  for (const std::unique_ptr<Listener>& listener : relay->listeners_) {
    relay->accept_threads_.emplace_back(&Relay::AcceptLoop, relay.get(), listener.get());
  }
  return relay;
}

Relay::~Relay() {
  Stop();
  for (const std::unique_ptr<Listener>& listener : listeners_) ::close(listener->fd);
}

void Relay::AcceptLoop(Listener* listener) {
  while (true) {
    const int fd = ::accept4(listener->fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      {
        absl::MutexLock lock(&registry_->mu);
        if (registry_->stopping) return;
      }
      // Out of descriptors or a connection reset before accept: keep serving.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      continue;
    }
    auto connection = std::make_unique<Connection>(fd, listener->target, link_, queue_limit_bytes_);
    absl::MutexLock lock(&registry_->mu);
    if (registry_->stopping) return;  // the connection closes its client
    registry_->connections.insert(connection.get());
    std::thread(&Relay::Serve, registry_, std::move(connection)).detach();
  }
}

void Relay::Serve(std::shared_ptr<Registry> registry, std::unique_ptr<Connection> connection) {
  connection->Run();
  // Deregister before the sockets close (in the destructor) so that Stop()
  // never shuts down a descriptor number that has been reused.
  absl::MutexLock lock(&registry->mu);
  registry->connections.erase(connection.get());
}

void Relay::Stop() {
  {
    absl::MutexLock lock(&registry_->mu);
    if (registry_->stopping) return;
    registry_->stopping = true;
  }
  // shutdown() wakes a thread blocked in accept() on Linux.
  for (const std::unique_ptr<Listener>& listener : listeners_) {
    ::shutdown(listener->fd, SHUT_RDWR);
  }
  for (std::thread& t : accept_threads_) t.join();
  accept_threads_.clear();
  Registry& r = *registry_;
  absl::MutexLock lock(&r.mu);
  for (Connection* connection : r.connections) connection->Abort();
  const auto all_done = [&r]()
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) { return r.connections.empty(); };
  r.mu.Await(absl::Condition(&all_done));
}

}  // namespace colibri::relay
