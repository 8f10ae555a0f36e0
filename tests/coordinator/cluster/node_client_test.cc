// The gRPC NodeClient against an in-process ExpertService on loopback:
// metadata, large messages, deadlines, health checks, Ingest streaming.
#include "coordinator/cluster/node_client.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "colibri/v1/expert.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "tests/coordinator/cluster/fake_node_client.h"
#include "tests/support/auth_token.h"

namespace colibri::coordinator {
namespace {

class EchoService final : public v1::ExpertService::Service {
 public:
  grpc::Status ComputeLayer(grpc::ServerContext* ctx, const v1::ComputeLayerRequest* request,
                            v1::ComputeLayerReply* reply) override {
    RecordAuth(ctx);
    if (request->layer() == 99) absl::SleepFor(absl::Seconds(2));  // misses deadlines
    *reply->mutable_outputs() = request->hidden();
    return grpc::Status::OK;
  }
  grpc::Status Inventory(grpc::ServerContext* ctx, const v1::InventoryRequest* request,
                         v1::InventoryReply* reply) override {
    RecordAuth(ctx);
    reply->set_node_id("echo");
    v1::InventoryEntry* entry = reply->add_entries();
    entry->set_model_fingerprint(request->model_fingerprint());
    entry->set_layer(1);
    entry->add_experts(3);
    return grpc::Status::OK;
  }
  grpc::Status Ingest(grpc::ServerContext* ctx, grpc::ServerReader<v1::IngestChunk>* reader,
                      v1::IngestReply* reply) override {
    RecordAuth(ctx);
    v1::IngestChunk chunk;
    while (reader->Read(&chunk)) {
      reply->set_bytes_stored(reply->bytes_stored() + chunk.data().size());
      if (chunk.offset() == 0) *reply->add_stored() = chunk.key();
    }
    return grpc::Status::OK;
  }

  std::string last_auth() {
    absl::MutexLock lock(&mu_);
    return last_auth_;
  }

 private:
  void RecordAuth(grpc::ServerContext* ctx) {
    auto it = ctx->client_metadata().find("authorization");
    absl::MutexLock lock(&mu_);
    last_auth_ =
        it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
  }
  absl::Mutex mu_;
  std::string last_auth_ ABSL_GUARDED_BY(mu_);
};

class NodeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(256 << 20);
    builder.SetMaxSendMessageSize(256 << 20);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }
  std::unique_ptr<NodeClient> Client(NodeClientOptions options = {}) {
    options.address = "127.0.0.1:" + std::to_string(port_);
    absl::StatusOr<std::unique_ptr<NodeClient>> client = CreateGrpcNodeClient(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  EchoService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(NodeClientTest, SendsTheTokenAndReadsReplies) {
  NodeClientOptions options;
  options.auth_token = colibri::testing::RandomAuthToken();
  std::unique_ptr<NodeClient> client = Client(options);
  v1::InventoryRequest request;
  request.set_model_fingerprint("fp");
  absl::StatusOr<v1::InventoryReply> reply = client->Inventory(request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->node_id(), "echo");
  EXPECT_EQ(reply->entries(0).model_fingerprint(), "fp");
  EXPECT_EQ(service_.last_auth(), "Bearer " + options.auth_token);
  ASSERT_TRUE(Client()->Inventory(request).ok());
  EXPECT_EQ(service_.last_auth(), "");
}

TEST_F(NodeClientTest, CarriesMessagesBeyondTheDefaultLimit) {
  std::unique_ptr<NodeClient> client = Client();
  v1::ComputeLayerRequest request;
  request.mutable_hidden()->set_data(std::string(24 << 20, 'x'));  // 24 MiB > gRPC's 4 MiB
  absl::StatusOr<v1::ComputeLayerReply> reply = client->ComputeLayer(request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->outputs().data().size(), 24u << 20);
}

TEST_F(NodeClientTest, DeadlinesAreEnforced) {
  NodeClientOptions options;
  options.compute_deadline = absl::Milliseconds(200);
  std::unique_ptr<NodeClient> client = Client(options);
  v1::ComputeLayerRequest request;
  request.set_layer(99);
  absl::StatusOr<v1::ComputeLayerReply> reply = client->ComputeLayer(request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDeadlineExceeded) << reply.status();
}

TEST_F(NodeClientTest, HealthCheckSeesServingAndDown) {
  std::unique_ptr<NodeClient> client = Client();
  EXPECT_TRUE(client->CheckHealth().ok()) << client->CheckHealth();
  server_->GetHealthCheckService()->SetServingStatus(false);
  EXPECT_EQ(client->CheckHealth().code(), absl::StatusCode::kUnavailable);
  server_->Shutdown(std::chrono::system_clock::now());
  server_ = nullptr;
  EXPECT_EQ(client->CheckHealth().code(), absl::StatusCode::kUnavailable);
}

TEST_F(NodeClientTest, StreamsIngestChunks) {
  std::unique_ptr<NodeClient> client = Client();
  absl::StatusOr<std::unique_ptr<IngestStream>> stream = client->StartIngest();
  ASSERT_TRUE(stream.ok()) << stream.status();
  v1::IngestChunk chunk;
  chunk.mutable_key()->set_layer(2);
  chunk.set_data(std::string(1000, 'a'));
  ASSERT_TRUE((*stream)->Write(chunk).ok());
  chunk.set_offset(1000);
  ASSERT_TRUE((*stream)->Write(chunk).ok());
  absl::StatusOr<v1::IngestReply> reply = (*stream)->Finish();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->bytes_stored(), 2000u);
  ASSERT_EQ(reply->stored_size(), 1);
  EXPECT_EQ(reply->stored(0).layer(), 2);
}

TEST_F(NodeClientTest, UnreachableNodeIsUnavailable) {
  NodeClientOptions options;
  options.address = "127.0.0.1:1";
  absl::StatusOr<std::unique_ptr<NodeClient>> client = CreateGrpcNodeClient(options);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Inventory({}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*client)->CheckHealth().code(), absl::StatusCode::kUnavailable);
}

// Asynchronous ComputeLayer: calls to several clients complete on one queue,
// each with its own tag and its own reply; a missed deadline (the call's own,
// not NodeClientOptions::compute_deadline) comes back as a status like the
// blocking call's.
TEST_F(NodeClientTest, ComputeQueueCollectsCallsOfSeveralClients) {
  NodeClientOptions options;
  std::unique_ptr<NodeClient> a = Client(options);
  std::unique_ptr<NodeClient> b = Client(options);
  ComputeQueue queue;
  int tags[4];
  for (int i = 0; i < 4; ++i) {
    v1::ComputeLayerRequest request;
    request.set_layer(i == 3 ? 99 : i);  // 99 sleeps past the deadline
    request.mutable_hidden()->set_data(std::string(1000 + i, static_cast<char>('a' + i)));
    (i % 2 == 0 ? a : b)->StartComputeLayer(request, absl::Milliseconds(300), &queue, &tags[i]);
  }
  EXPECT_EQ(queue.outstanding(), 4);
  bool seen[4] = {false, false, false, false};
  for (int n = 0; n < 4; ++n) {
    ComputeQueue::Completion done = queue.Next();
    const int i = static_cast<int>(static_cast<int*>(done.tag) - tags);
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 4);
    EXPECT_FALSE(seen[i]) << "tag " << i << " came back twice";
    seen[i] = true;
    if (i == 3) {
      EXPECT_EQ(done.reply.status().code(), absl::StatusCode::kDeadlineExceeded) << done.reply.status();
      continue;
    }
    ASSERT_TRUE(done.reply.ok()) << done.reply.status();
    EXPECT_EQ(done.reply->outputs().data(), std::string(1000 + i, static_cast<char>('a' + i)));
  }
  EXPECT_EQ(queue.outstanding(), 0);
}

TEST_F(NodeClientTest, ComputeQueueReportsAnUnreachableNode) {
  NodeClientOptions options;
  options.address = "127.0.0.1:1";  // nothing listens there
  absl::StatusOr<std::unique_ptr<NodeClient>> client = CreateGrpcNodeClient(options);
  ASSERT_TRUE(client.ok());
  ComputeQueue queue;
  int tag = 0;
  (*client)->StartComputeLayer(v1::ComputeLayerRequest(), absl::Seconds(5), &queue, &tag);
  ComputeQueue::Completion done = queue.Next();
  EXPECT_EQ(done.tag, &tag);
  EXPECT_EQ(done.reply.status().code(), absl::StatusCode::kUnavailable) << done.reply.status();
  EXPECT_NE(done.reply.status().message().find("127.0.0.1:1"), std::string::npos)
      << done.reply.status();
}

// A queue destroyed with calls in flight cancels them instead of waiting for
// the replies (the service sleeps 2 s on layer 99; the deadline is 30 s).
TEST_F(NodeClientTest, AComputeQueueDestroyedWithCallsInFlightCancelsThem) {
  std::unique_ptr<NodeClient> client = Client();
  const absl::Time start = absl::Now();
  {
    ComputeQueue queue;
    int tag = 0;
    v1::ComputeLayerRequest request;
    request.set_layer(99);
    client->StartComputeLayer(request, absl::Seconds(30), &queue, &tag);
    client->StartComputeLayer(request, absl::Seconds(30), &queue, &tag);
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1.5));
}

// NextUntil gives up at its deadline; a cancelled call still comes back once.
TEST_F(NodeClientTest, AComputeQueueWaitsUntilADeadlineAndCancels) {
  std::unique_ptr<NodeClient> client = Client();
  ComputeQueue queue;
  int tag = 0;
  v1::ComputeLayerRequest request;
  request.set_layer(99);  // the service answers after 2 s
  client->StartComputeLayer(request, absl::Seconds(30), &queue, &tag);
  EXPECT_FALSE(queue.NextUntil(std::chrono::steady_clock::now()).has_value());
  EXPECT_FALSE(
      queue.NextUntil(std::chrono::steady_clock::now() + std::chrono::milliseconds(10)).has_value());
  EXPECT_EQ(queue.outstanding(), 1);
  queue.Cancel(&tag);
  ComputeQueue::Completion done = queue.Next();
  EXPECT_EQ(done.tag, &tag);
  EXPECT_EQ(done.reply.status().code(), absl::StatusCode::kCancelled) << done.reply.status();
  EXPECT_EQ(queue.outstanding(), 0);
  queue.Cancel(&tag);  // no longer outstanding: nothing happens
  EXPECT_EQ(queue.outstanding(), 0);
}

// A call a client completes later from another thread wakes a Next blocked
// on the gRPC calls; Cancel runs its client's canceller once.
TEST_F(NodeClientTest, ACallCompletedElsewhereWakesABlockedNext) {
  std::unique_ptr<NodeClient> client = Client();
  ComputeQueue queue;
  int grpc_tag = 0;
  int later_tag = 0;
  int cancel_tag = 0;
  v1::ComputeLayerRequest request;
  request.set_layer(99);
  client->StartComputeLayer(request, absl::Seconds(30), &queue, &grpc_tag);
  queue.StartedElsewhere(&later_tag, nullptr);
  int cancels = 0;
  queue.StartedElsewhere(&cancel_tag, [&] {
    ++cancels;
    queue.Complete(&cancel_tag, absl::CancelledError("cancelled by the test"));
  });
  EXPECT_EQ(queue.outstanding(), 3);
  std::thread answer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    queue.Complete(&later_tag, v1::ComputeLayerReply());
  });
  ComputeQueue::Completion done = queue.Next();
  answer.join();
  EXPECT_EQ(done.tag, &later_tag);
  EXPECT_TRUE(done.reply.ok()) << done.reply.status();
  queue.Cancel(&cancel_tag);
  queue.Cancel(&cancel_tag);
  EXPECT_EQ(cancels, 1);
  done = queue.Next();
  EXPECT_EQ(done.tag, &cancel_tag);
  EXPECT_EQ(done.reply.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queue.outstanding(), 1);  // the gRPC call, cancelled by the destructor
}

// Clients without an asynchronous path (test fakes) complete at the start.
TEST(ComputeQueueTest, TheDefaultStartRecordsTheBlockingResult) {
  class Blocking : public testing::FakeNodeClient {
   public:
    Blocking() : FakeNodeClient("blocking") {}
    absl::StatusOr<v1::ComputeLayerReply> ComputeLayer(
        const v1::ComputeLayerRequest& request) override {
      if (request.layer() == 1) return absl::DataLossError("lost");
      v1::ComputeLayerReply reply;
      reply.set_compute_micros(request.layer());
      return reply;
    }
  } client;
  ComputeQueue queue;
  int tags[2];
  v1::ComputeLayerRequest request;
  request.set_layer(7);
  client.StartComputeLayer(request, absl::Seconds(30), &queue, &tags[0]);
  request.set_layer(1);
  client.StartComputeLayer(request, absl::Seconds(30), &queue, &tags[1]);
  ASSERT_EQ(queue.outstanding(), 2);
  ComputeQueue::Completion first = queue.Next();
  EXPECT_EQ(first.tag, &tags[0]);
  ASSERT_TRUE(first.reply.ok());
  EXPECT_EQ(first.reply->compute_micros(), 7);
  ComputeQueue::Completion second = queue.Next();
  EXPECT_EQ(second.tag, &tags[1]);
  EXPECT_EQ(second.reply.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(queue.outstanding(), 0);
}

}  // namespace
}  // namespace colibri::coordinator
