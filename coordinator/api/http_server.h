// The OpenAI-compatible HTTP API of `serve` (cpp-httplib): GET /v1/models,
// POST /v1/completions and /v1/chat/completions (JSON or SSE streaming),
// GET /health, POST /tokenize, /detokenize and /apply-template, and the
// dashboard: GET /dashboard (a page, served without a token: it holds no
// data) and GET /v1/cluster (what the page draws). Generations
// go through the same GenerationScheduler as gRPC Generate, so they share its
// sessions and queue and give the same tokens.
//
// Connections (coordinator/api/http_connection_gate.h): a connection waits for
// its request header without a thread; once the header is in, one of
// Options::threads serves the request, and a connection waiting for a thread
// waits in the pool's queue. A request must arrive whole within
// Options::request_deadline_seconds, one client address may have
// Options::max_pending_per_address connections still sending a request, and
// GET /health is answered without a thread. The scheduler's workers never
// wait for a client: a job
// queues its tokens and the connection's thread writes them, so a slow or
// vanished client only holds its own thread. A streaming client that
// disconnects is noticed at the next write (a token or the keep-alive
// comment sent every second while it waits) and its generation is cancelled,
// which frees its session. Idle keep-alive connections close after
// Options::keep_alive_seconds.
//
// A non-streaming client that disconnects is noticed by polling its socket
// once a second while it waits (a client that only half-closes its side
// counts as gone too), and its generation is cancelled.
//
// Auth: with Options::auth_token or Options::api_keys set, every endpoint
// except /health, /dashboard and CORS preflights needs "Authorization: Bearer
// <key>" (401 otherwise). A generation refused because the queue is full is a
// 429 with Retry-After. GET /metrics (with
// Options::metrics) answers from start-up, before the model is attached.
//
// Thread-safety: Start, Attach and Stop from the owning thread; requests are served
// on the pool's threads.
#ifndef COLIBRI_COORDINATOR_API_HTTP_SERVER_H_
#define COLIBRI_COORDINATOR_API_HTTP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/api/chat_prompt.h"
#include "coordinator/api/generation_request.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/api/openai_api.h"
#include "coordinator/api/request_limits.h"
#include "model/arch/model.h"
#include "model/tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace colibri::coordinator {

class ClusterView;   // cluster_view.h
class ServeMetrics;  // serve_metrics.h

class HttpServer {
 public:
  struct Options {
    // "HOST:PORT" (port 0: the OS picks one). Beyond loopback it needs
    // auth_token or the caller's --insecure (checked by the caller).
    // Default: "127.0.0.1:8080".
    std::string listen = "127.0.0.1:8080";
    // Required bearer token; empty disables auth (unless api_keys). Never
    // logged. Default: "".
    std::string auth_token;
    // Keys the API accepts ("Authorization: Bearer KEY") instead of
    // auth_token, so that the cluster's token need not go to API users: when
    // not empty, auth_token is not accepted here. Never logged. Default: none.
    std::vector<std::string> api_keys;
    // Origins whose web pages may call the API from a browser (CORS): exact
    // origins ("https://chat.example.org") or "*" for any. A request from one
    // gets Access-Control-Allow-Origin; a preflight (OPTIONS, any path) is
    // answered 204 without a key. Default: none (no CORS headers, OPTIONS 404).
    std::vector<std::string> cors_origins;
    // PEM certificate chain and key: HTTPS when both are set, through the
    // connection gate like plain HTTP (http_connection_gate.h: the gate does
    // the handshake; same deadline, per-address limit and /health).
    // Default: "" (plain HTTP).
    std::string tls_cert_file;
    std::string tls_key_file;
    // Seconds a 429 for a full queue tells the client to wait (Retry-After).
    // Default: 1.
    int retry_after_seconds = 1;
    // The id /v1/models lists and responses carry. Default: "colibri".
    std::string model_id = "colibri";
    // Request threads (a request whose header has arrived holds one until
    // its response is written; serve makes it 4 * sessions + 4 unless
    // --http-threads). Default: 12.
    int threads = 12;
    // Seconds one read / write may block before the connection is dropped.
    // Default: 30 / 30.
    int read_timeout_seconds = 30;
    int write_timeout_seconds = 30;
    // Seconds a request has to arrive whole, header and body, from its first
    // byte (408 or a closed connection beyond): a client that trickles its
    // request holds no thread for longer. Default: 10.
    int request_deadline_seconds = 10;
    // Connections of one client address still sending their request (429
    // beyond): the gate's memory and descriptors for slow clients stay
    // bounded per client. Default: 64.
    int max_pending_per_address = 64;
    // Seconds an idle keep-alive connection stays open, and the most requests
    // one connection serves. Default: 5 / 100.
    int keep_alive_seconds = 5;
    int keep_alive_max_requests = 100;
    // Largest request body (413 beyond). Default: 8 MiB.
    size_t max_body_bytes = 8 << 20;
    // The sizes every front end allows (request_limits.h): prompt text,
    // messages, stop strings; checked before a prompt is rendered or
    // tokenized. n_ctx and n_vocab are filled by Attach. Default: its defaults.
    RequestLimits request_limits;
    // What a request leaves out, and the queue's bound (the gRPC service
    // has the same). Default: its defaults.
    GenerationDefaults defaults;
    // Served on GET /metrics, and every request is recorded in it; borrowed,
    // must outlive the server. Default: null (no /metrics).
    ServeMetrics* metrics = nullptr;
  };

  // What the API serves; all borrowed, and they must outlive the server
  // (Stop it first).
  struct Backend {
    const arch::Model* model = nullptr;
    // Null: token-id prompts only.
    const tokenizer::Tokenizer* tokenizer = nullptr;
    GenerationScheduler* scheduler = nullptr;
    // Null: local experts; else /health is 503 while no node is healthy.
    ClusterExperts* cluster = nullptr;
    // Renders chat prompts (null: the chat endpoints answer 501).
    ChatRenderer chat;
    // The chat template's text: which thinking and tool-call syntax the
    // model writes (assistant_output.h). Default: "".
    std::string chat_template_source;
    // Answers GET /v1/cluster (null: 404).
    ClusterView* cluster_view = nullptr;
    // Filled by Attach: the model's n_ctx and n_vocab for parsing,
    // Options::request_limits with them, and what MakeGenerationSpec needs.
    openai::ApiLimits limits;
    RequestLimits request_limits;
    GenerationRequestContext requests;
  };

  // Binds and starts serving; every endpoint answers 503 until Attach (so
  // that probes see the model loading). InvalidArgument for a bad address or
  // thread count, Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options);
  // Serves `backend` from now on. Call once.
  void Attach(Backend backend);
  // Calls Stop.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port.
  int port() const { return port_; }
  // Waits up to `timeout` until no generation response is being written.
  // Call after the scheduler's BeginShutdown and before Stop, so that the
  // cancelled generations' streams end with their error event rather than
  // being cut (Stop ends the connections at once).
  void Drain(absl::Duration timeout);
  // Stops accepting, ends the connections and joins the threads (streams in
  // progress end when the scheduler cancels their jobs). Idempotent.
  void Stop();

 private:
  explicit HttpServer(const Options& options);
  void Route();
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  // The CORS headers of a response to `req` (none unless its Origin is
  // allowed), and the answer to a preflight.
  void AddCorsHeaders(const httplib::Request& req, httplib::Response& res) const;
  void HandlePreflight(const httplib::Request& req, httplib::Response& res) const;
  void HandleGenerate(const Backend& b, openai::Endpoint endpoint, const httplib::Request& req,
                      httplib::Response& res);
  void HandleTokenize(const Backend& b, const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const Backend& b, const httplib::Request& req, httplib::Response& res);
  void HandleApplyTemplate(const Backend& b, const httplib::Request& req, httplib::Response& res);
  // 200 {"status":"ok"}, or 503 while loading or with no healthy node.
  openai::ApiError Health() const;
  // GatedHttpServer::QuickAnswer: GET /health on the gate's thread.
  bool QuickHealth(absl::string_view head, std::string* response) const;

  const Options options_;
  const int64_t created_;  // Unix seconds of start, the model's "created"
  std::unique_ptr<Backend> backend_owned_;
  std::atomic<const Backend*> backend_{nullptr};  // null until Attach
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int> open_generations_{0};  // submitted, response not yet written
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_HTTP_SERVER_H_
