// The expert node in-process on 127.0.0.1:0, driven over a real gRPC channel:
// what the service adds to the domain classes (tested on their own in
// layer_computer_test, ingest_assembly_test, expert_import_test,
// prefetch_queue_test): auth, parsing, status conversion, the ComputeLayer
// workers under load and at shutdown, stream handling, and NodeServer's
// assembly of it all (message limits, restart, pinning).
#include "expert_node/expert_service.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "expert_node/node_server.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_fixture.h"
#include "tests/expert_node/node_test_client.h"
#include "tests/support/auth_token.h"

namespace colibri::expert_node {
namespace {

using testing::BytesOfExpert;
using testing::Compute;
using testing::ConnectTo;
using testing::ExpectBitwiseEqual;
using testing::GetInventory;
using testing::GetStats;
using testing::IngestExperts;
using testing::Key;
using testing::LocalOutputs;
using testing::MakeContext;
using testing::RamBytesOf;
using testing::RandomRequest;
using testing::RequestFor;
using testing::StartNode;

using ExpertServiceTest = testing::TinyModelTest;

// Every method over the wire: its reply, and a domain error arriving with its
// code and message.
TEST_F(ExpertServiceTest, EveryMethodRepliesAndConvertsErrors) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  const arch::ModelConfig& config = m_.model->config();
  v1::IngestReply ingest;
  ASSERT_TRUE(IngestExperts(stub.get(), *m_.model, m_.fingerprint, {}, &ingest, "", 1000).ok());
  EXPECT_EQ(ingest.stored_size(), config.n_layer * config.n_expert);
  for (int layer = 0; layer < config.n_layer; ++layer) {
    const v1::ComputeLayerRequest request = Valid(layer);
    v1::ComputeLayerReply reply;
    const grpc::Status s = Compute(stub.get(), request, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                       config.n_embd);
  }
  {
    v1::ComputeLayerRequest request = Valid();
    request.set_model_fingerprint("00ff");
    v1::ComputeLayerReply reply;
    const grpc::Status s = Compute(stub.get(), request, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(s.error_message(), "node holds no experts of model '00ff'");
  }
  {
    v1::PrefetchRequest request;
    *request.add_experts() = Key(m_.fingerprint, 1, 0);
    *request.add_experts() = Key("00ff", 1, 0);
    v1::PrefetchReply reply;
    auto context = MakeContext();
    ASSERT_TRUE(stub->Prefetch(context.get(), request, &reply).ok());
    EXPECT_LE(reply.accepted(), 1);
  }
  {
    v1::ImportRequest request;
    request.set_gguf_path("/nonexistent.gguf");
    v1::ImportReply reply;
    auto context = MakeContext();
    const grpc::Status s = stub->Import(context.get(), request, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(s.error_message(), "cannot import /nonexistent.gguf");
    request.set_gguf_path(m_.path);
    auto again = MakeContext();
    ASSERT_TRUE(stub->Import(again.get(), request, &reply).ok());
    EXPECT_EQ(reply.imported(), 0);  // every expert was ingested
  }
  {
    v1::InventoryRequest request;
    request.set_model_fingerprint("../x");
    v1::InventoryReply reply;
    auto context = MakeContext();
    EXPECT_EQ(stub->Inventory(context.get(), request, &reply).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(GetInventory(stub.get()).entries_size(), config.n_layer);
  }
  const v1::NodeStatsReply stats = GetStats(stub.get());
  EXPECT_EQ(stats.experts_stored(), static_cast<uint64_t>(config.n_layer * config.n_expert));
  EXPECT_EQ(stats.compute_requests(), static_cast<uint64_t>(config.n_layer));
  EXPECT_EQ(stats.prefetch_hints(), 2u);
  EXPECT_LE(stats.ram_used_bytes(), stats.ram_budget_bytes());
  EXPECT_EQ(stats.node_id(), "test-node");
}

// Shutdown does not wait for a long Import: it stops before the next expert.
TEST_F(ExpertServiceTest, ImportStopsWhenTheNodeShutsDown) {
  auto node = StartNode(dir_.path());
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  node->service()->BeginShutdown();
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  v1::ImportReply reply;
  auto context = MakeContext();
  EXPECT_EQ(stub->Import(context.get(), request, &reply).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(node->store()->experts_stored(), 0u);
}

// ImportWithProgress streams the counts (at least the first, before any
// expert) and ends with Import's reply; without the token it is refused
// before anything is imported.
TEST_F(ExpertServiceTest, ImportWithProgressStreamsCountsThenTheReply) {
  const std::string token = colibri::testing::RandomAuthToken();
  auto node = StartNode(dir_.path(), token);
  ASSERT_NE(node, nullptr);
  auto stub = ConnectTo(node->address());
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  {
    auto context = MakeContext();
    auto reader = stub->ImportWithProgress(context.get(), request);
    v1::ImportReply message;
    EXPECT_FALSE(reader->Read(&message));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(node->store()->experts_stored(), 0u);
  }
  auto context = MakeContext(token);
  auto reader = stub->ImportWithProgress(context.get(), request);
  std::vector<v1::ImportReply> messages;
  v1::ImportReply message;
  while (reader->Read(&message)) messages.push_back(message);
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(messages.size(), 2u);
  EXPECT_EQ(messages.front().bytes_done(), 0u);
  EXPECT_GT(messages.front().bytes_total(), 0u);
  const arch::ModelConfig& config = m_.model->config();
  const v1::ImportReply& last = messages.back();
  EXPECT_EQ(last.imported(), config.n_layer * config.n_expert);
  EXPECT_EQ(last.bytes_done(), last.bytes_total());
  EXPECT_EQ(last.bytes_total(), messages.front().bytes_total());
  EXPECT_EQ(node->store()->experts_stored(),
            static_cast<uint64_t>(config.n_layer * config.n_expert));
}

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

// A message that does not parse ends an Ingest stream with INVALID_ARGUMENT
// (never with OK, as if the stream had ended) and stores nothing of the
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
  // After a complete expert.
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

// A request whose reply could not be sent (above NodeServer's message limit)
// is refused by its shape before any work, not computed in full and then
// failed.
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

// Stalled Ingest streams hold bounded memory: all streams together hold at
// most max_ingest_buffer_bytes; beyond, RESOURCE_EXHAUSTED, counted; a
// cancelled stream gives its share back.
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
  const std::string token = colibri::testing::RandomAuthToken();
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
    EXPECT_EQ(
        IngestExperts(stub.get(), *m_.model, m_.fingerprint, {{0, 0}}, &ingest, bad).error_code(),
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
          Compute(stub.get(), RequestFor(*m_.model, m_.fingerprint, 0, {1, 2}, 4, i), &reply).ok());
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
