// gpt-oss's experts on a node: per-expert biases and the clamped SwiGLU
// travel in version 2 records through Ingest and Import, and ComputeLayer
// gives bitwise the coordinator's local outputs on both numeric paths.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "expert_node/expert_record.h"
#include "expert_node/node_server.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
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

class GptOssNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = colibri::testing::FixturesDir();
    if (dir.empty()) GTEST_SKIP() << "fixtures dir not found (set COLIBRI_FIXTURES_DIR)";
    path_ = dir + "/models/gpt-oss-tiny-mxfp4.gguf";
    absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(path_);
    if (!model.ok()) GTEST_SKIP() << "cannot open " << path_ << ": " << model.status();
    model_ = std::move(*model);
    fingerprint_ = *gguf::ModelFingerprint(model_->file());
    NodeServer::Options options;
    options.listen = "127.0.0.1:0";
    options.store.data_dir = dir_.path();
    options.ram.budget_bytes = 64 << 20;
    options.service.node_id = "gptoss-node";
    options.service.compute_threads = 2;
    absl::StatusOr<std::unique_ptr<NodeServer>> node = NodeServer::Start(options);
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = std::move(*node);
    stub_ = ConnectTo(node_->address());
  }

  // Every layer, both paths, several requests: the node's rows equal the
  // local ones bit for bit.
  void ExpectComputeEqualsLocal() {
    for (int layer = 0; layer < model_->config().n_layer; ++layer) {
      for (v1::NumericPath path : {v1::NUMERIC_PATH_EXACT, v1::NUMERIC_PATH_FAST}) {
        v1::ComputeLayerRequest request = RandomRequest(*model_, fingerprint_, layer, 5, 4, layer);
        request.set_path(path);
        v1::ComputeLayerReply reply;
        auto context = MakeContext();
        const grpc::Status s = stub_->ComputeLayer(context.get(), request, &reply);
        ASSERT_TRUE(s.ok()) << s.error_message();
        const std::vector<float> expected = LocalOutputs(*model_, request);
        ASSERT_EQ(reply.outputs().data().size(), expected.size() * sizeof(float));
        EXPECT_EQ(std::memcmp(reply.outputs().data().data(), expected.data(),
                              expected.size() * sizeof(float)),
                  0)
            << "layer " << layer << " path " << path;
      }
    }
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<arch::Model> model_;
  std::string fingerprint_;
  std::unique_ptr<NodeServer> node_;
  std::unique_ptr<v1::ExpertService::Stub> stub_;
};

TEST_F(GptOssNodeTest, IngestedExpertsComputeBitwiseLikeTheCoordinator) {
  v1::IngestReply reply;
  const grpc::Status s = IngestExperts(stub_.get(), *model_, fingerprint_, {}, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.stored_size(), model_->config().n_layer * model_->config().n_expert);
  ExpectComputeEqualsLocal();
  // Sending them again is acknowledged without a change (same bytes).
  v1::IngestReply again;
  EXPECT_TRUE(IngestExperts(stub_.get(), *model_, fingerprint_, {}, &again).ok());
}

TEST_F(GptOssNodeTest, ImportedExpertsComputeBitwiseLikeTheCoordinator) {
  v1::ImportRequest request;
  request.set_gguf_path(path_);
  request.set_model_fingerprint(fingerprint_);
  v1::ImportReply reply;
  auto context = MakeContext();
  const grpc::Status s = stub_->Import(context.get(), request, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.imported(), model_->config().n_layer * model_->config().n_expert);
  ExpectComputeEqualsLocal();
}

// Without its biases an expert is another function: a sender that leaves
// them out cannot match the content hash of one that sends them, and a bias
// header of the wrong shape or type is refused.
TEST_F(GptOssNodeTest, MalformedBiasHeadersAreRefused) {
  const moe::ExpertWeights& w = model_->experts()[0][0];
  auto header = [&] {
    v1::IngestChunk h;
    h.mutable_key()->set_model_fingerprint(fingerprint_);
    for (auto [m, t] : {std::pair{&w.gate, h.mutable_gate()}, std::pair{&w.up, h.mutable_up()},
                        std::pair{&w.down, h.mutable_down()}}) {
      t->set_ggml_type(static_cast<uint32_t>(m->type));
      t->add_dims(m->cols);
      t->add_dims(m->rows);
    }
    h.mutable_gate_bias()->set_ggml_type(0);
    h.mutable_gate_bias()->add_dims(w.gate.rows);
    h.mutable_activation()->set_kind(v1::ACTIVATION_SWIGLU_OAI);
    h.mutable_activation()->set_alpha(1.702f);
    h.mutable_activation()->set_limit(7.0f);
    const uint64_t total = w.bytes() + static_cast<uint64_t>(w.gate.rows) * 4;
    h.set_total_bytes(total);
    return h;
  };
  std::vector<std::pair<std::string, v1::IngestChunk>> bad;
  v1::IngestChunk wrong_dims = header();
  wrong_dims.mutable_gate_bias()->set_dims(0, w.gate.rows + 1);
  bad.emplace_back("gate_bias", wrong_dims);
  v1::IngestChunk wrong_type = header();
  wrong_type.mutable_gate_bias()->set_ggml_type(1);  // F16
  bad.emplace_back("gate_bias", wrong_type);
  v1::IngestChunk two_dims = header();
  two_dims.mutable_gate_bias()->add_dims(1);
  bad.emplace_back("gate_bias", two_dims);
  v1::IngestChunk no_limit = header();
  no_limit.mutable_activation()->set_limit(0.0f);
  bad.emplace_back("clamped SwiGLU", no_limit);
  v1::IngestChunk unknown = header();
  unknown.mutable_activation()->set_kind(static_cast<v1::Activation>(7));
  bad.emplace_back("unknown activation", unknown);
  v1::IngestChunk short_total = header();
  short_total.set_total_bytes(w.bytes());  // biases not counted
  bad.emplace_back("total_bytes", short_total);
  for (const auto& [needle, chunk] : bad) {
    auto context = MakeContext();
    v1::IngestReply reply;
    std::unique_ptr<grpc::ClientWriter<v1::IngestChunk>> writer =
        stub_->Ingest(context.get(), &reply);
    writer->Write(chunk);
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << needle;
    EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
  }
}

}  // namespace
}  // namespace colibri::expert_node
