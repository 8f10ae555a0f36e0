#include "coordinator/api/http_connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "openssl/err.h"
#include "openssl/ssl.h"

namespace colibri::coordinator {
namespace {

thread_local int current_socket = -1;

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 408:
      return "Request Timeout";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// Numeric host and port of a socket address.
void HostAndPort(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char text[NI_MAXHOST];
  host->clear();
  *port = 0;
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, text, sizeof(text), nullptr, 0,
                  NI_NUMERICHOST) == 0) {
    *host = text;
  }
  if (addr.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  } else if (addr.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  }
}

void PeerOf(int fd, std::string* host, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    host->clear();
    *port = 0;
    return;
  }
  HostAndPort(addr, len, host, port);
}

// Ends a connection: a close_notify when it speaks TLS (sent if the socket
// takes it now), then the socket.
void CloseConnection(int fd, SSL* ssl = nullptr) {
  if (ssl != nullptr) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
    ERR_clear_error();
  }
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

// Writes what the socket takes now; the gate never waits for a client.
void SendNow(int fd, SSL* ssl, const std::string& data) {
  if (ssl != nullptr) {
    // One record write on a non-blocking socket: all of it or nothing.
    SSL_write(ssl, data.data(), static_cast<int>(data.size()));
    ERR_clear_error();
    return;
  }
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    at += static_cast<size_t>(n);
  }
}

// Waits up to `timeout` for `events` on fd; false on timeout or error.
bool WaitFor(int fd, short events, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{};
    p.fd = fd;
    p.events = events;
    const int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left) + 1));
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

// A connection as cpp-httplib reads and writes it on a worker: the bytes the
// gate read first, then the socket. Reads end at the request's deadline.
// Over TLS (ssl set; the socket is non-blocking) the bytes are SSL_read and
// SSL_write, waiting on the socket for what OpenSSL asks.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, SSL* ssl, std::string buffered, absl::Time deadline,
                   const GatedHttpServer::Options& options)
      : fd_(fd),
        ssl_(ssl),
        buffer_(std::move(buffered)),
        deadline_(deadline),
        read_timeout_(options.read_timeout),
        write_timeout_(options.write_timeout) {}

  bool is_readable() const override {
    return pos_ < buffer_.size() || (ssl_ != nullptr && SSL_pending(ssl_) > 0) ||
           WaitFor(fd_, POLLIN, ReadWait());
  }
  bool is_writable() const override { return WaitFor(fd_, POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buffer_.size()) {
      if (!WaitFor(fd_, POLLIN, ReadWait())) return -1;
      buffer_.resize(kChunk);
      ssize_t n;
      if (ssl_ != nullptr) {
        n = TlsRead(buffer_.data(), kChunk);
      } else {
        do {
          n = ::recv(fd_, buffer_.data(), kChunk, 0);
        } while (n < 0 && errno == EINTR);
      }
      buffer_.resize(n > 0 ? static_cast<size_t>(n) : 0);
      pos_ = 0;
      if (n <= 0) return n < 0 ? -1 : 0;
    }
    const size_t n = std::min(size, buffer_.size() - pos_);
    std::memcpy(ptr, buffer_.data() + pos_, n);
    pos_ += n;
    consumed_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (ssl_ != nullptr) return TlsWrite(ptr, size);
    if (!WaitFor(fd_, POLLOUT, write_timeout_)) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { PeerOf(fd_, &ip, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      HostAndPort(addr, len, &ip, &port);
    }
  }
  socket_t socket() const override { return fd_; }

  // Bytes read from the socket that the request did not use (the start of
  // a pipelined next request).
  std::string TakeUnread() { return buffer_.substr(pos_); }
  // Bytes the request read.
  size_t consumed() const { return consumed_; }

 private:
  static constexpr size_t kChunk = 16 << 10;

  absl::Duration ReadWait() const { return std::min(read_timeout_, deadline_ - absl::Now()); }

  // Waits for what OpenSSL needs after a call returned `result`; false when
  // the call failed for good or the wait timed out.
  bool WaitForTls(int result, absl::Duration timeout) {
    const int error = SSL_get_error(ssl_, result);
    ERR_clear_error();
    if (error == SSL_ERROR_WANT_READ) return WaitFor(fd_, POLLIN, timeout);
    if (error == SSL_ERROR_WANT_WRITE) return WaitFor(fd_, POLLOUT, timeout);
    return false;
  }

  // As recv: bytes read, 0 at the end of the connection, -1 on an error or
  // when none came within the read wait.
  ssize_t TlsRead(char* ptr, size_t size) {
    while (true) {
      const int n = SSL_read(ssl_, ptr, static_cast<int>(size));
      if (n > 0) return n;
      if (SSL_get_error(ssl_, n) == SSL_ERROR_ZERO_RETURN) return 0;
      if (!WaitForTls(n, ReadWait())) return -1;
    }
  }

  // As send, all of `size` or -1.
  ssize_t TlsWrite(const char* ptr, size_t size) {
    while (true) {
      const int n = SSL_write(ssl_, ptr, static_cast<int>(size));
      if (n > 0) return n;
      if (!WaitForTls(n, write_timeout_)) return -1;
    }
  }

  const int fd_;
  SSL* const ssl_;
  std::string buffer_;
  size_t pos_ = 0;
  size_t consumed_ = 0;
  const absl::Time deadline_;
  const absl::Duration read_timeout_;
  const absl::Duration write_timeout_;
};

}  // namespace

// The gate thread and the workers of one listen_after_bind.
class GatedHttpServer::Gate {
 public:
  explicit Gate(GatedHttpServer* server)
      : server_(server), options_(server->options_), workers_(options_.threads) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
    thread_ = std::thread([this] { Loop(); });
  }

  // A new connection; refused at once when its address or the gate is full.
  // Over TLS the gate does the handshake; a refused TLS connection is closed
  // without an answer (one would need the handshake first).
  void Admit(int fd) {
    Waiting w;
    w.fd = fd;
    if (server_->tls_ != nullptr) {
      w.ssl = SSL_new(server_->tls_.get());
      const int flags = ::fcntl(fd, F_GETFL);
      if (w.ssl == nullptr || flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
          SSL_set_fd(w.ssl, fd) != 1) {
        CloseConnection(fd, w.ssl);
        return;
      }
      SSL_set_accept_state(w.ssl);
      w.handshaking = true;
    }
    int port = 0;
    PeerOf(fd, &w.address, &port);
    w.deadline = absl::Now() + options_.request_deadline;
    w.started = true;
    int refuse = 0;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        refuse = 503;
      } else if (pending_ >= options_.max_pending) {
        refuse = 503;
      } else if (per_address_[w.address] >= options_.max_pending_per_address) {
        refuse = 429;
      } else {
        ++pending_;
        ++per_address_[w.address];
        incoming_.push_back(std::move(w));
      }
    }
    if (refuse != 0 && w.ssl != nullptr) {
      CloseConnection(fd, w.ssl);
      return;
    }
    if (refuse != 0) {
      SendNow(fd, nullptr, JsonResponse(refuse, server_->error_body_(
                                           refuse, refuse == 429
                                                       ? "too many connections from this address "
                                                         "are sending their request"
                                                       : "too many connections")));
      CloseConnection(fd);
      return;
    }
    Wake();
  }

  // A keep-alive connection after a response: waits for its next request.
  void Return(int fd, SSL* ssl, std::string unread, int served) {
    Waiting w;
    w.fd = fd;
    w.ssl = ssl;
    int port = 0;
    PeerOf(fd, &w.address, &port);
    w.head = std::move(unread);
    w.served = served;
    w.started = !w.head.empty();
    w.deadline = absl::Now() + (w.started ? options_.request_deadline : options_.keep_alive);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        CloseConnection(fd, ssl);
        return;
      }
      ++pending_;
      ++per_address_[w.address];
      incoming_.push_back(std::move(w));
    }
    Wake();
  }

  // Closes the waiting connections, then lets the workers finish.
  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    Wake();
    if (thread_.joinable()) thread_.join();
    workers_.shutdown();
    absl::MutexLock lock(&mu_);
    for (Waiting& w : incoming_) CloseConnection(w.fd, w.ssl);
    incoming_.clear();
  }

  ~Gate() {
    for (int fd : wake_) {
      if (fd >= 0) ::close(fd);
    }
  }

 private:
  struct Waiting {
    int fd = -1;
    SSL* ssl = nullptr;        // over TLS, owned while the connection waits
    bool handshaking = false;  // the TLS handshake is not done yet
    short events = POLLIN;     // what the connection waits for
    std::string address;
    std::string head;  // bytes read so far
    absl::Time deadline;
    bool started = false;  // a byte of the request arrived (always, for a new connection)
    int served = 0;        // requests this connection has had
  };

  void Wake() {
    if (wake_[1] >= 0) {
      const char byte = 1;
      (void)!::write(wake_[1], &byte, 1);
    }
  }

  // The connection leaves the gate (to a worker, or closed).
  void Leave(const Waiting& w) {
    absl::MutexLock lock(&mu_);
    --pending_;
    auto it = per_address_.find(w.address);
    if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
  }

  void Refuse(const Waiting& w, int status, const std::string& message) {
    if (w.handshaking) {
      CloseConnection(w.fd, w.ssl);  // nothing can be said before the handshake
    } else {
      SendNow(w.fd, w.ssl, JsonResponse(status, server_->error_body_(status, message)));
      CloseConnection(w.fd, w.ssl);
    }
    Leave(w);
  }

  void Drop(const Waiting& w) {
    CloseConnection(w.fd, w.ssl);
    Leave(w);
  }

  // Over TLS: goes on with the handshake, then reads what OpenSSL has
  // decrypted (which may be more than the socket shows); true when the
  // connection left the gate.
  bool ReadSomeTls(Waiting& w) {
    w.events = POLLIN;
    const auto wait = [&w](int result) {
      const int error = SSL_get_error(w.ssl, result);
      ERR_clear_error();
      if (error == SSL_ERROR_WANT_READ) return true;
      if (error == SSL_ERROR_WANT_WRITE) {
        w.events = POLLOUT;
        return true;
      }
      return false;
    };
    if (w.handshaking) {
      const int r = SSL_do_handshake(w.ssl);
      if (r != 1) {
        if (wait(r)) return false;
        Drop(w);
        return true;
      }
      w.handshaking = false;
    }
    char chunk[16 << 10];
    while (true) {
      const int n = SSL_read(w.ssl, chunk, sizeof(chunk));
      if (n <= 0) {
        if (wait(n)) return false;
        Drop(w);
        return true;
      }
      if (Received(w, chunk, static_cast<size_t>(n))) return true;
    }
  }

  // Reads what arrived; true when the connection left the gate.
  bool ReadSome(Waiting& w) {
    if (w.ssl != nullptr) return ReadSomeTls(w);
    char chunk[16 << 10];
    const ssize_t n = ::recv(w.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0) {
      Drop(w);
      return true;
    }
    return Received(w, chunk, static_cast<size_t>(n));
  }

  // Bytes of the request arrived (the first start its deadline); true when
  // the connection left the gate.
  bool Received(Waiting& w, const char* data, size_t n) {
    if (!w.started) {
      w.started = true;
      w.deadline = absl::Now() + options_.request_deadline;
    }
    const size_t from = w.head.size() >= 3 ? w.head.size() - 3 : 0;
    w.head.append(data, n);
    return TryHandOff(w, from);
  }

  // When w.head holds a complete header (searched from byte `from`), answers
  // it or hands it to a worker; true when the connection left the gate.
  bool TryHandOff(Waiting& w, size_t from) {
    const size_t end = w.head.find("\r\n\r\n", from);
    if (end == std::string::npos) {
      if (w.head.size() > options_.max_header_bytes) {
        Refuse(w, 431, absl::StrCat("the request header is larger than ", options_.max_header_bytes,
                                    " bytes"));
        return true;
      }
      return false;
    }
    std::string response;
    if (server_->quick_ && server_->quick_(absl::string_view(w.head).substr(0, end + 4), &response)) {
      SendNow(w.fd, w.ssl, response);
      Drop(w);
      return true;
    }
    Leave(w);
    workers_.enqueue([server = server_, fd = w.fd, ssl = w.ssl, head = std::move(w.head),
                      deadline = w.deadline, served = w.served]() mutable {
      server->Serve(fd, ssl, std::move(head), deadline, served);
    });
    return true;
  }

  void Loop() {
    std::vector<Waiting> waiting, arrived;
    std::vector<pollfd> polled;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        arrived.swap(incoming_);
        if (stopping_) {
          for (Waiting& w : arrived) waiting.push_back(std::move(w));
          break;
        }
      }
      // A keep-alive connection may bring its next request whole (read
      // with the previous one), or over TLS have it decrypted already; a new
      // TLS connection starts its handshake.
      for (Waiting& w : arrived) {
        if (!w.head.empty() && TryHandOff(w, 0)) continue;
        if (w.ssl != nullptr && ReadSomeTls(w)) continue;
        waiting.push_back(std::move(w));
      }
      arrived.clear();
      absl::Time next = absl::Now() + absl::Seconds(1);
      polled.assign(1, pollfd{wake_[0], POLLIN, 0});
      for (const Waiting& w : waiting) {
        polled.push_back(pollfd{w.fd, w.events, 0});
        next = std::min(next, w.deadline);
      }
      const int64_t wait_ms =
          std::max<int64_t>(0, absl::ToInt64Milliseconds(next - absl::Now()) + 1);
      const int ready = ::poll(polled.data(), polled.size(), static_cast<int>(wait_ms));
      if (ready < 0 && errno != EINTR) break;
      if (polled[0].revents != 0) {
        char drain[64];
        while (::read(wake_[0], drain, sizeof(drain)) > 0) {
        }
      }
      std::vector<Waiting> still;
      const absl::Time now = absl::Now();
      for (size_t i = 0; i < waiting.size(); ++i) {
        Waiting& w = waiting[i];
        if (ready > 0 && polled[i + 1].revents != 0 && ReadSome(w)) continue;
        if (w.deadline <= now) {
          if (w.started) {
            Refuse(w, 408, "the request did not arrive in time");
          } else {
            Drop(w);  // an idle keep-alive connection
          }
          continue;
        }
        still.push_back(std::move(w));
      }
      waiting.swap(still);
    }
    for (Waiting& w : waiting) Drop(w);
  }

  GatedHttpServer* const server_;
  const Options& options_;
  httplib::ThreadPool workers_;
  int wake_[2] = {-1, -1};
  std::thread thread_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Waiting> incoming_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> per_address_ ABSL_GUARDED_BY(mu_);
};

// The accept loop's task queue: runs each task (process_and_close_socket of
// a new connection) at once on the accept thread, and owns the gate.
class GatedHttpServer::GateQueue final : public httplib::TaskQueue {
 public:
  explicit GateQueue(GatedHttpServer* server) : server_(server), gate_(new Gate(server)) {
    server_->gate_.store(gate_.get());
  }
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {
    gate_->Shutdown();
    server_->gate_.store(nullptr);
  }

 private:
  GatedHttpServer* const server_;
  std::unique_ptr<Gate> gate_;
};

GatedHttpServer::GatedHttpServer(Options options, QuickAnswer quick, ErrorBody error_body)
    : options_(std::move(options)), quick_(std::move(quick)), error_body_(std::move(error_body)) {
  new_task_queue = [this] { return new GateQueue(this); };
}

GatedHttpServer::~GatedHttpServer() = default;

void GatedHttpServer::TlsContextFree::operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }

absl::Status GatedHttpServer::UseTls(const std::string& cert_file, const std::string& key_file) {
  std::unique_ptr<SSL_CTX, TlsContextFree> ctx(SSL_CTX_new(TLS_server_method()));
  const bool ok =
      ctx != nullptr && SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION) == 1 &&
      SSL_CTX_use_certificate_chain_file(ctx.get(), cert_file.c_str()) == 1 &&
      SSL_CTX_use_PrivateKey_file(ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
      SSL_CTX_check_private_key(ctx.get()) == 1;
  ERR_clear_error();
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(cert_file, " / ", key_file,
                                                   ": not a PEM certificate chain and its "
                                                   "private key"));
  }
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  tls_ = std::move(ctx);
  return absl::OkStatus();
}

int GatedHttpServer::CurrentSocket() { return current_socket; }

std::string GatedHttpServer::JsonResponse(int status, const std::string& body) {
  // An overload or a start-up passes: tell clients when to come back.
  const bool retry = status == 429 || status == 503;
  return absl::StrCat("HTTP/1.1 ", status, " ", Reason(status),
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      retry ? "\r\nRetry-After: 1" : "", "\r\nConnection: close\r\n\r\n",
                      body);
}

bool GatedHttpServer::process_and_close_socket(socket_t sock) {
  Gate* gate = gate_.load();
  if (gate == nullptr) {
    CloseConnection(sock);
    return false;
  }
  gate->Admit(sock);
  return true;
}

void GatedHttpServer::Serve(int fd, SSL* ssl, std::string buffered, absl::Time deadline,
                            int served) {
  ConnectionStream stream(fd, ssl, std::move(buffered), deadline, options_);
  const bool last = served + 1 >= options_.keep_alive_max_requests || !is_running();
  bool connection_closed = false;
  current_socket = fd;
  const bool ok = process_request(stream, last, connection_closed, nullptr);
  current_socket = -1;
  if (options_.after_request) options_.after_request(stream.consumed());
  Gate* gate = gate_.load();
  if (ok && !last && !connection_closed && is_running() && gate != nullptr) {
    gate->Return(fd, ssl, stream.TakeUnread(), served + 1);
  } else {
    CloseConnection(fd, ssl);
  }
}

}  // namespace colibri::coordinator
