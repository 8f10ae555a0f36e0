// A cpp-httplib server whose connections wait for their request without
// holding a thread.
//
// cpp-httplib gives every accepted connection a thread of its pool for as
// long as the connection lasts, and reads the request on it with a timeout
// per read only: a client that sends one header byte every few seconds holds
// a thread indefinitely, and a handful of them hold them all. Here a single
// gate thread polls the connections that are still sending their request
// header (a new one, or a keep-alive one between requests) and hands a
// connection to a worker only once its header is complete; after the
// response the worker gives a keep-alive connection back to the gate. So the
// workers only ever serve requests whose header has arrived, and:
//   - a request must arrive whole, header and body, within
//     Options::request_deadline of its first byte (of the accept for a new
//     connection); a header late is answered 408 by the gate, a body late
//     ends the connection;
//   - one client address may have at most Options::max_pending_per_address
//     connections in the gate (beyond, a new one is answered 429 and closed),
//     and the gate holds at most Options::max_pending (503 beyond);
//   - a header larger than Options::max_header_bytes is answered 431;
//   - requests the QuickAnswer callback takes (GET /health) are answered on
//     the gate thread itself, so they get through even while every worker is
//     busy.
// With UseTls the same holds for HTTPS: the gate does each connection's TLS
// handshake without blocking (it counts against the request deadline, so a
// client that stalls its handshake holds no thread either) and reads the
// decrypted header; the workers read and write through the connection's
// SSL. A TLS connection refused at once (per address, gate full) is closed
// without an answer, which would need a handshake first.
//
// Thread-safety: configure (routes, timeouts) before listening, as with
// httplib::Server; CurrentSocket from any thread.
#ifndef COLIBRI_COORDINATOR_API_HTTP_CONNECTION_GATE_H_
#define COLIBRI_COORDINATOR_API_HTTP_CONNECTION_GATE_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "httplib.h"

namespace colibri::coordinator {

class GatedHttpServer : public httplib::Server {
 public:
  struct Options {
    // Worker threads; each serves one request at a time (its whole response,
    // a stream included). Default: 12.
    int threads = 12;
    // Time a request has to arrive whole, header and body, from its first
    // byte (from the accept for a connection's first request). Default: 10 s.
    absl::Duration request_deadline = absl::Seconds(10);
    // Time an idle keep-alive connection waits for its next request, and the
    // most requests one connection serves. Default: 5 s / 100.
    absl::Duration keep_alive = absl::Seconds(5);
    int keep_alive_max_requests = 100;
    // Time one read or write of a worker may wait. Default: 30 s / 30 s.
    absl::Duration read_timeout = absl::Seconds(30);
    absl::Duration write_timeout = absl::Seconds(30);
    // Connections one client address may have waiting in the gate. Default: 64.
    int max_pending_per_address = 64;
    // Connections the gate holds in all. Default: 1024.
    int max_pending = 1024;
    // Largest request header (request line and fields). Default: 64 KiB.
    size_t max_header_bytes = 64 << 10;
    // Called on the worker after each request's response, once the request
    // is freed, with the bytes the request took (header and body).
    // Default: none.
    std::function<void(size_t request_bytes)> after_request;
  };

  // Given a complete request header (request line, fields, the blank line),
  // fills *response with a complete HTTP response and returns true for a
  // request it answers itself (on the gate thread: it must not block), false
  // for the others, which go to a worker.
  using QuickAnswer = std::function<bool(absl::string_view head, std::string* response)>;
  // The body of an error the gate answers itself (status 408, 429, 431, 503)
  // as JSON.
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;

  GatedHttpServer(Options options, QuickAnswer quick, ErrorBody error_body);
  ~GatedHttpServer() override;

  // Serves HTTPS (TLS 1.2 or later) with the PEM certificate chain and
  // private key in these files. Call before listening. InvalidArgument
  // naming the files when they are not a chain and its key.
  absl::Status UseTls(const std::string& cert_file, const std::string& key_file);

  // The socket of the connection whose request the calling thread serves
  // (a route handler, a content provider), or -1 off a worker.
  static int CurrentSocket();

  // A complete HTTP/1.1 response with a JSON body and "Connection: close";
  // 429 and 503 also say "Retry-After: 1".
  static std::string JsonResponse(int status, const std::string& body);

 private:
  class Gate;
  class GateQueue;
  struct TlsContextFree {
    void operator()(SSL_CTX* ctx) const;
  };

  // Runs on the accept thread (GateQueue runs the accept loop's tasks
  // inline): hands the new connection to the gate.
  bool process_and_close_socket(socket_t sock) override;
  // One request of `fd` (speaking TLS through `ssl` when not null) on a
  // worker, then back to the gate or closed.
  void Serve(int fd, SSL* ssl, std::string buffered, absl::Time deadline, int served);

  const Options options_;
  const QuickAnswer quick_;
  const ErrorBody error_body_;
  std::unique_ptr<SSL_CTX, TlsContextFree> tls_;  // set by UseTls
  std::atomic<Gate*> gate_{nullptr};              // set while listening
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_HTTP_CONNECTION_GATE_H_
