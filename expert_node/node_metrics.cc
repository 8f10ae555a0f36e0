#include "expert_node/node_metrics.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http_listener.h"
#include "common/status_macros.h"
#include "expert_node/node_report.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "httplib.h"
#include "rpc/server_support.h"

namespace colibri::expert_node {
namespace {

using metrics::Type;

bool IsGauge(const std::string& field) {
  for (const char* g : kNodeGaugeFields) {
    if (field == g) return true;
  }
  return false;
}

}  // namespace

std::string RenderNodeMetrics(const v1::NodeStatsReply& stats,
                              const metrics::Histogram::Snapshot& compute_seconds) {
  metrics::TextWriter w;
  w.Family("colibri_node_info", "Always 1; the node's id as a label.", Type::kGauge);
  w.Sample("colibri_node_info", {"node"}, {stats.node_id()}, 1);
  const google::protobuf::Descriptor* d = stats.GetDescriptor();
  const google::protobuf::Reflection* r = stats.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) continue;
    double value = 0;
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        value = static_cast<double>(r->GetUInt64(stats, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
        value = static_cast<double>(r->GetInt64(stats, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
        value = r->GetUInt32(stats, f);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
        value = r->GetInt32(stats, f);
        break;
      default:
        continue;  // node_id, a label of colibri_node_info
    }
    std::string name = f->name();
    if (absl::EndsWith(name, "_micros")) {
      name = absl::StrCat(name.substr(0, name.size() - strlen("_micros")), "_seconds");
      value /= 1e6;
    }
    const bool gauge = IsGauge(f->name());
    name = absl::StrCat("colibri_node_", name, gauge ? "" : "_total");
    w.Family(name, absl::StrCat("NodeStatsReply.", f->name(), " (expert.proto)."),
             gauge ? Type::kGauge : Type::kCounter);
    w.Sample(name, {}, {}, value);
  }
  w.Family("colibri_node_compute_seconds", "Time of ComputeLayer calls, queueing excluded.",
           Type::kHistogram);
  w.HistogramSamples("colibri_node_compute_seconds", {}, {}, compute_seconds);
  return w.text();
}

std::string RenderNodeReport(const NodeReport& report) {
  v1::NodeStatsReply stats;
  report.Stats(&stats);
  return RenderNodeMetrics(stats, report.compute_seconds().snapshot());
}

absl::StatusOr<std::unique_ptr<NodeMetricsServer>> NodeMetricsServer::Start(
    const Options& options, const NodeReport* report) {
  COLIBRI_RETURN_IF_ERROR(
      rpc::CheckListenAllowed(options.listen, !options.auth_token.empty(), options.insecure));
  std::string host;
  int port = 0;
  COLIBRI_RETURN_IF_ERROR(rpc::SplitHttpListen(options.listen, "--metrics-listen", &host, &port));
  std::unique_ptr<NodeMetricsServer> server(new NodeMetricsServer());
  server->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->server_;
  // Scrapes are rare and quick: two threads.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http.set_read_timeout(10, 0);
  http.set_write_timeout(10, 0);
  const std::string token = options.auth_token;
  http.Get("/metrics", [report, token](const httplib::Request& req, httplib::Response& res) {
    if (!rpc::AuthorizationMatches(req.get_header_value("Authorization"), token)) {
      res.status = 401;
      res.set_content("missing or wrong token (Authorization: Bearer ...)\n", "text/plain");
      return;
    }
    res.status = 200;
    res.set_content(RenderNodeReport(*report), metrics::kTextContentType);
  });
  const int bound =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen, " (metrics)"));
  }
  server->address_ = rpc::BoundAddress(options.listen, bound);
  server->listener_ = StartHttpListener(server->server_.get());
  return server;
}

NodeMetricsServer::~NodeMetricsServer() { Stop(); }

void NodeMetricsServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace colibri::expert_node
