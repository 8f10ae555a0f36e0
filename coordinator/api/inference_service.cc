#include "coordinator/api/inference_service.h"

#include <future>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/api/chat_reply.h"
#include "coordinator/api/model_summary.h"
#include "coordinator/api/openai_api.h"
#include "coordinator/api/request_limits.h"
#include "model/gguf/gguf_fingerprint.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/unicode_util.h"
#include "rpc/raw_unary.h"
#include "rpc/server_support.h"

namespace colibri::coordinator {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

const grpc::Status kShuttingDown(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");

// A chat message as the chat template sees it: OpenAI's message object
// (the calls of an assistant message as {"id", "type": "function",
// "function": {"name", "arguments"}}, arguments as JSON text).
nlohmann::ordered_json ToJson(const v1::ChatMessage& m) {
  nlohmann::ordered_json out = {{"role", m.role()}, {"content", m.content()}};
  if (!m.reasoning_content().empty()) out["reasoning_content"] = m.reasoning_content();
  if (!m.tool_call_id().empty()) out["tool_call_id"] = m.tool_call_id();
  if (m.tool_calls_size() > 0) {
    nlohmann::ordered_json& calls = out["tool_calls"] = nlohmann::ordered_json::array();
    for (const v1::ToolCall& call : m.tool_calls()) {
      calls.push_back({{"id", call.id()},
                       {"type", "function"},
                       {"function", {{"name", call.name()}, {"arguments", call.arguments()}}}});
    }
  }
  return out;
}

// A tool as the HTTP API's `tools` entry; InvalidArgument when its
// parameters are not JSON.
absl::StatusOr<nlohmann::ordered_json> ToJson(const v1::Tool& tool) {
  // The description always (templates read it); proto3 has no "unset".
  nlohmann::ordered_json function = {{"name", tool.name()}, {"description", tool.description()}};
  if (!tool.parameters().empty()) {
    absl::StatusOr<nlohmann::ordered_json> parameters = openai::ParseJsonValue(tool.parameters());
    if (!parameters.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters: ", parameters.status().message()));
    }
    function["parameters"] = *std::move(parameters);
  }
  return nlohmann::ordered_json{{"type", "function"}, {"function", std::move(function)}};
}

// A Generate request as a front-end-neutral one (the sizes were checked);
// InvalidArgument for a response_format schema that is not JSON.
absl::StatusOr<GenerationRequest> ToGenerationRequest(const v1::GenerateRequest& request) {
  GenerationRequest r;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kTokens:
      r.prompt = GenerationRequest::Prompt::kIds;
      r.ids.assign(request.tokens().ids().begin(), request.tokens().ids().end());
      break;
    case v1::GenerateRequest::kChat:
      r.prompt = GenerationRequest::Prompt::kChat;
      r.messages = nlohmann::ordered_json::array();
      for (const v1::ChatMessage& m : request.chat().messages()) r.messages.push_back(ToJson(m));
      break;
    default:
      r.text = request.text();
      break;
  }
  r.path = request.exact() ? ops::NumericPath::kExact : ops::NumericPath::kFast;
  const v1::SamplingParams& p = request.sampling();
  r.sampling.temperature = p.temperature();
  r.sampling.top_k = p.top_k();
  r.sampling.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  r.sampling.min_p = p.min_p();
  r.sampling.repeat_penalty = p.repeat_penalty() == 0.0f ? 1.0f : p.repeat_penalty();
  r.sampling.presence_penalty = p.presence_penalty();
  r.sampling.frequency_penalty = p.frequency_penalty();
  r.sampling.penalty_last_n = p.penalty_last_n();
  r.sampling.seed = p.seed();
  r.has_seed = p.has_seed();
  if (request.max_tokens() != 0) r.max_tokens = request.max_tokens();
  r.ignore_eos = request.ignore_eos();
  r.stop.assign(request.stop().begin(), request.stop().end());
  using Format = OutputConstraintRequest::Format;
  switch (request.response_format().format_case()) {
    case v1::ResponseFormat::kJsonObject:
      if (request.response_format().json_object()) r.output.format = Format::kJsonObject;
      break;
    case v1::ResponseFormat::kJsonSchema: {
      absl::StatusOr<nlohmann::ordered_json> schema =
          openai::ParseJsonValue(request.response_format().json_schema());
      if (!schema.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("response_format.json_schema: ", schema.status().message()));
      }
      r.output.format = Format::kJsonSchema;
      r.output.json_schema = *std::move(schema);
      break;
    }
    case v1::ResponseFormat::FORMAT_NOT_SET:
      break;
  }
  if (request.tools_size() > 0) {
    r.tools = nlohmann::ordered_json::array();
    for (int i = 0; i < request.tools_size(); ++i) {
      absl::StatusOr<nlohmann::ordered_json> tool = ToJson(request.tools(i));
      if (!tool.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tools[", i, "]: ", tool.status().message()));
      }
      r.tools.push_back(*std::move(tool));
    }
  }
  using Choice = OutputConstraintRequest::ToolChoice;
  const v1::ToolChoice& choice = request.tool_choice();
  switch (choice.choice_case()) {
    case v1::ToolChoice::kMode:
      switch (choice.mode()) {
        case v1::TOOL_CHOICE_NONE:
          r.output.tool_choice = Choice::kNone;
          break;
        case v1::TOOL_CHOICE_REQUIRED:
          r.output.tool_choice = Choice::kRequired;
          break;
        case v1::TOOL_CHOICE_AUTO:
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("tool_choice.mode ", choice.mode(), " is not a ToolChoiceMode"));
      }
      break;
    case v1::ToolChoice::kFunction:
      r.output.tool_choice = Choice::kNamed;
      r.output.tool_name = choice.function();
      break;
    case v1::ToolChoice::CHOICE_NOT_SET:
      break;
  }
  if (request.has_parallel_tool_calls()) {
    r.output.parallel_tool_calls = request.parallel_tool_calls();
  }
  return r;
}

void ToProto(const OutputDelta& delta, v1::ChatDelta* out) {
  out->set_content(tokenizer::ToValidUtf8(delta.content));
  out->set_reasoning_content(tokenizer::ToValidUtf8(delta.reasoning));
  for (const ToolCall& call : delta.tool_calls) {
    v1::ToolCall* c = out->add_tool_calls();
    c->set_id(call.id);
    c->set_name(tokenizer::ToValidUtf8(call.name));
    c->set_arguments(tokenizer::ToValidUtf8(call.arguments));
  }
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEndOfGeneration:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kContextFull:
      return v1::FINISH_REASON_CONTEXT;
    case FinishReason::kCancelled:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

// One Generate call: the scheduler's job and what the worker and the reactor
// share. The worker sends replies and finally the status; the reactor writes
// them one at a time and calls Finish once the worker is done and no write is
// in flight, so the reactor (which deletes itself in OnDone) never outlives a
// use of it.
class InferenceServiceImpl::GenerateCall final : public GenerationJob {
 public:
  class Reactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
   public:
    explicit Reactor(std::shared_ptr<GenerateCall> call) : call_(std::move(call)) {}
    void OnWriteDone(bool ok) override { call_->WriteDone(ok); }
    void OnCancel() override { call_->Cancel(); }
    void OnDone() override { delete this; }

   private:
    const std::shared_ptr<GenerateCall> call_;
  };

  // reply: splits a chat prompt's reply (null for other prompts).
  GenerateCall(GenerationSpec spec, std::unique_ptr<ChatReply> reply)
      : GenerationJob(std::move(spec)), reply_(std::move(reply)) {}

  // Creates the reactor that gRPC drives; borrowed here until Finish.
  Reactor* MakeReactor(std::shared_ptr<GenerateCall> self) {
    reactor_ = new Reactor(std::move(self));
    return reactor_;
  }

  bool OnToken(const GeneratedToken& token) override {
    v1::GenerateReply reply;
    reply.set_token(token.id);
    // Protobuf strings must be valid UTF-8; a model may emit any bytes.
    reply.set_text(tokenizer::ToValidUtf8(token.text));
    if (reply_ != nullptr) {
      const OutputDelta delta = reply_->Feed(token);
      if (!delta.empty()) ToProto(delta, reply.mutable_chat());
    }
    Send(std::move(reply));
    return true;
  }

  void OnFinish(absl::StatusOr<GenerationOutcome> outcome) override {
    if (!outcome.ok()) return Finish(ToGrpc(outcome.status()));
    const GenerationResult& result = outcome->result;
    v1::GenerateReply last;
    last.set_done(true);
    last.set_text(tokenizer::ToValidUtf8(result.trailing_text));
    last.set_finish_reason(ToProto(result.finish_reason));
    if (reply_ != nullptr) {
      const OutputDelta delta = reply_->Finish(result.trailing_text);
      if (!delta.empty()) ToProto(delta, last.mutable_chat());
      if (reply_->called_tools()) last.set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
    }
    v1::GenerateStats* stats = last.mutable_stats();
    stats->set_prompt_tokens(outcome->prompt_tokens);
    stats->set_cached_prompt_tokens(outcome->cached_prompt_tokens);
    stats->set_generated_tokens(static_cast<int32_t>(result.tokens.size()));
    stats->set_prompt_seconds(result.prompt_seconds);
    stats->set_generate_seconds(result.generate_seconds);
    stats->set_expert_wait_seconds(outcome->steps.expert_wait_seconds);
    stats->set_expert_round_trips(outcome->expert_round_trips);
    stats->set_expert_bytes_sent(outcome->expert_bytes_sent);
    stats->set_fallback_routes(outcome->fallback_routes);
    Send(std::move(last));
    Finish(grpc::Status::OK);
  }

  // Queues a reply (serialized); dropped once the stream broke.
  void Send(const v1::GenerateReply& reply) {
    grpc::ByteBuffer bytes;
    bool own = false;
    if (!grpc::SerializationTraits<v1::GenerateReply>::Serialize(reply, &bytes, &own).ok()) {
      Finish(grpc::Status(grpc::StatusCode::INTERNAL, "cannot serialize a GenerateReply"));
      return;
    }
    const grpc::ByteBuffer* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (broken_ || done_) return;
      pending_.push_back(std::move(bytes));
      if (writing_) return;
      writing_ = true;
      next = &pending_.front();
    }
    reactor_->StartWrite(next);
  }

  // Ends the call with `status` once the queued replies are written.
  void Finish(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      done_ = true;
      status_ = status;
      if (writing_) return;
    }
    reactor_->Finish(status);
  }

 private:
  void WriteDone(bool ok) {
    const grpc::ByteBuffer* next = nullptr;
    grpc::Status finish;
    {
      absl::MutexLock lock(&mu_);
      pending_.pop_front();
      if (!ok) {
        broken_ = true;
        Cancel();
        pending_.clear();
      }
      if (!pending_.empty()) {
        next = &pending_.front();
      } else {
        writing_ = false;
        if (!done_) return;
        finish = status_;
      }
    }
    if (next != nullptr) {
      reactor_->StartWrite(next);
    } else {
      reactor_->Finish(finish);
    }
  }

  Reactor* reactor_ = nullptr;
  // Used by the scheduler's worker only (OnToken, OnFinish).
  const std::unique_ptr<ChatReply> reply_;
  absl::Mutex mu_;
  // pending_.front() is being written while writing_; deque references stay
  // valid across push_back.
  std::deque<grpc::ByteBuffer> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // Finish was asked for
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

InferenceServiceImpl::InferenceServiceImpl(const Options& options, const arch::Model& model,
                                           const tokenizer::Tokenizer* tokenizer,
                                           ClusterExperts* cluster, GenerationScheduler* scheduler)
    : options_(options),
      model_(model),
      tokenizer_(tokenizer),
      cluster_(cluster),
      scheduler_(scheduler) {}

absl::StatusOr<std::unique_ptr<InferenceServiceImpl>> InferenceServiceImpl::Create(
    const Options& options, const arch::Model& model, const tokenizer::Tokenizer* tokenizer,
    ClusterExperts* cluster, GenerationScheduler* scheduler) {
  if (options.defaults.max_tokens < 1) {
    return absl::InvalidArgumentError("defaults.max_tokens must be >= 1");
  }
  std::unique_ptr<InferenceServiceImpl> service(
      new InferenceServiceImpl(options, model, tokenizer, cluster, scheduler));
  GenerationRequestContext& requests = service->requests_;
  requests.tokenizer = tokenizer;
  requests.chat = options.chat;
  requests.arch = model.config().arch;
  requests.chat_template = options.chat_template_source;
  requests.tool_dialect = DialectFor(requests.arch, requests.chat_template, "").tools;
  requests.defaults = options.defaults;
  requests.limits = options.limits;
  requests.limits.n_ctx = scheduler->n_ctx();
  requests.limits.n_vocab = model.config().n_vocab;
  COLIBRI_RETURN_IF_ERROR(ValidateRequestLimits(requests.limits));

  const arch::ModelConfig& config = model.config();
  COLIBRI_ASSIGN_OR_RETURN(std::string fingerprint, gguf::ModelFingerprint(model.file()));
  const ModelSummary summary = SummarizeModel(model.file(), config.n_expert_used);
  v1::ModelInfoReply& info = service->model_info_;
  info.set_architecture(config.arch);
  info.set_name(config.name);
  info.set_fingerprint(fingerprint);
  info.set_n_layer(config.n_layer);
  info.set_n_embd(config.n_embd);
  info.set_n_vocab(config.n_vocab);
  info.set_n_ctx(scheduler->n_ctx());
  info.set_n_expert(config.n_expert);
  info.set_n_expert_used(config.n_expert_used);
  info.set_dense_bytes(summary.dense_bytes);
  info.set_routed_expert_bytes(summary.routed_expert_bytes);
  service->control_ = std::thread([s = service.get()] { s->ControlLoop(); });
  return service;
}

InferenceServiceImpl::~InferenceServiceImpl() { Stop(); }

void InferenceServiceImpl::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (control_.joinable()) control_.join();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceServiceImpl::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  const bool authorized = rpc::BearerTokenMatches(*context, options_.auth_token);
  v1::GenerateRequest request;
  absl::Status status = authorized ? rpc::ParseRequest(*raw, std::numeric_limits<uint64_t>::max(),
                                                       "Generate", &request)
                                   : absl::OkStatus();
  // The proto's own sizes first (before its chat becomes JSON), then the
  // checks, rendering and tokenizing every front end shares: bounded CPU
  // work, done here like Tokenize so that its errors come before any token.
  if (authorized && status.ok()) status = CheckGenerateRequest(request, requests_.limits);
  GenerationSpec spec;
  std::unique_ptr<ChatReply> reply;
  if (authorized && status.ok()) {
    absl::StatusOr<GenerationRequest> generic = ToGenerationRequest(request);
    absl::StatusOr<GenerationSpec> made =
        generic.ok() ? MakeGenerationSpec(*generic, requests_) : generic.status();
    if (made.ok()) {
      spec = *std::move(made);
      if (generic->prompt == GenerationRequest::Prompt::kChat) {
        reply = std::make_unique<ChatReply>(
            requests_, spec.prompt_ids, *generic,
            absl::StrCat("call_", next_call_.fetch_add(1, std::memory_order_relaxed), "_"));
      }
    } else {
      status = made.status();
    }
  }
  if (authorized && status.ok()) status = CheckQueue(*scheduler_, requests_.defaults);
  auto call = std::make_shared<GenerateCall>(std::move(spec), std::move(reply));
  GenerateCall::Reactor* reactor = call->MakeReactor(call);
  if (!authorized) {
    call->Finish(rpc::UnauthenticatedStatus());
    return reactor;
  }
  if (status.ok()) status = scheduler_->Submit(call);
  if (!status.ok()) call->Finish(ToGrpc(status));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* raw,
                                                         grpc::ByteBuffer* response) {
  auto* call = new rpc::ParsedUnaryCall<v1::TokenizeRequest, v1::TokenizeReply>(response);
  rpc::RawUnaryReactor* reactor = call;
  if (!rpc::BearerTokenMatches(*context, options_.auth_token)) {
    reactor->FinishCall(rpc::UnauthenticatedStatus());
    return reactor;
  }
  if (absl::Status s = call->Parse(*raw, std::numeric_limits<uint64_t>::max(), "Tokenize");
      !s.ok()) {
    reactor->FinishCall(ToGrpc(s));
    return reactor;
  }
  const v1::TokenizeRequest* request = &call->request();
  v1::TokenizeReply* reply = call->reply();
  if (tokenizer_ == nullptr) {
    reactor->FinishCall(ToGrpc(absl::FailedPreconditionError("the model has no tokenizer")));
    return reactor;
  }
  absl::Status valid = CheckTokenizeRequest(*request, requests_.limits);
  if (!valid.ok()) {
    reactor->FinishCall(ToGrpc(valid));
    return reactor;
  }
  // Tokenizing is quick CPU work (the text is bounded), done here rather than
  // queued.
  tokenizer::EncodeOptions enc;
  enc.add_special = request->add_special();
  enc.parse_special = request->parse_special();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(request->text(), enc);
  if (!ids.ok()) {
    reactor->FinishCall(ToGrpc(ids.status()));
    return reactor;
  }
  for (int32_t id : *ids) reply->add_ids(id);
  reactor->FinishCall(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelInfo(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* raw,
                                                          grpc::ByteBuffer* response) {
  auto* call = new rpc::ParsedUnaryCall<v1::ModelInfoRequest, v1::ModelInfoReply>(response);
  rpc::RawUnaryReactor* reactor = call;
  if (!rpc::BearerTokenMatches(*context, options_.auth_token)) {
    reactor->FinishCall(rpc::UnauthenticatedStatus());
    return reactor;
  }
  if (absl::Status s = call->Parse(*raw, kMaxSmallRequestBytes, "ModelInfo"); !s.ok()) {
    reactor->FinishCall(ToGrpc(s));
    return reactor;
  }
  *call->reply() = model_info_;
  reactor->FinishCall(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ClusterStatus(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* raw,
                                                              grpc::ByteBuffer* response) {
  auto* call = new rpc::ParsedUnaryCall<v1::ClusterStatusRequest, v1::ClusterStatusReply>(response);
  rpc::RawUnaryReactor* reactor = call;
  if (!rpc::BearerTokenMatches(*context, options_.auth_token)) {
    reactor->FinishCall(rpc::UnauthenticatedStatus());
    return reactor;
  }
  if (absl::Status s = call->Parse(*raw, kMaxSmallRequestBytes, "ClusterStatus"); !s.ok()) {
    reactor->FinishCall(ToGrpc(s));
    return reactor;
  }
  v1::ClusterStatusReply* reply = call->reply();
  absl::MutexLock lock(&mu_);
  if (stop_) {
    reactor->FinishCall(kShuttingDown);
    return reactor;
  }
  control_tasks_.push_back([this, reactor, reply] {
    FillClusterStatus(reply);
    reactor->FinishCall(grpc::Status::OK);
  });
  return reactor;
}

void InferenceServiceImpl::ControlLoop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !control_tasks_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (control_tasks_.empty()) return;
      task = std::move(control_tasks_.front());
      control_tasks_.pop_front();
    }
    task();
  }
}

void InferenceServiceImpl::FillClusterStatus(v1::ClusterStatusReply* reply) const {
  reply->set_active_generations(scheduler_->active_generations());
  const arch::PredictorStats predictor = scheduler_->predictor();
  reply->set_predictor_recall(predictor.recall());
  reply->set_predictor_precision(predictor.precision());
  if (cluster_ == nullptr) return;
  Cluster& cluster = cluster_->cluster();
  const Placement& placement = cluster.placement();
  const int n = cluster.n_nodes();
  // Every healthy node at once; each call has the node client's control
  // deadline, and a node that does not answer is shown unhealthy.
  // Retired nodes are listed until the placement without them is in force.
  std::vector<bool> shown(n);
  for (int i = 0; i < n; ++i) shown[i] = !(cluster.retired(i) && cluster.excluded(i));
  std::vector<std::future<absl::StatusOr<v1::NodeStatsReply>>> stats(n);
  for (int i = 0; i < n; ++i) {
    std::shared_ptr<NodeClient> client = cluster.client(i);
    if (!shown[i] || !cluster.healthy(i) || client == nullptr) continue;
    stats[i] = std::async(std::launch::async, [client] { return client->NodeStats(); });
  }
  for (int i = 0; i < n; ++i) {
    if (!shown[i]) continue;
    v1::NodeStatus* node = reply->add_nodes();
    node->set_address(cluster.node(i).address);
    node->set_node_id(cluster.node(i).node_id);
    if (cluster.node(i).inventory.advertise_address() != cluster.node(i).address) {
      node->set_advertise_address(cluster.node(i).inventory.advertise_address());
    }
    node->set_experts_assigned(static_cast<int64_t>(placement.ExpertsOf(i).size()));
    node->set_excluded(cluster.excluded(i));
    const NodeCounters counters = cluster.counters(i);
    node->set_requests(counters.requests);
    node->set_failures(counters.failures);
    node->set_failovers(counters.failovers);
    bool healthy = false;
    if (stats[i].valid()) {
      absl::StatusOr<v1::NodeStatsReply> s = stats[i].get();
      if (s.ok()) {
        healthy = true;
        node->set_experts_stored(static_cast<int64_t>(s->experts_stored()));
        node->set_bytes_stored(s->bytes_stored());
        node->set_ram_used_bytes(s->ram_used_bytes());
        node->set_ram_budget_bytes(s->ram_budget_bytes());
        node->set_ram_hits(s->ram_hits());
        node->set_ram_misses(s->ram_misses());
        node->set_disk_bytes_read(s->disk_bytes_read());
        node->set_disk_wait_micros(s->disk_wait_micros());
        node->set_prefetch_issued(s->prefetch_issued());
        node->set_prefetch_used(s->prefetch_used());
        node->set_prefetch_wasted(s->prefetch_wasted());
        node->set_prefetch_dropped(s->prefetch_dropped());
        node->set_in_flight(s->in_flight());
      }
    }
    node->set_healthy(healthy);
  }
  reply->set_replicas(placement.replicas());
  reply->set_replacements(cluster.replacements());
  reply->set_fallback_routes(cluster.fallback_routes());
}

}  // namespace colibri::coordinator
