// The expert node in-process on 127.0.0.1:0, driven over a real gRPC channel.
#include "expert_node/expert_service.h"

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "expert_node/node_server.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_fingerprint.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_test_client.h"
#include "tests/support/paths.h"

namespace colibri::expert_node {
namespace {

using testing::ConnectTo;
using testing::IngestExperts;
using testing::LocalOutputs;
using testing::MakeContext;
using testing::RandomRequest;
using testing::TempDir;

struct LoadedModel {
  std::unique_ptr<arch::Model> model;
  std::string fingerprint;
  std::string path;
};

// Opens a fixture model, or sets *skip when the fixtures are absent.
LoadedModel OpenFixture(const std::string& name, std::string* skip) {
  LoadedModel m;
  const std::string dir = colibri::testing::FixturesDir();
  if (dir.empty()) {
    *skip = "fixtures dir not found (set COLIBRI_FIXTURES_DIR)";
    return m;
  }
  m.path = dir + "/models/" + name;
  absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(m.path);
  if (!model.ok()) {
    *skip = absl::StrCat("cannot open ", m.path, ": ", model.status().message());
    return m;
  }
  m.model = std::move(*model);
  m.fingerprint = *gguf::ModelFingerprint(m.model->file());
  return m;
}

std::unique_ptr<NodeServer> StartNode(const std::string& data_dir, const std::string& token = "",
                                      uint64_t ram_budget = 64 << 20,
                                      uint64_t pin_budget = 0) {
  NodeServer::Options options;
  options.pin_budget_bytes = pin_budget;
  options.listen = "127.0.0.1:0";
  options.store.data_dir = data_dir;
  options.ram.budget_bytes = ram_budget;
  options.service.auth_token = token;
  options.service.node_id = "test-node";
  options.service.compute_threads = 2;
  absl::StatusOr<std::unique_ptr<NodeServer>> node = NodeServer::Start(options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

grpc::Status Compute(v1::ExpertService::Stub* stub, const v1::ComputeLayerRequest& request,
                     v1::ComputeLayerReply* reply, const std::string& token = "") {
  auto context = MakeContext(token);
  return stub->ComputeLayer(context.get(), request, reply);
}

void ExpectBitwiseEqual(const v1::ComputeLayerReply& reply, const std::vector<float>& expected,
                        int64_t rows, int64_t n_embd) {
  ASSERT_EQ(reply.outputs().dtype(), v1::DTYPE_F32);
  ASSERT_EQ(reply.outputs().shape_size(), 2);
  EXPECT_EQ(reply.outputs().shape(0), rows);
  EXPECT_EQ(reply.outputs().shape(1), n_embd);
  ASSERT_EQ(reply.outputs().data().size(), expected.size() * sizeof(float));
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(std::memcmp(reply.outputs().data().data(), expected.data(),
                        expected.size() * sizeof(float)),
            0);
}

std::string BytesOfExpert(const moe::ExpertWeights& w);
v1::InventoryReply GetInventory(v1::ExpertService::Stub* stub);
v1::NodeStatsReply GetStats(v1::ExpertService::Stub* stub);

class ComputeMatchesLocalTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ComputeMatchesLocalTest, BitwiseEqualOnBothPaths) {
  std::string skip;
  LoadedModel m = OpenFixture(GetParam(), &skip);
  if (m.model == nullptr) GTEST_SKIP() << skip;
  TempDir dir;
  auto node = StartNode(dir.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());

  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m.model, m.fingerprint, {}, &ingest, "", 1000).ok());
  const arch::ModelConfig& config = m.model->config();
  EXPECT_EQ(ingest.stored_size(), config.n_layer * config.n_expert);

  uint32_t seed = 1;
  for (v1::NumericPath path : {v1::NUMERIC_PATH_EXACT, v1::NUMERIC_PATH_FAST,
                               v1::NUMERIC_PATH_UNSPECIFIED}) {
    for (int layer = 0; layer < config.n_layer; ++layer) {
      for (bool reduce : {false, true}) {
        v1::ComputeLayerRequest request =
            RandomRequest(*m.model, m.fingerprint, layer, 7, config.n_expert_used, seed++);
        request.set_path(path);
        request.set_reduce_per_token(reduce);
        v1::ComputeLayerReply reply;
        grpc::Status s = Compute(stub.get(), request, &reply);
        ASSERT_TRUE(s.ok()) << s.error_message();
        ExpectBitwiseEqual(reply, LocalOutputs(*m.model, request),
                           reduce ? 7 : request.routes_size(), config.n_embd);
      }
    }
  }
  // The path reaches the kernels: quantized weights give (slightly) different
  // bits on the two paths; float32 weights keep float32 activations on both.
  {
    v1::ComputeLayerRequest request =
        RandomRequest(*m.model, m.fingerprint, 0, 3, config.n_expert_used, 1234);
    v1::ComputeLayerReply exact, fast;
    request.set_path(v1::NUMERIC_PATH_EXACT);
    ASSERT_TRUE(Compute(stub.get(), request, &exact).ok());
    request.set_path(v1::NUMERIC_PATH_FAST);
    ASSERT_TRUE(Compute(stub.get(), request, &fast).ok());
    const ops::TensorType type = m.model->experts()[0][0].gate.type;
    const bool float_weights = type == ops::TensorType::kF32 || type == ops::TensorType::kF16 ||
                               type == ops::TensorType::kBF16;
    EXPECT_EQ(exact.outputs().data() == fast.outputs().data(), float_weights);
  }
  v1::NodeStatsReply stats;
  auto context = MakeContext();
  ASSERT_TRUE(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.experts_stored(), static_cast<uint64_t>(config.n_layer * config.n_expert));
  EXPECT_GT(stats.compute_requests(), 0u);
  EXPECT_GT(stats.ram_hits(), 0u);
  EXPECT_LE(stats.ram_used_bytes(), stats.ram_budget_bytes());
  EXPECT_EQ(stats.node_id(), "test-node");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ComputeMatchesLocalTest,
                         ::testing::Values("qwen3moe-tiny-f32.gguf", "mixtral-tiny-q4_k_m.gguf",
                                           "qwen2moe-tiny-q8_0.gguf", "olmoe-tiny-f16.gguf"));

class ExpertServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip;
    m_ = OpenFixture("qwen3moe-tiny-f32.gguf", &skip);
    if (m_.model == nullptr) GTEST_SKIP() << skip;
  }

  v1::ComputeLayerRequest Valid(int layer = 0) {
    return RandomRequest(*m_.model, m_.fingerprint, layer, 4, 2, 99);
  }

  LoadedModel m_;
  TempDir dir_;
};

// ComputeLayer's workers take calls from several clients at once (more
// clients than workers), each answered with its own bitwise-correct outputs;
// a shutdown while calls keep coming ends each of them with a reply or an
// error, never a crash or a hang (the sanitizer build runs this too).
TEST_F(ExpertServiceTest, ConcurrentComputeCallsAndAShutdownUnderLoad) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
  const int n_layer = m_.model->config().n_layer;

  constexpr int kClients = 5;
  std::vector<v1::ComputeLayerRequest> requests;
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < kClients; ++i) {
    requests.push_back(RandomRequest(*m_.model, m_.fingerprint, i % n_layer, 3, 2, 500 + i));
    expected.push_back(LocalOutputs(*m_.model, requests.back()));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> ok_calls{0};
  std::atomic<int> failed_calls{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      auto own_stub = ConnectTo(node->address());
      while (!stop.load()) {
        v1::ComputeLayerReply reply;
        const grpc::Status s = Compute(own_stub.get(), requests[i], &reply);
        if (!s.ok()) {
          // Only the shutdown may fail a call.
          EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      s.error_code() == grpc::StatusCode::CANCELLED)
              << s.error_code() << " " << s.error_message();
          failed_calls.fetch_add(1);
          absl::SleepFor(absl::Milliseconds(5));
          continue;
        }
        ASSERT_EQ(reply.outputs().data().size(), expected[i].size() * sizeof(float));
        EXPECT_EQ(std::memcmp(reply.outputs().data().data(), expected[i].data(),
                              expected[i].size() * sizeof(float)),
                  0)
            << "client " << i;
        ok_calls.fetch_add(1);
      }
    });
  }
  // Bounded: calls that stop being served fail here rather than hang.
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (ok_calls.load() < 50 * kClients && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_GE(ok_calls.load(), 50 * kClients) << "the node stopped serving calls";
  EXPECT_EQ(failed_calls.load(), 0);
  const absl::Time start = absl::Now();
  node->Shutdown(absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  absl::SleepFor(absl::Milliseconds(50));
  stop.store(true);
  for (std::thread& t : clients) t.join();
  EXPECT_GT(failed_calls.load(), 0);  // the calls after the shutdown
}

TEST_F(ExpertServiceTest, MalformedRequestsAreRejectedAndTheNodeKeepsServing) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  const arch::ModelConfig& config = m_.model->config();
  // Every expert but layer 0 expert 0.
  std::vector<std::pair<int, int>> most;
  for (int l = 0; l < config.n_layer; ++l) {
    for (int e = 0; e < config.n_expert; ++e) {
      if (l != 0 || e != 0) most.emplace_back(l, e);
    }
  }
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, most, &ingest).ok());

  struct Case {
    const char* name;
    std::function<void(v1::ComputeLayerRequest*)> damage;
    grpc::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"unknown fingerprint", [](auto* r) { r->set_model_fingerprint("00ff"); },
       grpc::StatusCode::NOT_FOUND},
      {"bad fingerprint", [](auto* r) { r->set_model_fingerprint("../x"); },
       grpc::StatusCode::NOT_FOUND},
      {"layer out of range", [&](auto* r) { r->set_layer(config.n_layer); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"negative layer", [](auto* r) { r->set_layer(-1); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"expert out of range", [&](auto* r) { r->mutable_routes(1)->set_expert(config.n_expert); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"expert not held",
       [](auto* r) {
         r->set_layer(0);
         r->mutable_routes(0)->set_expert(0);
       },
       grpc::StatusCode::NOT_FOUND},
      {"wrong dtype", [](auto* r) { r->mutable_hidden()->set_dtype(v1::DTYPE_F16); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"wrong byte count", [](auto* r) { r->mutable_hidden()->mutable_data()->pop_back(); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"wrong width", [](auto* r) { r->mutable_hidden()->set_shape(1, 3); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"one-dim shape", [](auto* r) { r->mutable_hidden()->mutable_shape()->RemoveLast(); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"token out of range", [](auto* r) { r->mutable_routes(0)->set_token(4); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"negative token", [](auto* r) { r->mutable_routes(0)->set_token(-1); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"unknown path", [](auto* r) { r->set_path(static_cast<v1::NumericPath>(17)); },
       grpc::StatusCode::INVALID_ARGUMENT},
  };
  for (const Case& c : cases) {
    v1::ComputeLayerRequest request = Valid(1);
    c.damage(&request);
    v1::ComputeLayerReply reply;
    grpc::Status s = Compute(stub.get(), request, &reply);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_FALSE(s.error_message().empty()) << c.name;
    // The next valid request works.
    const v1::ComputeLayerRequest good = Valid(1);
    v1::ComputeLayerReply good_reply;
    ASSERT_TRUE(Compute(stub.get(), good, &good_reply).ok()) << "after " << c.name;
    ExpectBitwiseEqual(good_reply, LocalOutputs(*m_.model, good), good.routes_size(),
                       config.n_embd);
  }

  // An empty route list is valid and yields no rows.
  v1::ComputeLayerRequest empty = Valid(1);
  empty.clear_routes();
  v1::ComputeLayerReply empty_reply;
  ASSERT_TRUE(Compute(stub.get(), empty, &empty_reply).ok());
  EXPECT_EQ(empty_reply.outputs().shape(0), 0);
}

TEST_F(ExpertServiceTest, MalformedIngestStreamsAreRejected) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  const moe::ExpertWeights& w = m_.model->experts()[0][0];

  auto header = [&] {
    v1::IngestChunk h;
    h.mutable_key()->set_model_fingerprint(m_.fingerprint);
    for (auto [m, t] : {std::pair{&w.gate, h.mutable_gate()}, std::pair{&w.up, h.mutable_up()},
                        std::pair{&w.down, h.mutable_down()}}) {
      t->set_ggml_type(static_cast<uint32_t>(m->type));
      t->add_dims(m->cols);
      t->add_dims(m->rows);
    }
    h.set_total_bytes(w.bytes());
    h.set_xxh64(0);
    return h;
  };
  auto run = [&](const std::vector<v1::IngestChunk>& chunks) {
    v1::IngestReply reply;
    auto context = MakeContext();
    auto writer = stub->Ingest(context.get(), &reply);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  const std::string zeros(w.bytes(), '\0');
  {
    v1::IngestChunk h = header();
    h.set_data(zeros);  // xxh64 0 does not match
    EXPECT_EQ(run({h}).error_code(), grpc::StatusCode::DATA_LOSS);
  }
  {
    v1::IngestChunk h = header();
    h.set_total_bytes(w.bytes() + 1);
    EXPECT_EQ(run({h}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    v1::IngestChunk data;
    *data.mutable_key() = header().key();
    data.set_data("abc");
    EXPECT_EQ(run({data}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    v1::IngestChunk h = header();
    h.mutable_gate()->set_ggml_type(99);
    EXPECT_EQ(run({h}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    v1::IngestChunk h = header();
    h.set_data(zeros.substr(0, 10));  // stream ends inside the expert
    EXPECT_EQ(run({h}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    v1::IngestChunk h = header();
    h.set_offset(5);
    h.set_data("x");
    EXPECT_EQ(run({h}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::InventoryReply inventory;
  auto context = MakeContext();
  ASSERT_TRUE(stub->Inventory(context.get(), v1::InventoryRequest(), &inventory).ok());
  EXPECT_EQ(inventory.entries_size(), 0);
}

// Defect 9 of issue 9: a message that does not parse ended an Ingest stream
// with OK. It must end it with INVALID_ARGUMENT and store nothing of the
// expert it interrupted (a complete expert before it stays stored).
TEST_F(ExpertServiceTest, AnUnparseableIngestMessageEndsTheStreamWithAnError) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  const moe::ExpertWeights& w0 = m_.model->experts()[0][0];
  const moe::ExpertWeights& w1 = m_.model->experts()[0][1];
  auto header_of = [&](int expert, const moe::ExpertWeights& w) {
    v1::IngestChunk h;
    h.mutable_key()->set_model_fingerprint(m_.fingerprint);
    h.mutable_key()->set_expert(expert);
    for (auto [m, t] : {std::pair{&w.gate, h.mutable_gate()}, std::pair{&w.up, h.mutable_up()},
                        std::pair{&w.down, h.mutable_down()}}) {
      t->set_ggml_type(static_cast<uint32_t>(m->type));
      t->add_dims(m->cols);
      t->add_dims(m->rows);
    }
    const std::string bytes = BytesOfExpert(w);
    h.set_total_bytes(bytes.size());
    h.set_xxh64(PayloadChecksum(
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), {},
        {}));
    return h;
  };
  v1::IngestChunk whole = header_of(0, w0);
  whole.set_data(BytesOfExpert(w0));
  v1::IngestChunk half = header_of(1, w1);
  const std::string bytes1 = BytesOfExpert(w1);
  half.set_data(bytes1.substr(0, bytes1.size() / 2));
  // Field 1 (key) as a length-delimited field whose length runs past the end.
  const std::string garbage("\x0a\x7f\x01\x02", 4);

  auto channel = grpc::CreateChannel(node->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  // Streams `messages` as they are (serialized or not); the final status.
  auto send = [&](const std::vector<std::string>& messages) {
    grpc::ClientContext context;
    grpc::CompletionQueue cq;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        generic.PrepareCall(&context, "/colibri.v1.ExpertService/Ingest", &cq);
    void* tag = nullptr;
    bool ok = false;
    call->StartCall(reinterpret_cast<void*>(1));
    cq.Next(&tag, &ok);
    for (const std::string& message : messages) {
      grpc::Slice slice(message);
      grpc::ByteBuffer buffer(&slice, 1);
      call->Write(buffer, reinterpret_cast<void*>(2));
      if (!cq.Next(&tag, &ok) || !ok) break;
    }
    call->WritesDone(reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  };
  // After a complete expert (this used to end the stream with OK).
  grpc::Status status = send({whole.SerializeAsString(), garbage});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  // In the middle of an expert.
  status = send({whole.SerializeAsString(), half.SerializeAsString(), garbage});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("nothing of"), std::string::npos) << status.error_message();
  auto stub = ConnectTo(node->address());
  const v1::InventoryReply inventory = GetInventory(stub.get());
  ASSERT_EQ(inventory.entries_size(), 1);
  EXPECT_EQ(inventory.entries(0).experts_size(), 1);
  EXPECT_EQ(inventory.entries(0).experts(0), 0);
}

// Defect 8 of issue 9: a request whose reply cannot be sent (above the
// message limit) was computed in full and only then failed with
// RESOURCE_EXHAUSTED. It is refused by its shape before any work.
TEST_F(ExpertServiceTest, ARequestWhoseReplyIsTooLargeIsRefusedByShape) {
  NodeServer::Options options;
  options.store.data_dir = dir_.path();
  options.ram.budget_bytes = 64 << 20;
  options.max_message_bytes = 1 << 20;
  options.service.compute_threads = 2;
  absl::StatusOr<std::unique_ptr<NodeServer>> node = NodeServer::Start(options);
  ASSERT_TRUE(node.ok()) << node.status();
  auto stub = ConnectTo((*node)->address());
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
  const int64_t n_embd = m_.model->config().n_embd;
  // One token routed many times: a small request, a reply of > 1 MiB.
  v1::ComputeLayerRequest request = Valid(0);
  const int64_t routes = (int64_t{1} << 20) / (n_embd * 4) + 1;
  v1::Route route = request.routes(0);
  request.clear_routes();
  for (int64_t i = 0; i < routes; ++i) *request.add_routes() = route;
  ASSERT_LT(request.ByteSizeLong(), size_t{1} << 20);
  v1::ComputeLayerReply reply;
  const grpc::Status s = Compute(stub.get(), request, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("limit"), std::string::npos) << s.error_message();
  EXPECT_EQ(GetStats(stub.get()).ram_misses(), 0u);  // no expert was even looked up
  // Reduced per token the same request fits, and is served.
  request.set_reduce_per_token(true);
  ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());
}

// Defect 7 of issue 9 (memory half): stalled Ingest streams held unbounded
// memory. All streams together hold at most max_ingest_buffer_bytes; beyond,
// RESOURCE_EXHAUSTED, counted; a cancelled stream gives its share back.
TEST_F(ExpertServiceTest, IngestBufferingIsBoundedAcrossStreams) {
  const moe::ExpertWeights& w = m_.model->experts()[0][0];
  const std::string bytes = BytesOfExpert(w);
  NodeServer::Options options;
  options.store.data_dir = dir_.path();
  options.ram.budget_bytes = 64 << 20;
  options.service.max_ingest_buffer_bytes = bytes.size() * 3 / 2;
  absl::StatusOr<std::unique_ptr<NodeServer>> node = NodeServer::Start(options);
  ASSERT_TRUE(node.ok()) << node.status();
  auto stub = ConnectTo((*node)->address());
  auto header_of = [&](int expert) {
    v1::IngestChunk h;
    h.mutable_key()->set_model_fingerprint(m_.fingerprint);
    h.mutable_key()->set_expert(expert);
    for (auto [m, t] : {std::pair{&w.gate, h.mutable_gate()}, std::pair{&w.up, h.mutable_up()},
                        std::pair{&w.down, h.mutable_down()}}) {
      t->set_ggml_type(static_cast<uint32_t>(m->type));
      t->add_dims(m->cols);
      t->add_dims(m->rows);
    }
    h.set_total_bytes(bytes.size());
    h.set_data(bytes.substr(0, 16));  // then the stream stalls
    return h;
  };
  // Stream A stalls inside its expert.
  v1::IngestReply reply_a;
  auto context_a = MakeContext();
  auto writer_a = stub->Ingest(context_a.get(), &reply_a);
  ASSERT_TRUE(writer_a->Write(header_of(0)));
  v1::NodeStatsReply stats;
  for (int i = 0; i < 500; ++i) {
    stats = GetStats(stub.get());
    if (stats.ingest_buffered_bytes() > 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(stats.ingest_buffered_bytes(), bytes.size());
  // Stream B cannot buffer a second expert.
  {
    v1::IngestReply reply_b;
    auto context_b = MakeContext();
    auto writer_b = stub->Ingest(context_b.get(), &reply_b);
    writer_b->Write(header_of(1));
    writer_b->WritesDone();
    const grpc::Status s = writer_b->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  EXPECT_EQ(GetStats(stub.get()).ingest_refused(), 1u);
  // Cancelling A gives its bytes back.
  context_a->TryCancel();
  (void)writer_a->Finish();
  for (int i = 0; i < 500; ++i) {
    stats = GetStats(stub.get());
    if (stats.ingest_buffered_bytes() == 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(stats.ingest_buffered_bytes(), 0u);
  v1::IngestReply ingest;
  EXPECT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {{0, 1}}, &ingest).ok());
}

TEST_F(ExpertServiceTest, AuthTokenIsRequired) {
  const std::string token = "s3cret-token-0123456789";
  auto node = StartNode(dir_.path(), token);
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  for (const std::string& bad : {std::string(), std::string("wrong"), token + "x"}) {
    v1::NodeStatsReply stats;
    auto context = MakeContext(bad);
    EXPECT_EQ(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::ComputeLayerReply reply;
    EXPECT_EQ(Compute(stub.get(), Valid(), &reply, bad).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::IngestReply ingest;
    EXPECT_EQ(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {{0, 0}}, &ingest, bad)
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest, token).ok());
  v1::ComputeLayerReply reply;
  const v1::ComputeLayerRequest request = Valid();
  ASSERT_TRUE(Compute(stub.get(), request, &reply, token).ok());
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                     m_.model->config().n_embd);
}

v1::InventoryReply GetInventory(v1::ExpertService::Stub* stub) {
  v1::InventoryReply inventory;
  auto context = MakeContext();
  EXPECT_TRUE(stub->Inventory(context.get(), v1::InventoryRequest(), &inventory).ok());
  return inventory;
}

TEST_F(ExpertServiceTest, RestartKeepsInventoryAndNeedsNoReingest) {
  const arch::ModelConfig& config = m_.model->config();
  std::string before;
  {
    auto node = StartNode(dir_.path());
    ASSERT_NE(node, nullptr);
    auto stub = ConnectTo(node->address());
    v1::IngestReply ingest;
    ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
    before = GetInventory(stub.get()).SerializeAsString();
  }
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  const v1::InventoryReply after = GetInventory(stub.get());
  EXPECT_EQ(after.SerializeAsString(), before);
  ASSERT_EQ(after.entries_size(), config.n_layer);
  for (const v1::InventoryEntry& e : after.entries()) {
    EXPECT_EQ(e.model_fingerprint(), m_.fingerprint);
    EXPECT_EQ(e.experts_size(), config.n_expert);
  }
  // Nothing is missing: computing every layer works without any ingest.
  for (int layer = 0; layer < config.n_layer; ++layer) {
    const v1::ComputeLayerRequest request = Valid(layer);
    v1::ComputeLayerReply reply;
    ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());
    ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                       config.n_embd);
  }
  // Range checks survive the restart too (the model record is durable).
  v1::ComputeLayerRequest bad = Valid();
  bad.set_layer(config.n_layer);
  v1::ComputeLayerReply reply;
  EXPECT_EQ(Compute(stub.get(), bad, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ExpertServiceTest, ImportFromLocalGguf) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  const arch::ModelConfig& config = m_.model->config();
  {
    v1::ImportRequest request;
    request.set_gguf_path(m_.path);
    request.set_model_fingerprint("not-the-fingerprint");
    v1::ImportReply reply;
    auto context = MakeContext();
    EXPECT_EQ(stub->Import(context.get(), request, &reply).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    v1::ImportRequest request;
    request.set_gguf_path("/nonexistent.gguf");
    v1::ImportReply reply;
    auto context = MakeContext();
    EXPECT_EQ(stub->Import(context.get(), request, &reply).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  request.set_model_fingerprint(m_.fingerprint);
  v1::ExpertKey* key = request.add_experts();
  key->set_model_fingerprint(m_.fingerprint);
  key->set_layer(1);
  key->set_expert(2);
  v1::ImportReply reply;
  {
    auto context = MakeContext();
    ASSERT_TRUE(stub->Import(context.get(), request, &reply).ok());
  }
  EXPECT_EQ(reply.imported(), 1);
  request.clear_experts();  // all
  {
    auto context = MakeContext();
    ASSERT_TRUE(stub->Import(context.get(), request, &reply).ok());
  }
  EXPECT_EQ(reply.imported(), config.n_layer * config.n_expert - 1);
  {
    auto context = MakeContext();
    ASSERT_TRUE(stub->Import(context.get(), request, &reply).ok());
  }
  EXPECT_EQ(reply.imported(), 0);  // everything already stored
  const v1::ComputeLayerRequest compute = Valid(1);
  v1::ComputeLayerReply compute_reply;
  ASSERT_TRUE(Compute(stub.get(), compute, &compute_reply).ok());
  ExpectBitwiseEqual(compute_reply, LocalOutputs(*m_.model, compute), compute.routes_size(),
                     config.n_embd);
}

// One expert's bytes as an ingest stream: a header chunk carrying them all,
// with the xxh64 of exactly these bytes (so only immutability can refuse it).
grpc::Status IngestRaw(v1::ExpertService::Stub* stub, const std::string& fingerprint, int layer,
                       int expert, const moe::ExpertWeights& shape_of, const std::string& bytes,
                       uint32_t gate_type) {
  v1::IngestChunk h;
  h.mutable_key()->set_model_fingerprint(fingerprint);
  h.mutable_key()->set_layer(layer);
  h.mutable_key()->set_expert(expert);
  for (auto [m, t] :
       {std::pair{&shape_of.gate, h.mutable_gate()}, std::pair{&shape_of.up, h.mutable_up()},
        std::pair{&shape_of.down, h.mutable_down()}}) {
    t->set_ggml_type(static_cast<uint32_t>(m->type));
    t->add_dims(m->cols);
    t->add_dims(m->rows);
  }
  h.mutable_gate()->set_ggml_type(gate_type);
  h.set_total_bytes(bytes.size());
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  h.set_xxh64(PayloadChecksum(absl::Span<const uint8_t>(p, bytes.size()), {}, {}));
  h.set_data(bytes);
  v1::IngestReply reply;
  auto context = MakeContext();
  auto writer = stub->Ingest(context.get(), &reply);
  writer->Write(h);
  writer->WritesDone();
  return writer->Finish();
}

std::string BytesOfExpert(const moe::ExpertWeights& w) {
  std::string bytes;
  for (const ops::WeightMatrix* m : {&w.gate, &w.up, &w.down}) {
    bytes.append(reinterpret_cast<const char*>(m->data), m->rows * m->row_bytes);
  }
  return bytes;
}

// Defects 1 and 2 of issue 9: replacement bytes (with their own valid xxh64)
// or another tensor type for a stored expert are refused, the node keeps
// serving the original bytes from RAM and, after a restart, from disk; the
// inventory reports every expert's content hash.
TEST_F(ExpertServiceTest, StoredExpertsCannotBePoisoned) {
  const arch::ModelConfig& config = m_.model->config();
  const v1::ComputeLayerRequest request = Valid(0);
  const int victim = request.routes(0).expert();
  const moe::ExpertWeights& w = m_.model->experts()[0][victim];
  {
    auto node = StartNode(dir_.path());
    ASSERT_NE(node, nullptr);
    auto stub = ConnectTo(node->address());
    v1::IngestReply ingest;
    ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
    v1::ComputeLayerReply reply;
    ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());  // now resident in RAM

    std::string poison = BytesOfExpert(w);
    for (size_t i = 0; i < poison.size(); i += 4) poison[i] ^= 0x40;
    grpc::Status s = IngestRaw(stub.get(), m_.fingerprint, 0, victim, w, poison,
                               static_cast<uint32_t>(w.gate.type));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
    // The same bytes declared as another type: refused too.
    s = IngestRaw(stub.get(), m_.fingerprint, 0, victim, w, BytesOfExpert(w),
                  static_cast<uint32_t>(ops::TensorType::kF16));
    EXPECT_NE(s.error_code(), grpc::StatusCode::OK);
    // The same bytes again are acknowledged.
    s = IngestRaw(stub.get(), m_.fingerprint, 0, victim, w, BytesOfExpert(w),
                  static_cast<uint32_t>(w.gate.type));
    EXPECT_TRUE(s.ok()) << s.error_message();

    ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());
    ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                       config.n_embd);
    EXPECT_EQ(GetStats(stub.get()).experts_stored(),
              static_cast<uint64_t>(config.n_layer * config.n_expert));
  }
  auto node = StartNode(dir_.path(), "", 0);  // no RAM tier: read the disk
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  v1::ComputeLayerReply reply;
  ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(), config.n_embd);
  const v1::InventoryReply inventory = GetInventory(stub.get());
  ASSERT_EQ(inventory.entries_size(), config.n_layer);
  for (const v1::InventoryEntry& e : inventory.entries()) {
    ASSERT_EQ(e.xxh64_size(), e.experts_size());
    for (int i = 0; i < e.experts_size(); ++i) {
      const moe::ExpertWeights& x = m_.model->experts()[e.layer()][e.experts(i)];
      const std::string bytes = BytesOfExpert(x);
      EXPECT_EQ(e.xxh64(i),
                PayloadChecksum(absl::Span<const uint8_t>(
                                    reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                                {}, {}));
    }
  }
}

// Defect 5 of issue 9: Import of a FIFO hung the node; import errors told
// which paths exist. Now every path that cannot be imported gets the same
// answer, at once, and the node keeps serving.
TEST_F(ExpertServiceTest, ImportOfWhatIsNotAModelSaysOnlyCannotImport) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  TempDir files;
  const std::string fifo = files.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string text = files.path() + "/text";
  { std::ofstream(text) << "not a model"; }
  for (const std::string& path : {fifo, text, files.path(), std::string("/nonexistent.gguf"),
                                  std::string("/dev/zero"), std::string("/proc/self/mem")}) {
    v1::ImportRequest request;
    request.set_gguf_path(path);
    v1::ImportReply reply;
    auto context = MakeContext();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    const grpc::Status s = stub->Import(context.get(), request, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << path << ": " << s.error_message();
    EXPECT_EQ(s.error_message(), "cannot import " + path);
  }
  // A path with control bytes comes back escaped.
  {
    v1::ImportRequest request;
    request.set_gguf_path("/x\n\x1b[31m");
    v1::ImportReply reply;
    auto context = MakeContext();
    const grpc::Status s = stub->Import(context.get(), request, &reply);
    EXPECT_EQ(s.error_message(), "cannot import /x\\x0a\\x1b[31m");
  }
  // The node still imports a real model afterwards.
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  v1::ImportReply reply;
  auto context = MakeContext();
  ASSERT_TRUE(stub->Import(context.get(), request, &reply).ok());
  EXPECT_EQ(reply.imported(), m_.model->config().n_layer * m_.model->config().n_expert);
}

// Shutdown does not wait for a long Import: it stops before the next expert.
TEST_F(ExpertServiceTest, ImportStopsWhenTheNodeShutsDown) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  node->service()->BeginShutdown();
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  v1::ImportReply reply;
  EXPECT_TRUE(absl::IsUnavailable(node->service()->DoImport(request, &reply)));
  EXPECT_EQ(node->store()->experts_stored(), 0u);
}

TEST_F(ExpertServiceTest, CorruptStoredExpertIsReportedDroppedAndReingestable) {
  // A RAM budget of 0: every compute reads the store.
  auto node = StartNode(dir_.path(), "", 0);
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());

  v1::ComputeLayerRequest request = Valid(0);
  const int victim = request.routes(0).expert();
  ASSERT_TRUE(node->store()
                  ->PutRawValueForTesting(ExpertId{m_.fingerprint, 0, victim},
                                          std::string(300, 'z'))
                  .ok());
  v1::ComputeLayerReply reply;
  EXPECT_EQ(Compute(stub.get(), request, &reply).error_code(), grpc::StatusCode::DATA_LOSS);
  const v1::InventoryReply inventory = GetInventory(stub.get());
  for (const v1::InventoryEntry& e : inventory.entries()) {
    if (e.layer() != 0) continue;
    EXPECT_EQ(std::count(e.experts().begin(), e.experts().end(), victim), 0);
    EXPECT_EQ(e.experts_size(), m_.model->config().n_expert - 1);
  }
  v1::NodeStatsReply stats;
  {
    auto context = MakeContext();
    ASSERT_TRUE(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).ok());
  }
  EXPECT_EQ(stats.checksum_failures(), 1u);
  EXPECT_EQ(Compute(stub.get(), request, &reply).error_code(), grpc::StatusCode::NOT_FOUND);

  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {{0, victim}}, &ingest).ok());
  ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                     m_.model->config().n_embd);
}

TEST_F(ExpertServiceTest, PrefetchLoadsIntoRam) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
  v1::PrefetchRequest request;
  for (int e = 0; e < m_.model->config().n_expert; ++e) {
    v1::ExpertKey* key = request.add_experts();
    key->set_model_fingerprint(m_.fingerprint);
    key->set_layer(1);
    key->set_expert(e);
  }
  v1::PrefetchReply reply;
  auto context = MakeContext();
  ASSERT_TRUE(stub->Prefetch(context.get(), request, &reply).ok());
  EXPECT_GT(reply.accepted(), 0);
  // Prefetch is asynchronous: wait (bounded) for the loads.
  for (int i = 0; i < 200 && node->ram_tier()->resident_count() <
                                 static_cast<uint64_t>(reply.accepted());
       ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(node->ram_tier()->resident_count(), static_cast<uint64_t>(reply.accepted()));
  v1::ComputeLayerReply compute_reply;
  ASSERT_TRUE(Compute(stub.get(), Valid(1), &compute_reply).ok());
  EXPECT_EQ(compute_reply.ram_misses(), 0);
  EXPECT_GT(compute_reply.ram_hits(), 0);
}

v1::NodeStatsReply GetStats(v1::ExpertService::Stub* stub) {
  v1::NodeStatsReply stats;
  auto context = MakeContext();
  EXPECT_TRUE(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).ok());
  return stats;
}

v1::ExpertKey Key(const std::string& fingerprint, int layer, int expert) {
  v1::ExpertKey key;
  key.set_model_fingerprint(fingerprint);
  key.set_layer(layer);
  key.set_expert(expert);
  return key;
}

// A request of n_tokens tokens, token t routed to experts[t % size] alone.
v1::ComputeLayerRequest RequestFor(const arch::Model& model, const std::string& fingerprint,
                                   int layer, const std::vector<int>& experts, int n_tokens,
                                   uint32_t seed) {
  v1::ComputeLayerRequest request = RandomRequest(model, fingerprint, layer, n_tokens, 1, seed);
  for (v1::Route& r : *request.mutable_routes()) r.set_expert(experts[r.token() % experts.size()]);
  return request;
}

uint64_t RamBytesOf(const moe::ExpertWeights& w) { return ExpertBlob::SizeFor(LayoutOf(w)); }

TEST_F(ExpertServiceTest, PrefetchHintsForUnknownExpertsAreIgnoredAndCounted) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  const arch::ModelConfig& config = m_.model->config();
  std::vector<std::pair<int, int>> most;  // every expert but layer 0 expert 0
  for (int l = 0; l < config.n_layer; ++l) {
    for (int e = 0; e < config.n_expert; ++e) {
      if (l != 0 || e != 0) most.emplace_back(l, e);
    }
  }
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, most, &ingest).ok());
  v1::PrefetchRequest request;
  *request.add_experts() = Key("00ff", 0, 1);                        // unknown model
  *request.add_experts() = Key("../x", 0, 1);                        // malformed
  *request.add_experts() = Key(m_.fingerprint, config.n_layer, 0);   // layer out of range
  *request.add_experts() = Key(m_.fingerprint, 0, config.n_expert);  // expert out of range
  *request.add_experts() = Key(m_.fingerprint, -1, 0);               // negative
  *request.add_experts() = Key(m_.fingerprint, 0, 0);                // not stored
  v1::PrefetchReply reply;
  {
    auto context = MakeContext();
    grpc::Status s = stub->Prefetch(context.get(), request, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(reply.accepted(), 1);  // only the not-stored one reaches the I/O pool
  // Let the pool finish with it first: a second hint for it while it is still
  // queued would coalesce instead of being ignored.
  v1::NodeStatsReply stats;
  for (int i = 0; i < 500; ++i) {
    stats = GetStats(stub.get());
    if (stats.prefetch_ignored() >= 6) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(stats.prefetch_ignored(), 6u);
  // The same hints riding on a ComputeLayer change nothing about its result.
  v1::ComputeLayerRequest compute = Valid(1);
  *compute.mutable_prefetch() = request.experts();
  v1::ComputeLayerReply compute_reply;
  ASSERT_TRUE(Compute(stub.get(), compute, &compute_reply).ok());
  ExpectBitwiseEqual(compute_reply, LocalOutputs(*m_.model, compute), compute.routes_size(),
                     config.n_embd);
  for (int i = 0; i < 500; ++i) {  // the not-stored ones are checked on the I/O pool
    stats = GetStats(stub.get());
    if (stats.prefetch_ignored() >= 12) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(stats.prefetch_hints(), 12u);
  EXPECT_EQ(stats.prefetch_ignored(), 12u);
  EXPECT_EQ(stats.prefetch_loaded(), 0u);
  EXPECT_EQ(stats.prefetch_dropped(), 0u);
  EXPECT_FALSE(node->ram_tier()->Contains(ExpertId{m_.fingerprint, 0, 0}));
}

TEST_F(ExpertServiceTest, DuplicateHintsCoalesceIntoOneDiskRead) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
  v1::PrefetchRequest request;
  for (int i = 0; i < 10; ++i) *request.add_experts() = Key(m_.fingerprint, 1, 2);
  v1::PrefetchReply reply;
  {
    auto context = MakeContext();
    ASSERT_TRUE(stub->Prefetch(context.get(), request, &reply).ok());
  }
  EXPECT_EQ(reply.accepted(), 1);
  // And once more while (or after) it loads, piggybacked on a ComputeLayer.
  v1::ComputeLayerRequest compute = RequestFor(*m_.model, m_.fingerprint, 0, {0}, 2, 5);
  for (int i = 0; i < 5; ++i) *compute.add_prefetch() = Key(m_.fingerprint, 1, 2);
  v1::ComputeLayerReply compute_reply;
  ASSERT_TRUE(Compute(stub.get(), compute, &compute_reply).ok());
  const ExpertId id{m_.fingerprint, 1, 2};
  for (int i = 0; i < 500 && !node->ram_tier()->Contains(id); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(node->ram_tier()->Contains(id));
  const v1::NodeStatsReply stats = GetStats(stub.get());
  const uint64_t expert_bytes = m_.model->experts()[1][2].bytes();
  const uint64_t compute_bytes = m_.model->experts()[0][0].bytes();
  EXPECT_EQ(stats.disk_bytes_read(), expert_bytes + compute_bytes);
  EXPECT_EQ(stats.prefetch_hints(), 15u);
  EXPECT_EQ(stats.prefetch_issued(), 1u);
  EXPECT_EQ(stats.prefetch_loaded(), 1u);
  EXPECT_EQ(stats.prefetch_coalesced() + stats.prefetch_resident(), 14u);
  // The first use is a RAM hit and counts the prefetch as used.
  const v1::ComputeLayerRequest use = RequestFor(*m_.model, m_.fingerprint, 1, {2}, 3, 6);
  ASSERT_TRUE(Compute(stub.get(), use, &compute_reply).ok());
  EXPECT_EQ(compute_reply.ram_misses(), 0);
  EXPECT_EQ(GetStats(stub.get()).prefetch_used(), 1u);
}

// The same ComputeLayer sequence, with and without next-layer hints, on a
// RAM tier that holds only three experts (so prefetches evict, are dropped or
// protected): the outputs are bitwise identical.
TEST_F(ExpertServiceTest, PrefetchNeverChangesOutputs) {
  const arch::ModelConfig& config = m_.model->config();
  const uint64_t budget = 3 * RamBytesOf(m_.model->experts()[0][0]);
  std::vector<std::string> outputs[2];
  for (const bool hints : {false, true}) {
    TempDir dir;
    auto node = StartNode(dir.path(), "", budget);
    ASSERT_NE(node, nullptr);
    auto stub = ConnectTo(node->address());
    v1::IngestReply ingest;
    ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
    uint32_t seed = 7;
    for (int round = 0; round < 4; ++round) {
      for (int layer = 0; layer < config.n_layer; ++layer) {
        v1::ComputeLayerRequest request = RandomRequest(*m_.model, m_.fingerprint, layer, 3,
                                                        config.n_expert_used, seed++);
        if (hints) {
          for (int e = 0; e < config.n_expert; e += 2) {
            *request.add_prefetch() = Key(m_.fingerprint, (layer + 1) % config.n_layer, e);
          }
        }
        v1::ComputeLayerReply reply;
        ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());
        outputs[hints].push_back(reply.outputs().data());
      }
    }
    const v1::NodeStatsReply stats = GetStats(stub.get());
    EXPECT_LE(stats.ram_peak_used_bytes(), budget);
    EXPECT_EQ(stats.prefetch_hints() > 0, hints);
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "request " << i;
  }
}

TEST_F(ExpertServiceTest, HotExpertsArePinnedAfterRestartAndOtherFingerprintsIgnored) {
  const moe::ExpertWeights& w = m_.model->experts()[0][1];
  const uint64_t size = RamBytesOf(w);
  const std::string other = "0123456789abcdef";  // a model this node holds nothing of
  {
    auto node = StartNode(dir_.path());
    ASSERT_NE(node, nullptr);
    auto stub = ConnectTo(node->address());
    v1::IngestReply ingest;
    ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest).ok());
    for (int i = 0; i < 5; ++i) {
      v1::ComputeLayerReply reply;
      ASSERT_TRUE(
          Compute(stub.get(), RequestFor(*m_.model, m_.fingerprint, 0, {1, 2}, 4, i), &reply)
              .ok());
    }
    v1::ComputeLayerReply reply;
    ASSERT_TRUE(
        Compute(stub.get(), RequestFor(*m_.model, m_.fingerprint, 1, {3}, 2, 9), &reply).ok());
    // Hotter than anything real, but of another model: must be ignored.
    for (int i = 0; i < 100; ++i) node->usage_counts()->Record(ExpertId{other, 0, 1});
  }
  // Room for two experts: the two hot ones, not the one used once.
  auto node = StartNode(dir_.path(), "", 64 << 20, 2 * size);
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  const v1::NodeStatsReply stats = GetStats(stub.get());
  EXPECT_EQ(stats.pinned_experts(), 2u);
  EXPECT_EQ(stats.pinned_bytes(), 2 * size);
  EXPECT_EQ(stats.ram_used_bytes(), 2 * size);
  EXPECT_TRUE(node->ram_tier()->Contains(ExpertId{m_.fingerprint, 0, 1}));
  EXPECT_TRUE(node->ram_tier()->Contains(ExpertId{m_.fingerprint, 0, 2}));
  EXPECT_FALSE(node->ram_tier()->Contains(ExpertId{m_.fingerprint, 1, 3}));
  const v1::ComputeLayerRequest request = RequestFor(*m_.model, m_.fingerprint, 0, {1, 2}, 4, 77);
  v1::ComputeLayerReply reply;
  ASSERT_TRUE(Compute(stub.get(), request, &reply).ok());
  EXPECT_EQ(reply.ram_misses(), 0);
  EXPECT_EQ(reply.ram_hits(), 2);
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                     m_.model->config().n_embd);
}

TEST_F(ExpertServiceTest, PinBudgetAboveRamBudgetIsRefused) {
  NodeServer::Options options;
  options.store.data_dir = dir_.path();
  options.ram.budget_bytes = 1 << 20;
  options.pin_budget_bytes = (1 << 20) + 1;
  EXPECT_EQ(NodeServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::expert_node
