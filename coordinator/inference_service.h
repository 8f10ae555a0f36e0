// colibri.v1.Inference (proto/colibri/v1/inference.proto) over one loaded
// model: Generate, Tokenize, ModelInfo and ClusterStatus, with the gRPC
// callback API.
//
// Generations run on `sessions` worker threads, each owning its sessions
// (one per numeric path, made on first use) and expert backends; more
// requests wait in a FIFO queue. A Generate call is validated in its
// callback, queued, and streamed from the worker: one GenerateReply per token,
// then a last reply with `done`, the finish reason and the request's stats.
// A cancelled call stops its generation at the next token. ClusterStatus asks
// the nodes for their stats on a control thread. No gRPC callback blocks.
//
// Auth: with Options::auth_token set, every Inference call must carry
// "authorization: Bearer <token>", else UNAUTHENTICATED. (The health and
// reflection services stay open, so that probes need no secret.)
//
// Thread-safety: the gRPC methods are called by gRPC from any thread.
// BeginShutdown, Stop and the destructor from the owning thread.
#ifndef COLIBRI_COORDINATOR_INFERENCE_SERVICE_H_
#define COLIBRI_COORDINATOR_INFERENCE_SERVICE_H_

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
#include "common/thread_pool.h"
#include "coordinator/cluster_command.h"
#include "coordinator/request_limits.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {

class InferenceServiceImpl final : public v1::Inference::CallbackService {
 public:
  struct Options {
    // Required bearer token; empty disables auth. Never logged. Default: "".
    std::string auth_token;
    // Concurrent generations (worker threads). Default: 1.
    int sessions = 1;
    // Context size of every session. Default: 0, meaning min(model, 4096).
    int ctx_size = 0;
    // Prompt tokens per batch. Default: 512.
    int batch_size = 512;
    // max_tokens of a request that gives 0. Default: 256.
    int default_max_tokens = 256;
    // penalty_last_n of a request that gives 0. Default: 64.
    int default_penalty_last_n = 64;
    // Next-layer expert prediction of every session. Default: off.
    arch::PrefetchOptions prefetch;
    // Request size limits (their n_ctx and n_vocab are filled in from the
    // sessions and the model). Default: RequestLimits' defaults.
    RequestLimits limits;
  };

  // model, tokenizer (null: id prompts only, no text), cluster (null: the
  // experts are computed here) and pool are borrowed and must outlive the
  // service. Creates the first session, so session errors show here.
  static absl::StatusOr<std::unique_ptr<InferenceServiceImpl>> Create(
      const Options& options, const arch::Model& model, const tokenizer::Tokenizer* tokenizer,
      ClusterExperts* cluster, ThreadPool* pool);
  // Calls Stop.
  ~InferenceServiceImpl() override;
  InferenceServiceImpl(const InferenceServiceImpl&) = delete;
  InferenceServiceImpl& operator=(const InferenceServiceImpl&) = delete;

  // Cancels running generations and fails queued ones with UNAVAILABLE; new
  // calls fail with UNAVAILABLE. Call before shutting the gRPC server down.
  void BeginShutdown();
  // Joins the workers (after the gRPC server has shut down). Idempotent.
  void Stop();

  // The context size every session has.
  int n_ctx() const { return n_ctx_; }
  int active_generations() const;

  grpc::ServerWriteReactor<v1::GenerateReply>* Generate(grpc::CallbackServerContext* context,
                                                        const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeReply* reply) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                      const v1::ModelInfoRequest* request,
                                      v1::ModelInfoReply* reply) override;
  grpc::ServerUnaryReactor* ClusterStatus(grpc::CallbackServerContext* context,
                                          const v1::ClusterStatusRequest* request,
                                          v1::ClusterStatusReply* reply) override;

 private:
  class GenerateCall;
  struct Slot;

  InferenceServiceImpl(const Options& options, const arch::Model& model,
                       const tokenizer::Tokenizer* tokenizer, ClusterExperts* cluster,
                       ThreadPool* pool);
  // Creates slot's session (and backend) for `path` if it has none yet.
  absl::StatusOr<arch::Session*> SessionFor(Slot& slot, ops::NumericPath path);
  // Checks what needs no tokenizer or model work: the sizes (request_limits.h,
  // OutOfRange or InvalidArgument naming the limit) and the sampling
  // parameters (InvalidArgument).
  absl::Status ValidateRequest(const v1::GenerateRequest& request) const;
  void WorkerLoop(int slot);
  void RunGeneration(Slot& slot, GenerateCall& call);
  void ControlLoop();
  void FillClusterStatus(v1::ClusterStatusReply* reply) const;

  const Options options_;
  const arch::Model& model_;
  const tokenizer::Tokenizer* const tokenizer_;
  ClusterExperts* const cluster_;
  ThreadPool* const pool_;
  int n_ctx_ = 0;
  RequestLimits limits_;  // with n_ctx_ and the model's n_vocab
  v1::ModelInfoReply model_info_;
  std::vector<std::unique_ptr<Slot>> slots_;  // [sessions], each used by its worker only

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<GenerateCall>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<GenerateCall>> running_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> control_tasks_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  arch::PredictorStats predictor_ ABSL_GUARDED_BY(mu_);  // depth 1, every generation
  std::vector<std::thread> workers_;
  std::thread control_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_INFERENCE_SERVICE_H_
