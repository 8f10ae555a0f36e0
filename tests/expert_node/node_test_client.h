// Test-side helpers that talk to an expert node through the generated stub:
// ingest a model's experts, build random ComputeLayer requests and compute
// their expected outputs locally with moe::ExpertGroupRunner.
#ifndef COLIBRI_TESTS_EXPERT_NODE_NODE_TEST_CLIENT_H_
#define COLIBRI_TESTS_EXPERT_NODE_NODE_TEST_CLIENT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "colibri/v1/expert.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "model/arch/model.h"

namespace colibri::expert_node::testing {

std::unique_ptr<v1::ExpertService::Stub> ConnectTo(const std::string& address);

// A client context with a deadline and, when token is non-empty, the bearer
// metadata.
std::unique_ptr<grpc::ClientContext> MakeContext(const std::string& token = "");

// One expert of `model` as an ingest stream sends it: a header chunk (with
// the model's shape and the payload's xxh64), then the payload in chunks of
// chunk_bytes.
std::vector<v1::IngestChunk> IngestChunksOf(const arch::Model& model,
                                            const std::string& fingerprint, int layer, int expert,
                                            size_t chunk_bytes = 64 << 10);

// Streams the experts `which` ((layer, expert) pairs; all when empty) of
// `model` to the node in chunks of chunk_bytes.
grpc::Status IngestExperts(v1::ExpertService::Stub* stub, const arch::Model& model,
                           const std::string& fingerprint,
                           const std::vector<std::pair<int, int>>& which, v1::IngestReply* reply,
                           const std::string& token = "", size_t chunk_bytes = 64 << 10);

// A request of n_tokens random hidden rows, each routed to k distinct random
// experts of `layer`; routes shuffled so that they are in no particular order.
v1::ComputeLayerRequest RandomRequest(const arch::Model& model, const std::string& fingerprint,
                                      int layer, int n_tokens, int k, uint32_t seed);

// The outputs the coordinator computes locally for `request` with
// ExpertGroupRunner over the model's own experts: [n_routes][n_embd], or
// [n_tokens][n_embd] when reduce_per_token.
std::vector<float> LocalOutputs(const arch::Model& model, const v1::ComputeLayerRequest& request);

}  // namespace colibri::expert_node::testing

#endif  // COLIBRI_TESTS_EXPERT_NODE_NODE_TEST_CLIENT_H_
