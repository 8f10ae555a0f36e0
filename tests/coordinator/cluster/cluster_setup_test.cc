// EnsureExperts against fake nodes whose inventories say what they hold.
#include "coordinator/cluster/cluster_setup.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/gguf/gguf_fingerprint.h"
#include "tests/coordinator/cluster/fake_node_client.h"
#include "tests/support/paths.h"

namespace colibri::coordinator {
namespace {

// A node that stores whatever it is sent.
class StoringNodeClient : public testing::FakeNodeClient {
 public:
  using FakeNodeClient::FakeNodeClient;
  absl::StatusOr<std::unique_ptr<IngestStream>> StartIngest() override {
    class Stream : public IngestStream {
     public:
      absl::Status Write(const v1::IngestChunk& chunk) override {
        *reply_.add_stored() = chunk.key();
        return absl::OkStatus();
      }
      absl::StatusOr<v1::IngestReply> Finish() override { return reply_; }

     private:
      v1::IngestReply reply_;
    };
    return std::unique_ptr<IngestStream>(new Stream());
  }
};

// A node that imports what it is asked in three steps of a third each,
// streaming its counts (ImportWithProgress).
class ImportingNodeClient : public testing::FakeNodeClient {
 public:
  using FakeNodeClient::FakeNodeClient;
  absl::StatusOr<v1::ImportReply> ImportWithProgress(
      const v1::ImportRequest& request,
      const std::function<void(const v1::ImportReply&)>& progress) override {
    v1::ImportReply reply;
    reply.set_bytes_total(3000);
    for (int step = 0; step < 3; ++step) {
      reply.set_bytes_done(1000 * step);
      progress(reply);
    }
    reply.set_imported(request.experts_size());
    reply.set_bytes_stored(3000);
    reply.set_bytes_done(3000);
    return reply;
  }
};

class ClusterSetupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = colibri::testing::FixturesDir();
    if (dir.empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    absl::StatusOr<std::unique_ptr<arch::Model>> model =
        arch::Model::Open(dir + "/models/qwen3moe-tiny-f32.gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    fingerprint_ = *gguf::ModelFingerprint(model_->file());
  }

  // One node whose inventory lists every expert of the model; `hash` gives
  // each one's reported content hash (nullopt: none reported).
  std::unique_ptr<Cluster> OneNodeHoldingAll(
      const std::function<std::optional<uint64_t>(int, int)>& hash) {
    const arch::ModelConfig& config = model_->config();
    Cluster::Node node;
    node.address = "fake:1";
    node.node_id = "fake";
    for (int l = 0; l < config.n_layer; ++l) {
      v1::InventoryEntry* entry = node.inventory.add_entries();
      entry->set_model_fingerprint(fingerprint_);
      entry->set_layer(l);
      for (int e = 0; e < config.n_expert; ++e) {
        entry->add_experts(e);
        if (std::optional<uint64_t> h = hash(l, e); h.has_value()) entry->add_xxh64(*h);
      }
    }
    return OneNode(std::move(node), std::make_unique<testing::FakeNodeClient>("fake:1"));
  }

  // One node holding nothing, which stores what it is sent.
  std::unique_ptr<Cluster> OneEmptyNode() {
    Cluster::Node node;
    node.address = "fake:1";
    node.node_id = "fake";
    return OneNode(std::move(node), std::make_unique<StoringNodeClient>("fake:1"));
  }

  // A cluster of `node`, reached through `client`.
  std::unique_ptr<Cluster> OneNode(Cluster::Node node, std::unique_ptr<NodeClient> client) {
    const arch::ModelConfig& config = model_->config();
    std::vector<std::unique_ptr<NodeClient>> clients;
    clients.push_back(std::move(client));
    std::vector<Cluster::Node> nodes = {std::move(node)};
    ClusterOptions options;
    options.log = &log_;
    absl::StatusOr<std::unique_ptr<Cluster>> cluster =
        Cluster::Create(options, fingerprint_, std::vector<int>(config.n_layer, config.n_expert),
                        std::move(clients), std::move(nodes));
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    return cluster.ok() ? std::move(*cluster) : nullptr;
  }

  // The progress EnsureExperts writes while an empty node imports every
  // expert from its own GGUF, with a line per message of the node.
  std::string ImportProgress(bool in_place) {
    Cluster::Node node;
    node.address = "fake:1";
    node.node_id = "fake";
    auto cluster = OneNode(std::move(node), std::make_unique<ImportingNodeClient>("fake:1"));
    if (cluster == nullptr) return "";
    std::ostringstream out;
    ExpertSetupOptions options;
    options.node_gguf_path = "/models/m.gguf";
    options.progress = &out;
    options.progress_interval = absl::ZeroDuration();
    options.progress_in_place = in_place;
    absl::StatusOr<ExpertSetupResult> result = EnsureExperts(*cluster, *model_, options);
    EXPECT_TRUE(result.ok()) << result.status();
    const arch::ModelConfig& config = model_->config();
    EXPECT_EQ(result.ok() ? result->experts_imported : 0, config.n_layer * config.n_expert);
    return out.str();
  }

  // The progress EnsureExperts writes while streaming every expert to an
  // empty node, with a line per chunk.
  std::string IngestProgress(bool in_place) {
    auto cluster = OneEmptyNode();
    if (cluster == nullptr) return "";
    std::ostringstream out;
    ExpertSetupOptions options;
    options.chunk_bytes = 4096;
    options.progress = &out;
    options.progress_interval = absl::ZeroDuration();
    options.progress_in_place = in_place;
    absl::StatusOr<ExpertSetupResult> result = EnsureExperts(*cluster, *model_, options);
    EXPECT_TRUE(result.ok()) << result.status();
    EXPECT_GT(result.ok() ? result->experts_sent : 0, 0);
    return out.str();
  }

  uint64_t Hash(int l, int e) const { return ExpertChecksum(model_->experts()[l][e]); }

  std::unique_ptr<arch::Model> model_;
  std::string fingerprint_;
  std::ostringstream log_;
};

TEST_F(ClusterSetupTest, MatchingContentHashesNeedNothingSent) {
  auto cluster = OneNodeHoldingAll([&](int l, int e) { return Hash(l, e); });
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<ExpertSetupResult> result = EnsureExperts(*cluster, *model_, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->experts_sent, 0);
}

TEST_F(ClusterSetupTest, NodesThatReportNoHashesAreTrusted) {
  auto cluster = OneNodeHoldingAll([](int, int) { return std::nullopt; });
  ASSERT_NE(cluster, nullptr);
  EXPECT_TRUE(EnsureExperts(*cluster, *model_, {}).ok());
}

// Coordinator side: a node holding other bytes than the
// model's for an expert is refused, naming the node and the expert.
TEST_F(ClusterSetupTest, AContentHashMismatchIsDataLoss) {
  auto cluster = OneNodeHoldingAll(
      [&](int l, int e) { return l == 1 && e == 2 ? Hash(l, e) ^ 1 : Hash(l, e); });
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<ExpertSetupResult> result = EnsureExperts(*cluster, *model_, {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_NE(result.status().message().find("fake:1"), std::string::npos) << result.status();
  EXPECT_NE(result.status().message().find("L1E2"), std::string::npos) << result.status();
}

// Not a terminal: a line per update, no carriage return or escape.
TEST_F(ClusterSetupTest, IngestProgressIsPlainLinesOffATerminal) {
  const std::string out = IngestProgress(false);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  const std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_GT(lines.size(), 2u) << out;
  for (const std::string& line : lines) EXPECT_EQ(line.rfind("ingest fake:1: ", 0), 0u) << line;
  EXPECT_NE(lines.front().find("ETA"), std::string::npos) << out;
  EXPECT_NE(lines.back().find("(100%)"), std::string::npos) << out;
  EXPECT_NE(lines.back().find("done in"), std::string::npos) << out;
}

// A terminal: one line rewritten in place, ended once, when done.
TEST_F(ClusterSetupTest, IngestProgressRewritesOneLineOnATerminal) {
  const std::string out = IngestProgress(true);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one newline, at the end";
  EXPECT_EQ(out.rfind("\ringest fake:1: ", 0), 0u) << out.substr(0, 80);
  EXPECT_GT(std::count(out.begin(), out.end(), '\r'), 2);
  EXPECT_NE(out.find(", ETA "), std::string::npos);
  const size_t last = out.rfind('\r');
  EXPECT_NE(out.find("(100%)", last), std::string::npos) << out.substr(last);
  EXPECT_NE(out.find("done in", last), std::string::npos) << out.substr(last);
  EXPECT_EQ(out.substr(out.size() - 4), "\x1b[K\n");
}

// Import: the node's streamed counts become the same progress line as
// ingest's; plain lines off a terminal, the last one with the experts written.
TEST_F(ClusterSetupTest, ImportProgressIsPlainLinesOffATerminal) {
  const std::string out = ImportProgress(false);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  const std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << out;
  for (const std::string& line : lines) EXPECT_EQ(line.rfind("import fake:1: ", 0), 0u) << line;
  EXPECT_NE(lines[1].find("(33%)"), std::string::npos) << out;
  EXPECT_NE(lines[1].find("ETA"), std::string::npos) << out;
  const arch::ModelConfig& config = model_->config();
  EXPECT_NE(lines.back().find("(100%)"), std::string::npos) << out;
  EXPECT_NE(lines.back().find(absl::StrCat(config.n_layer * config.n_expert, " experts written")),
            std::string::npos)
      << out;
}

// A terminal: one line rewritten in place, ended once.
TEST_F(ClusterSetupTest, ImportProgressRewritesOneLineOnATerminal) {
  const std::string out = ImportProgress(true);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one newline, at the end";
  EXPECT_EQ(out.rfind("\rimport fake:1: ", 0), 0u) << out.substr(0, 80);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 4) << out;
  const size_t last = out.rfind('\r');
  EXPECT_NE(out.find("done in", last), std::string::npos) << out.substr(last);
}

}  // namespace
}  // namespace colibri::coordinator
