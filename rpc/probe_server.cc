#include "rpc/probe_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/http_listener.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "httplib.h"
#include "rpc/server_support.h"

namespace colibri::rpc {
namespace {

constexpr char kText[] = "text/plain; charset=utf-8";

void Answer(httplib::Response& res, int status, const std::string& line) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(absl::StrCat(line, "\n"), kText);
}

}  // namespace

ProbeServer::ProbeServer(const Options& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<ProbeServer>> ProbeServer::Start(const Options& options) {
  std::string host;
  int port = 0;
  COLIBRI_RETURN_IF_ERROR(SplitHttpListen(options.listen, options.flag, &host, &port));
  std::unique_ptr<ProbeServer> server(new ProbeServer(options));
  server->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->server_;
  // Probes are quick and come a few times a minute: two threads, and short
  // timeouts so that a stuck client cannot hold them.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http.set_read_timeout(5, 0);
  http.set_write_timeout(5, 0);
  http.set_keep_alive_max_count(10);
  ProbeServer* self = server.get();
  http.Get("/healthz", [self](const httplib::Request&, httplib::Response& res) {
    if (self->started() == nullptr) return Answer(res, 503, "starting");
    Answer(res, 200, "ok");
  });
  http.Get("/readyz", [self](const httplib::Request&, httplib::Response& res) {
    const std::shared_ptr<const Started> started = self->started();
    if (started == nullptr) return Answer(res, 503, "starting");
    if (started->ready) {
      const absl::Status ready = started->ready();
      if (!ready.ok()) return Answer(res, 503, std::string(ready.message()));
    }
    Answer(res, 200, "ready");
  });
  if (options.metrics) {
    http.Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
      const std::shared_ptr<const Started> started = self->started();
      if (started == nullptr) return Answer(res, 503, "starting");
      if (!started->metrics) return Answer(res, 404, "no metrics");
      res.status = 200;
      res.set_content(started->metrics(), metrics::kTextContentType);
    });
  }
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) Answer(res, res.status, absl::StrCat("HTTP ", res.status));
  });
  const int bound =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (", options.flag, ")"));
  }
  server->address_ = BoundAddress(options.listen, bound);
  server->listener_ = StartHttpListener(server->server_.get());
  return server;
}

ProbeServer::~ProbeServer() { Stop(); }

void ProbeServer::MarkStarted(Check ready, std::function<std::string()> metrics) {
  auto started = std::make_shared<Started>();
  started->ready = std::move(ready);
  started->metrics = std::move(metrics);
  absl::MutexLock lock(&mu_);
  started_ = std::move(started);
}

std::shared_ptr<const ProbeServer::Started> ProbeServer::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

void ProbeServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace colibri::rpc
