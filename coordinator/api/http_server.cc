#include "coordinator/api/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/http_listener.h"
#include "common/status_macros.h"
#include "coordinator/api/assistant_output.h"
#include "coordinator/api/chat_prompt.h"
#include "coordinator/api/chat_reply.h"
#include "coordinator/api/cluster_view.h"
#include "coordinator/api/dashboard.h"
#include "coordinator/cluster/cluster_experts.h"
#include "coordinator/api/http_connection_gate.h"
#include "coordinator/generation/serve_metrics.h"
#include "httplib.h"
#include "rpc/server_support.h"

namespace colibri::coordinator {
namespace {

using json = nlohmann::json;

constexpr char kJson[] = "application/json";
// How long a streaming connection waits for output before it writes an SSE
// comment, which both keeps proxies from timing out and notices a client
// that went away.
constexpr absl::Duration kStreamPing = absl::Seconds(1);

void SendError(httplib::Response& res, const openai::ApiError& error) {
  res.status = error.http_status;
  res.set_content(openai::Dump(error.body), kJson);
}

void SendJson(httplib::Response& res, const json& body) {
  res.status = 200;
  res.set_content(openai::Dump(body), kJson);
}

// One HTTP generation: the scheduler's worker queues tokens and the outcome
// here without ever waiting; the connection's thread takes them out.
class HttpJob final : public GenerationJob {
 public:
  explicit HttpJob(GenerationSpec spec) : GenerationJob(std::move(spec)) {}

  bool OnToken(const GeneratedToken& token) override {
    absl::MutexLock lock(&mu_);
    tokens_.push_back(token);
    return true;
  }
  void OnFinish(absl::StatusOr<GenerationOutcome> outcome) override {
    absl::MutexLock lock(&mu_);
    outcome_ = std::move(outcome);
  }

  // Waits up to `timeout` for tokens or the end; moves the tokens into
  // *tokens and, once finished, the outcome into *outcome.
  void Wait(absl::Duration timeout, std::vector<GeneratedToken>* tokens,
            std::optional<absl::StatusOr<GenerationOutcome>>* outcome) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !tokens_.empty() || outcome_.has_value();
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    tokens->insert(tokens->end(), std::make_move_iterator(tokens_.begin()),
                   std::make_move_iterator(tokens_.end()));
    tokens_.clear();
    if (outcome_.has_value()) *outcome = std::move(outcome_);
    outcome_.reset();
  }

 private:
  absl::Mutex mu_;
  std::deque<GeneratedToken> tokens_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::StatusOr<GenerationOutcome>> outcome_ ABSL_GUARDED_BY(mu_);
};

// The routes, as the requests metric's endpoint label (anything else is
// "other", so that scanners cannot grow the series without bound).
constexpr const char* kRoutes[] = {
    "/health",   "/v1/models",  "/v1/completions", "/v1/chat/completions",
    "/tokenize", "/detokenize", "/apply-template", "/metrics",
    "/dashboard", "/v1/cluster"};

std::string EndpointLabel(const std::string& path) {
  for (const char* route : kRoutes) {
    if (path == route) return route;
  }
  return "other";
}

// True when the peer of `fd` has closed (or half-closed) the connection.
bool PeerClosed(int fd) {
  pollfd p{};
  p.fd = fd;
  p.events = POLLRDHUP;
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// A limit of request_limits.h as a 400 naming the field.
void SendLimitError(httplib::Response& res, const absl::Status& status, const char* param) {
  SendError(res, openai::MakeError(400, status.message(), param));
}

// An OpenAI completion or chat request as a front-end-neutral one.
GenerationRequest ToGenerationRequest(openai::ApiRequest&& api) {
  GenerationRequest r;
  if (api.endpoint == openai::Endpoint::kChatCompletions) {
    r.prompt = GenerationRequest::Prompt::kChat;
    r.messages = std::move(api.messages);
    r.tools = std::move(api.tools);
  } else if (api.prompt_is_ids) {
    r.prompt = GenerationRequest::Prompt::kIds;
    r.ids = std::move(api.prompt_ids);
  } else {
    r.text = std::move(api.prompt);
  }
  r.sampling = api.sampling;
  r.has_seed = api.has_seed;
  r.max_tokens = api.max_tokens;
  r.ignore_eos = api.ignore_eos;
  r.stop = std::move(api.stop);
  r.logprobs = api.logprobs;
  r.output = std::move(api.output);
  r.top_logprobs = api.top_logprobs;
  return r;
}

// The report of one token for logprobs.
openai::TokenReport Report(const tokenizer::Tokenizer* tokenizer, const GeneratedToken& token) {
  const auto piece = [tokenizer](int32_t id) {
    return tokenizer != nullptr ? tokenizer->TokenToPiece(id, false) : absl::StrCat(id);
  };
  openai::TokenReport report;
  report.piece = piece(token.id);
  report.logprob = token.logprob;
  for (const TokenLogprob& t : token.top_logprobs) report.top.emplace_back(piece(t.id), t.logprob);
  return report;
}

}  // namespace

HttpServer::HttpServer(const Options& options)
    : options_(options), created_(absl::ToUnixSeconds(absl::Now())) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options) {
  std::string host;
  int port = 0;
  COLIBRI_RETURN_IF_ERROR(rpc::SplitHttpListen(options.listen, "--http-listen", &host, &port));
  if (options.threads < 1) return absl::InvalidArgumentError("--http-threads must be >= 1");
  std::unique_ptr<HttpServer> server(new HttpServer(options));
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--http-tls-cert and --http-tls-key go together");
  }
  GatedHttpServer::Options gate;
  gate.threads = options.threads;
  gate.request_deadline = absl::Seconds(options.request_deadline_seconds);
  gate.keep_alive = absl::Seconds(options.keep_alive_seconds);
  gate.keep_alive_max_requests = options.keep_alive_max_requests;
  gate.read_timeout = absl::Seconds(options.read_timeout_seconds);
  gate.write_timeout = absl::Seconds(options.write_timeout_seconds);
  gate.max_pending_per_address = options.max_pending_per_address;
  gate.after_request = ReleaseMemoryAfterRequest;
  auto gated = std::make_unique<GatedHttpServer>(
      gate,
      [raw = server.get()](absl::string_view head, std::string* response) {
        return raw->QuickHealth(head, response);
      },
      [](int status, const std::string& message) {
        return openai::Dump(openai::MakeError(status, message).body);
      });
  if (!options.tls_cert_file.empty()) {
    for (const std::string& file : {options.tls_cert_file, options.tls_key_file}) {
      COLIBRI_RETURN_IF_ERROR(rpc::ReadWholeFile(file).status());
    }
    absl::Status tls = gated->UseTls(options.tls_cert_file, options.tls_key_file);
    if (!tls.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http-tls-cert ", options.tls_cert_file, " / --http-tls-key ", options.tls_key_file,
          ": not a PEM certificate chain and its private key"));
    }
  }
  server->server_ = std::move(gated);
  httplib::Server& http = *server->server_;
  // cpp-httplib sets these as the accepted sockets' SO_RCVTIMEO/SO_SNDTIMEO;
  // keep-alive is the gate's.
  http.set_read_timeout(options.read_timeout_seconds, 0);
  http.set_write_timeout(options.write_timeout_seconds, 0);
  http.set_payload_max_length(options.max_body_bytes);
  if (options.metrics != nullptr) {
    // Called once a response is written (for a stream, at its end).
    http.set_logger(
        [metrics = options.metrics](const httplib::Request& req, const httplib::Response& res) {
          metrics->RecordRequest("http", EndpointLabel(req.path), absl::StrCat(res.status));
        });
  }
  server->Route();
  server->port_ =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen, " (HTTP)"));
  }
  server->listener_ = StartHttpListener(server->server_.get());
  return server;
}

void HttpServer::Attach(Backend backend) {
  backend.limits.n_ctx = backend.scheduler->n_ctx();
  backend.limits.n_vocab = backend.model->config().n_vocab;
  backend.request_limits = options_.request_limits;
  backend.request_limits.n_ctx = backend.limits.n_ctx;
  backend.request_limits.n_vocab = backend.limits.n_vocab;
  backend.requests.tokenizer = backend.tokenizer;
  backend.requests.chat = backend.chat;
  backend.requests.limits = backend.request_limits;
  backend.requests.defaults = options_.defaults;
  backend.requests.arch = backend.model->config().arch;
  backend.requests.chat_template = backend.chat_template_source;
  backend.requests.tool_dialect = DialectFor(backend.requests.arch, backend.chat_template_source,
                                             "").tools;
  backend_owned_ = std::make_unique<Backend>(std::move(backend));
  backend_.store(backend_owned_.get(), std::memory_order_release);
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Drain(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (open_generations_.load() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (listener_.joinable()) listener_.join();
}

bool HttpServer::Authorized(const httplib::Request& req, httplib::Response& res) const {
  const std::string authorization = req.get_header_value("Authorization");
  if (options_.api_keys.empty()) {
    if (rpc::AuthorizationMatches(authorization, options_.auth_token)) return true;
  } else {
    // Every key is compared (in constant time each), so the time does not
    // tell which one nearly matched.
    bool matched = false;
    for (const std::string& key : options_.api_keys) {
      matched = rpc::AuthorizationMatches(authorization, key) || matched;
    }
    if (matched) return true;
  }
  SendError(res, openai::MakeError(401, "missing or wrong API key (Authorization: Bearer ...)"));
  return false;
}

void HttpServer::AddCorsHeaders(const httplib::Request& req, httplib::Response& res) const {
  if (options_.cors_origins.empty() || !req.has_header("Origin")) return;
  const std::string origin = req.get_header_value("Origin");
  for (const std::string& allowed : options_.cors_origins) {
    if (allowed == "*" || allowed == origin) {
      res.set_header("Access-Control-Allow-Origin", allowed == "*" ? "*" : origin);
      res.set_header("Vary", "Origin");
      return;
    }
  }
}

void HttpServer::HandlePreflight(const httplib::Request& req, httplib::Response& res) const {
  // Answered for any path: the browser asks before the real request, which
  // then gets its own answer (401 without a key, 404 for no route).
  if (!req.has_header("Origin") || !res.has_header("Access-Control-Allow-Origin")) {
    return SendError(res, openai::MakeError(403, "this origin may not call the API (--cors-origin)"));
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 asked.empty() ? std::string("Authorization, Content-Type") : asked);
  res.set_header("Access-Control-Max-Age", "600");
}

void HttpServer::Route() {
  httplib::Server& http = *server_;
  if (!options_.cors_origins.empty()) {
    // Before the handlers (a streamed response's headers go out with its
    // first chunk) and on every answer, errors included.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      AddCorsHeaders(req, res);
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.Options(".*", [this](const httplib::Request& req, httplib::Response& res) {
      HandlePreflight(req, res);
    });
  }
  // Every endpoint but /health needs the token, and the model: until Attach
  // the answer is 503.
  using Handler = std::function<void(const Backend&, const httplib::Request&, httplib::Response&)>;
  const auto serve = [this](bool auth, Handler handler) {
    return [this, auth, handler](const httplib::Request& req, httplib::Response& res) {
      if (auth && !Authorized(req, res)) return;
      const Backend* backend = backend_.load(std::memory_order_acquire);
      if (backend == nullptr) {
        return SendError(res, openai::MakeError(503, "the model is still loading"));
      }
      handler(*backend, req, res);
    };
  };
  if (options_.metrics != nullptr) {
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      res.status = 200;
      res.set_content(options_.metrics->Render(), metrics::kTextContentType);
    });
  }
  // Answered by the gate (QuickHealth) unless a keep-alive connection asks
  // after another request; the same answer either way.
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const openai::ApiError health = Health();
    res.status = health.http_status;
    res.set_content(openai::Dump(health.body), kJson);
  });
  // The page holds no data (it fetches /v1/cluster with the token the user
  // gives it), so it loads without one, also while the model loads.
  http.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_header("Cache-Control", "no-store");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src 'self' data:");
    res.set_content(kDashboardHtml, "text/html; charset=utf-8");
  });
  http.Get("/v1/cluster",
           serve(true, [](const Backend& b, const httplib::Request&, httplib::Response& res) {
             if (b.cluster_view == nullptr) {
               return SendError(res, openai::MakeError(404, "no cluster view in this server"));
             }
             res.status = 200;
             res.set_header("Cache-Control", "no-store");
             res.set_content(b.cluster_view->Render(), kJson);
           }));
  http.Get("/v1/models",
           serve(true, [this](const Backend&, const httplib::Request&, httplib::Response& res) {
             SendJson(res, openai::ModelsResponse(options_.model_id, created_));
           }));
  http.Post("/v1/completions", serve(true, [this](const Backend& b, const httplib::Request& req,
                                                  httplib::Response& res) {
              HandleGenerate(b, openai::Endpoint::kCompletions, req, res);
            }));
  http.Post(
      "/v1/chat/completions",
      serve(true, [this](const Backend& b, const httplib::Request& req, httplib::Response& res) {
        HandleGenerate(b, openai::Endpoint::kChatCompletions, req, res);
      }));
  http.Post("/tokenize",
            serve(true, [this](const Backend& b, const httplib::Request& req,
                               httplib::Response& res) { HandleTokenize(b, req, res); }));
  http.Post("/detokenize",
            serve(true, [this](const Backend& b, const httplib::Request& req,
                               httplib::Response& res) { HandleDetokenize(b, req, res); }));
  http.Post("/apply-template",
            serve(true, [this](const Backend& b, const httplib::Request& req,
                               httplib::Response& res) { HandleApplyTemplate(b, req, res); }));
  // Errors cpp-httplib answers itself (no route, body too large, bad
  // request line) get the OpenAI envelope too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404:
        SendError(res,
                  openai::MakeError(404, absl::StrCat("no route for ", req.method, " ", req.path)));
        break;
      case 413:
        SendError(res, openai::MakeError(413, "the request body is too large"));
        break;
      default:
        SendError(res, openai::MakeError(res.status, absl::StrCat("HTTP ", res.status)));
    }
  });
}

openai::ApiError HttpServer::Health() const {
  const Backend* b = backend_.load(std::memory_order_acquire);
  if (b == nullptr) return openai::MakeError(503, "the model is still loading");
  if (b->cluster != nullptr && !b->cluster->cluster().AnyHealthy()) {
    return openai::MakeError(503, "no expert node is healthy");
  }
  return openai::ApiError{200, {{"status", "ok"}}};
}

bool HttpServer::QuickHealth(absl::string_view head, std::string* response) const {
  // "GET /health HTTP/1.1", or with a query string.
  if (!absl::StartsWith(head, "GET /health ") && !absl::StartsWith(head, "GET /health?")) {
    return false;
  }
  const openai::ApiError health = Health();
  *response = GatedHttpServer::JsonResponse(health.http_status, openai::Dump(health.body));
  if (options_.metrics != nullptr) {
    options_.metrics->RecordRequest("http", "/health", absl::StrCat(health.http_status));
  }
  return true;
}

void HttpServer::HandleTokenize(const Backend& b, const httplib::Request& req,
                                httplib::Response& res) {
  if (b.tokenizer == nullptr) {
    return SendError(res, openai::MakeError(400, "the model has no tokenizer"));
  }
  absl::StatusOr<openai::TokenizeRequest> request = openai::ParseTokenizeRequest(req.body);
  if (!request.ok()) return SendError(res, openai::ErrorFromStatus(request.status()));
  if (absl::Status s = CheckPromptText("the text", request->content.size(), b.request_limits);
      !s.ok()) {
    return SendLimitError(res, s, "content");
  }
  tokenizer::EncodeOptions enc;
  enc.add_special = request->add_special;
  enc.parse_special = request->parse_special;
  absl::StatusOr<std::vector<int32_t>> ids = b.tokenizer->Encode(request->content, enc);
  if (!ids.ok()) return SendError(res, openai::ErrorFromStatus(ids.status()));
  SendJson(res, {{"tokens", *ids}});
}

void HttpServer::HandleDetokenize(const Backend& b, const httplib::Request& req,
                                  httplib::Response& res) {
  if (b.tokenizer == nullptr) {
    return SendError(res, openai::MakeError(400, "the model has no tokenizer"));
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      openai::ParseDetokenizeRequest(req.body, b.model->config().n_vocab);
  if (!ids.ok()) return SendError(res, openai::ErrorFromStatus(ids.status()));
  SendJson(res, {{"content", b.tokenizer->Decode(*ids, false)}});
}

void HttpServer::HandleApplyTemplate(const Backend& b, const httplib::Request& req,
                                     httplib::Response& res) {
  if (!b.chat) return SendError(res, openai::MakeError(501, "this server has no chat template"));
  absl::StatusOr<openai::TemplateRequest> request = openai::ParseTemplateRequest(req.body);
  if (!request.ok()) return SendError(res, openai::ErrorFromStatus(request.status()));
  if (absl::Status s =
          CheckChat(request->messages.size(), ChatBytes(request->messages), b.request_limits);
      !s.ok()) {
    return SendLimitError(res, s, "messages");
  }
  absl::StatusOr<std::string> prompt =
      b.chat(request->messages, request->tools, request->add_generation_prompt);
  if (!prompt.ok()) return SendError(res, openai::ErrorFromStatus(prompt.status()));
  SendJson(res, {{"prompt", *prompt}});
}

void HttpServer::HandleGenerate(const Backend& b, openai::Endpoint endpoint,
                                const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<openai::ApiRequest> parsed = openai::ParseRequest(endpoint, req.body, b.limits);
  if (!parsed.ok()) return SendError(res, openai::ErrorFromStatus(parsed.status()));
  const bool chat = endpoint == openai::Endpoint::kChatCompletions;
  const bool stream = parsed->stream;
  const bool include_usage = parsed->include_usage;
  const bool logprobs = parsed->logprobs;
  // The prompt is tokenized here, so that a prompt too long for the context
  // is a 400 before any streaming starts.
  std::string param;
  const GenerationRequest request = ToGenerationRequest(*std::move(parsed));
  absl::StatusOr<GenerationSpec> made = MakeGenerationSpec(request, b.requests, &param);
  if (!made.ok()) return SendError(res, openai::ErrorFromStatus(made.status(), param));
  GenerationSpec spec = *std::move(made);
  absl::Status queued = CheckQueue(*b.scheduler, b.requests.defaults);
  auto job = std::make_shared<HttpJob>(std::move(spec));
  if (queued.ok()) queued = b.scheduler->Submit(job);
  if (!queued.ok()) {
    if (queued.code() == absl::StatusCode::kResourceExhausted) {
      res.set_header("Retry-After", absl::StrCat(options_.retry_after_seconds));
    }
    return SendError(res, openai::ErrorFromStatus(queued));
  }
  // Counted until the response is written: a non-streamed one when this
  // handler returns, a stream when cpp-httplib releases its provider.
  open_generations_.fetch_add(1);
  openai::ResponseId id;
  id.id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", created_, "-", next_id_.fetch_add(1));
  id.created = absl::ToUnixSeconds(absl::Now());
  id.model = options_.model_id;
  const tokenizer::Tokenizer* tokenizer = b.tokenizer;
  // Chat: the text split into content, reasoning and tool calls by the
  // model's own syntax.
  std::shared_ptr<ChatReply> parser;
  if (chat) {
    parser = std::make_shared<ChatReply>(b.requests, job->spec().prompt_ids, request,
                                         absl::StrCat("call_", id.created, "_", next_id_.load(),
                                                      "_"));
  }

  if (!stream) {
    absl::Cleanup written = [this] { open_generations_.fetch_sub(1); };
    std::vector<GeneratedToken> tokens;
    std::optional<absl::StatusOr<GenerationOutcome>> outcome;
    const int connection = GatedHttpServer::CurrentSocket();
    while (!outcome.has_value()) {
      job->Wait(absl::Seconds(1), &tokens, &outcome);
      if (outcome.has_value()) break;
      if (connection >= 0 && PeerClosed(connection)) job->Cancel();
    }
    if (!outcome->ok()) return SendError(res, openai::ErrorFromStatus(outcome->status()));
    const GenerationResult& result = (*outcome)->result;
    json logprobs_json = nullptr;
    if (logprobs) {
      std::vector<openai::TokenReport> reports;
      for (const GeneratedToken& t : tokens) reports.push_back(Report(tokenizer, t));
      logprobs_json = chat ? openai::ChatLogprobs(reports) : openai::CompletionLogprobs(reports, 0);
    }
    openai::Usage usage;
    usage.prompt_tokens = (*outcome)->prompt_tokens;
    usage.cached_prompt_tokens = (*outcome)->cached_prompt_tokens;
    usage.completion_tokens = static_cast<int>(result.tokens.size());
    if (chat) {
      OutputDelta message;
      for (const GeneratedToken& t : tokens) message.Append(parser->Feed(t));
      message.Append(parser->Finish(result.trailing_text));
      const std::string reason =
          parser->called_tools() ? "tool_calls" : openai::FinishReasonName(result.finish_reason);
      return SendJson(res, openai::ChatResponse(id, message, reason, usage, logprobs_json));
    }
    return SendJson(res, openai::CompletionResponse(endpoint, id, result.text, result.finish_reason,
                                                    usage, logprobs_json));
  }

  // Streaming: the provider runs on this connection's thread until it
  // returns false or calls done; a failed write means the client is gone.
  struct StreamState {
    bool started = false;
    size_t text_offset = 0;  // of the completions logprobs
    std::shared_ptr<ChatReply> parser;  // chat
    int tool_index = 0;  // of the next streamed tool call
  };
  auto state = std::make_shared<StreamState>();
  state->parser = parser;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, state, id, endpoint, chat, logprobs, include_usage, tokenizer](
          size_t, httplib::DataSink& sink) {
        const auto write = [&sink, &job](const std::string& data) {
          if (sink.write(data.data(), data.size())) return true;
          job->Cancel();
          return false;
        };
        if (!state->started) {
          state->started = true;
          if (chat && !write(openai::SseEvent(openai::RoleChunk(id)))) return false;
        }
        std::vector<GeneratedToken> tokens;
        std::optional<absl::StatusOr<GenerationOutcome>> outcome;
        job->Wait(kStreamPing, &tokens, &outcome);
        if (tokens.empty() && !outcome.has_value()) return write(": ping\n\n");
        std::string out;
        for (const GeneratedToken& t : tokens) {
          if (state->parser == nullptr && t.text.empty() && !logprobs) continue;
          json lp = nullptr;
          if (logprobs) {
            const std::vector<openai::TokenReport> one = {Report(tokenizer, t)};
            lp = chat ? openai::ChatLogprobs(one)
                      : openai::CompletionLogprobs(one, state->text_offset);
          }
          state->text_offset += t.text.size();
          if (state->parser != nullptr) {
            const OutputDelta d = state->parser->Feed(t);
            if (d.empty() && lp.is_null()) continue;
            out += openai::SseEvent(openai::ChatDeltaChunk(id, d, state->tool_index, lp));
            state->tool_index += static_cast<int>(d.tool_calls.size());
            continue;
          }
          out += openai::SseEvent(openai::TextChunk(endpoint, id, t.text, lp));
        }
        if (outcome.has_value()) {
          if (!outcome->ok()) {
            out += openai::SseEvent(openai::ErrorFromStatus(outcome->status()).body);
          } else {
            const GenerationResult& result = (*outcome)->result;
            std::string reason = openai::FinishReasonName(result.finish_reason);
            if (state->parser != nullptr) {
              const OutputDelta d = state->parser->Finish(result.trailing_text);
              if (!d.empty()) {
                out += openai::SseEvent(openai::ChatDeltaChunk(id, d, state->tool_index, nullptr));
              }
              if (state->parser->called_tools()) reason = "tool_calls";
            } else if (!result.trailing_text.empty()) {
              out +=
                  openai::SseEvent(openai::TextChunk(endpoint, id, result.trailing_text, nullptr));
            }
            out += openai::SseEvent(openai::FinishChunk(endpoint, id, reason));
            if (include_usage) {
              openai::Usage usage;
              usage.prompt_tokens = (*outcome)->prompt_tokens;
              usage.cached_prompt_tokens = (*outcome)->cached_prompt_tokens;
              usage.completion_tokens = static_cast<int>(result.tokens.size());
              out += openai::SseEvent(openai::UsageChunk(endpoint, id, usage));
            }
            out += openai::SseDone();
          }
        }
        if (!out.empty() && !write(out)) return false;
        if (outcome.has_value()) sink.done();
        return true;
      },
      [this, job](bool) {
        // Whatever ended the response (done, a write error, a server stop),
        // a generation still running has nobody to go to.
        job->Cancel();
        open_generations_.fetch_sub(1);
      });
}

}  // namespace colibri::coordinator
