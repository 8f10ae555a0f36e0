// colibri.v1.Inference (proto/colibri/v1/inference.proto) over one loaded
// model: Generate, Tokenize, ModelInfo and ClusterStatus, with the gRPC
// callback API.
//
// Generations run on the GenerationScheduler (shared with the HTTP API): a
// Generate call is validated in its callback, submitted, and streamed from
// the scheduler's worker: one GenerateReply per token, then a last reply with
// `done`, the finish reason and the request's stats. A cancelled call stops
// its generation at the next token. ClusterStatus asks the nodes for their
// stats on a control thread. No gRPC callback blocks.
//
// Every method is registered raw (ByteBuffer) and parses its request itself:
// bytes that are not the method's request get INVALID_ARGUMENT naming the
// method (gRPC's generated handlers answered UNIMPLEMENTED). ModelInfo and
// ClusterStatus requests are capped at kMaxSmallRequestBytes
// (RESOURCE_EXHAUSTED); Generate and Tokenize are bounded by the server's
// message limit and request_limits.h.
//
// Auth: with Options::auth_token set, every Inference call must carry
// "authorization: Bearer <token>", else UNAUTHENTICATED. (The health and
// reflection services stay open, so that probes need no secret.)
//
// Thread-safety: the gRPC methods are called by gRPC from any thread. Stop
// and the destructor from the owning thread.
#ifndef COLIBRI_COORDINATOR_API_INFERENCE_SERVICE_H_
#define COLIBRI_COORDINATOR_API_INFERENCE_SERVICE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "colibri/v1/inference.grpc.pb.h"
#include "coordinator/api/chat_prompt.h"
#include "coordinator/cluster/cluster_experts.h"
#include "coordinator/api/generation_request.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/api/request_limits.h"
#include "model/arch/model.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {

using InferenceServiceBase = v1::Inference::WithRawCallbackMethod_Generate<
    v1::Inference::WithRawCallbackMethod_Tokenize<v1::Inference::WithRawCallbackMethod_ModelInfo<
        v1::Inference::WithRawCallbackMethod_ClusterStatus<v1::Inference::CallbackService>>>>;

class InferenceServiceImpl final : public InferenceServiceBase {
 public:
  // Request cap of ModelInfo and ClusterStatus (empty messages).
  static constexpr uint64_t kMaxSmallRequestBytes = uint64_t{64} << 10;

  struct Options {
    // Required bearer token; empty disables auth. Never logged. Default: "".
    std::string auth_token;
    // What a request leaves out, and the queue's bound (the HTTP API has
    // the same). Default: its defaults.
    GenerationDefaults defaults;
    // Request size limits (their n_ctx and n_vocab are filled in from the
    // scheduler and the model). Default: RequestLimits' defaults.
    RequestLimits limits;
    // Renders the `chat` prompts of Generate (chat_prompt.h). Default: none
    // (such requests fail with UNIMPLEMENTED).
    ChatRenderer chat;
    // The chat template's text: which thinking and tool-call syntax the
    // model writes (assistant_output.h), for tool_choice and chat replies.
    // Default: "" (from the architecture alone).
    std::string chat_template_source;
  };

  // model, tokenizer (null: id prompts only, no text), cluster (null: the
  // experts are computed here) and scheduler are borrowed and must outlive
  // the service.
  static absl::StatusOr<std::unique_ptr<InferenceServiceImpl>> Create(
      const Options& options, const arch::Model& model, const tokenizer::Tokenizer* tokenizer,
      ClusterExperts* cluster, GenerationScheduler* scheduler);
  // Calls Stop.
  ~InferenceServiceImpl() override;
  InferenceServiceImpl(const InferenceServiceImpl&) = delete;
  InferenceServiceImpl& operator=(const InferenceServiceImpl&) = delete;

  // Joins the control thread (after the gRPC server has shut down).
  // Idempotent.
  void Stop();

  // Each reads a serialized request; Generate writes serialized
  // GenerateReplies, the others a serialized reply.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ClusterStatus(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;

 private:
  class GenerateCall;

  InferenceServiceImpl(const Options& options, const arch::Model& model,
                       const tokenizer::Tokenizer* tokenizer, ClusterExperts* cluster,
                       GenerationScheduler* scheduler);
  void ControlLoop();
  void FillClusterStatus(v1::ClusterStatusReply* reply) const;

  const Options options_;
  const arch::Model& model_;
  const tokenizer::Tokenizer* const tokenizer_;
  ClusterExperts* const cluster_;
  GenerationScheduler* const scheduler_;
  // The limits (with the scheduler's n_ctx and the model's n_vocab),
  // defaults, tokenizer and chat template of MakeGenerationSpec.
  GenerationRequestContext requests_;
  v1::ModelInfoReply model_info_;
  // Numbers the Generate calls, for their tool calls' ids.
  std::atomic<uint64_t> next_call_{0};

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> control_tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread control_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_INFERENCE_SERVICE_H_
