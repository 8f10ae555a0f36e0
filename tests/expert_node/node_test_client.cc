#include "tests/expert_node/node_test_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "expert_node/expert_record.h"
#include "model/moe/expert_backend.h"
#include "model/moe/local_expert_backend.h"

namespace colibri::expert_node::testing {
namespace {

void SetTensor(const ops::WeightMatrix& m, v1::ExpertTensor* t) {
  t->set_ggml_type(static_cast<uint32_t>(m.type));
  t->add_dims(m.cols);
  t->add_dims(m.rows);
}

absl::Span<const uint8_t> BytesOf(const ops::WeightMatrix& m) {
  return absl::Span<const uint8_t>(m.data, static_cast<size_t>(m.rows) * m.row_bytes);
}

}  // namespace

std::unique_ptr<v1::ExpertService::Stub> ConnectTo(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  return v1::ExpertService::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

std::unique_ptr<grpc::ClientContext> MakeContext(const std::string& token) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

std::vector<v1::IngestChunk> IngestChunksOf(const arch::Model& model,
                                            const std::string& fingerprint, int layer, int expert,
                                            size_t chunk_bytes) {
  const moe::ExpertWeights& w = model.experts()[layer][expert];
  std::string bytes;
  for (const ops::WeightMatrix* m : {&w.gate, &w.up, &w.down}) {
    const auto span = BytesOf(*m);
    bytes.append(reinterpret_cast<const char*>(span.data()), span.size());
  }
  const size_t matrix_bytes = bytes.size();
  // gpt-oss: the biases follow down (float32), announced in the header.
  v1::IngestChunk header;
  for (auto [bias, n, t] : {std::tuple{w.gate_bias, w.gate.rows, header.mutable_gate_bias()},
                            std::tuple{w.up_bias, w.up.rows, header.mutable_up_bias()},
                            std::tuple{w.down_bias, w.down.rows, header.mutable_down_bias()}}) {
    if (bias == nullptr) continue;
    bytes.append(reinterpret_cast<const char*>(bias), static_cast<size_t>(n) * sizeof(float));
    t->set_ggml_type(static_cast<uint32_t>(ops::TensorType::kF32));
    t->add_dims(n);
  }
  if (w.gate_bias == nullptr) header.clear_gate_bias();
  if (w.up_bias == nullptr) header.clear_up_bias();
  if (w.down_bias == nullptr) header.clear_down_bias();
  if (w.activation == moe::Activation::kSwigluOai) {
    header.mutable_activation()->set_kind(v1::ACTIVATION_SWIGLU_OAI);
    header.mutable_activation()->set_alpha(w.swiglu_alpha);
    header.mutable_activation()->set_limit(w.swiglu_limit);
  }
  header.mutable_key()->set_model_fingerprint(fingerprint);
  header.mutable_key()->set_layer(layer);
  header.mutable_key()->set_expert(expert);
  SetTensor(w.gate, header.mutable_gate());
  SetTensor(w.up, header.mutable_up());
  SetTensor(w.down, header.mutable_down());
  header.set_total_bytes(bytes.size());
  header.set_xxh64(PayloadChecksum(
      BytesOf(w.gate), BytesOf(w.up), BytesOf(w.down),
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()) + matrix_bytes,
                                bytes.size() - matrix_bytes)));
  header.mutable_model()->set_n_layer(model.config().n_layer);
  header.mutable_model()->set_n_expert(model.config().n_expert);
  header.mutable_model()->set_n_embd(model.config().n_embd);
  std::vector<v1::IngestChunk> chunks = {header};
  for (size_t off = 0; off < bytes.size(); off += chunk_bytes) {
    v1::IngestChunk chunk;
    *chunk.mutable_key() = header.key();
    chunk.set_offset(off);
    chunk.set_data(bytes.substr(off, chunk_bytes));
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

grpc::Status IngestExperts(v1::ExpertService::Stub* stub, const arch::Model& model,
                           const std::string& fingerprint,
                           const std::vector<std::pair<int, int>>& which, v1::IngestReply* reply,
                           const std::string& token, size_t chunk_bytes) {
  std::vector<std::pair<int, int>> experts = which;
  if (experts.empty()) {
    for (int l = 0; l < model.config().n_layer; ++l) {
      for (int e = 0; e < model.config().n_expert; ++e) experts.emplace_back(l, e);
    }
  }
  auto context = MakeContext(token);
  std::unique_ptr<grpc::ClientWriter<v1::IngestChunk>> writer =
      stub->Ingest(context.get(), reply);
  bool ok = true;
  for (size_t i = 0; i < experts.size() && ok; ++i) {
    for (const v1::IngestChunk& chunk :
         IngestChunksOf(model, fingerprint, experts[i].first, experts[i].second, chunk_bytes)) {
      ok = writer->Write(chunk);
      if (!ok) break;
    }
  }
  writer->WritesDone();
  return writer->Finish();
}

v1::ComputeLayerRequest RandomRequest(const arch::Model& model, const std::string& fingerprint,
                                      int layer, int n_tokens, int k, uint32_t seed) {
  const int n_embd = model.config().n_embd;
  const int n_expert = model.config().n_expert;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> hidden(static_cast<size_t>(n_tokens) * n_embd);  // [n_tokens][n_embd]
  for (float& v : hidden) v = normal(rng);
  v1::ComputeLayerRequest request;
  request.set_model_fingerprint(fingerprint);
  request.set_layer(layer);
  request.mutable_hidden()->set_dtype(v1::DTYPE_F32);
  request.mutable_hidden()->add_shape(n_tokens);
  request.mutable_hidden()->add_shape(n_embd);
  request.mutable_hidden()->set_data(reinterpret_cast<const char*>(hidden.data()),
                                     hidden.size() * sizeof(float));
  std::vector<v1::Route> routes;
  std::vector<int> ids(n_expert);
  std::iota(ids.begin(), ids.end(), 0);
  for (int t = 0; t < n_tokens; ++t) {
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int r = 0; r < k; ++r) {
      v1::Route route;
      route.set_token(t);
      route.set_expert(ids[r]);
      route.set_weight(std::uniform_real_distribution<float>(0.0f, 1.0f)(rng));
      routes.push_back(route);
    }
  }
  std::shuffle(routes.begin(), routes.end(), rng);
  for (const v1::Route& r : routes) *request.add_routes() = r;
  return request;
}

std::vector<float> LocalOutputs(const arch::Model& model, const v1::ComputeLayerRequest& request) {
  const int64_t n_embd = model.config().n_embd;
  const int64_t n_tokens = request.hidden().shape(0);
  const int n_routes = request.routes_size();
  // The coordinator's view: each token once, with its routes as (t, rank).
  std::vector<std::vector<int>> token_routes(n_tokens);  // request route indexes
  for (int i = 0; i < n_routes; ++i) token_routes[request.routes(i).token()].push_back(i);
  int k = 0;
  for (const auto& r : token_routes) k = std::max<int>(k, static_cast<int>(r.size()));
  std::vector<int32_t> experts(n_tokens * k, 0);  // [n_tokens][k]
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < k; ++r) {
      // Tokens with fewer routes repeat their first expert (output unused).
      const auto& list = token_routes[t];
      experts[t * k + r] = list.empty() ? 0 : request.routes(list[std::min<int>(r, list.size() - 1)]).expert();
    }
  }
  std::vector<float> x(n_tokens * n_embd);
  std::memcpy(x.data(), request.hidden().data().data(), x.size() * sizeof(float));
  moe::ExpertBatch batch;
  batch.layer = request.layer();
  batch.n_tokens = n_tokens;
  batch.n_embd = n_embd;
  batch.k = k;
  batch.x = x.data();
  batch.experts = experts.data();
  std::vector<float> out(n_tokens * k * n_embd);  // [n_tokens][k][n_embd]
  const ops::NumericPath path =
      request.path() == v1::NUMERIC_PATH_EXACT ? ops::NumericPath::kExact : ops::NumericPath::kFast;
  moe::ExpertGroupRunner runner(model.config().n_expert, path, nullptr);
  auto lookup = [&](int layer, int expert) -> absl::StatusOr<moe::ExpertWeights> {
    return model.experts()[layer][expert];
  };
  absl::Status s = runner.Run(batch, lookup, nullptr, out.data());
  if (!s.ok()) return {};

  std::vector<float> rows(static_cast<size_t>(n_routes) * n_embd);  // [n_routes][n_embd]
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < token_routes[t].size(); ++r) {
      std::memcpy(rows.data() + token_routes[t][r] * n_embd, out.data() + (t * k + r) * n_embd,
                  n_embd * sizeof(float));
    }
  }
  if (!request.reduce_per_token()) return rows;
  std::vector<float> sums(n_tokens * n_embd, 0.0f);
  for (int i = 0; i < n_routes; ++i) {
    const int t = request.routes(i).token();
    const float w = request.routes(i).weight();
    for (int64_t c = 0; c < n_embd; ++c) sums[t * n_embd + c] += w * rows[i * n_embd + c];
  }
  return sums;
}

}  // namespace colibri::expert_node::testing
