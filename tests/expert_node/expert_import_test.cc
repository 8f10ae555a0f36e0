// ExpertImporter on a store, no server: imports from the fixture GGUF,
// refuses what is not a model without saying why, stops at shutdown.
#include "expert_node/expert_import.h"

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_fixture.h"
#include "tests/expert_node/node_test_client.h"

namespace colibri::expert_node {
namespace {

using testing::Key;
using testing::LocalOutputs;
using testing::TempDir;

class ExpertImportTest : public testing::TinyNodeTest {
 protected:
  absl::Status Import(const v1::ImportRequest& request, v1::ImportReply* reply) {
    return parts_.importer->Import(request, reply);
  }
};

TEST_F(ExpertImportTest, ImportsWhatIsAskedAndSkipsWhatIsStored) {
  const arch::ModelConfig& config = m_.model->config();
  v1::ImportReply reply;
  {
    v1::ImportRequest request;
    request.set_gguf_path(m_.path);
    request.set_model_fingerprint("not-the-fingerprint");
    EXPECT_TRUE(absl::IsInvalidArgument(Import(request, &reply)));
  }
  {
    v1::ImportRequest request;
    request.set_gguf_path(m_.path);
    *request.add_experts() = Key(m_.fingerprint, config.n_layer, 0);
    EXPECT_TRUE(absl::IsInvalidArgument(Import(request, &reply)));
  }
  EXPECT_EQ(parts_.store->experts_stored(), 0u);
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  request.set_model_fingerprint(m_.fingerprint);
  *request.add_experts() = Key(m_.fingerprint, 1, 2);
  ASSERT_TRUE(Import(request, &reply).ok());
  EXPECT_EQ(reply.imported(), 1);
  EXPECT_EQ(reply.bytes_stored(), m_.model->experts()[1][2].bytes());
  request.clear_experts();  // all
  ASSERT_TRUE(Import(request, &reply).ok());
  EXPECT_EQ(reply.imported(), config.n_layer * config.n_expert - 1);
  ASSERT_TRUE(Import(request, &reply).ok());
  EXPECT_EQ(reply.imported(), 0);  // everything already stored
  // The model's shape is registered, and what was imported computes.
  absl::StatusOr<ModelInfo> model = parts_.registry->Find(m_.fingerprint);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->n_layer, config.n_layer);
  EXPECT_EQ(model->n_expert, config.n_expert);
  EXPECT_EQ(model->n_embd, config.n_embd);
  const v1::ComputeLayerRequest compute =
      testing::RandomRequest(*m_.model, m_.fingerprint, 1, 4, 2, 99);
  v1::ComputeLayerReply compute_reply;
  ASSERT_TRUE(parts_.compute->Compute(compute, &compute_reply).ok());
  testing::ExpectBitwiseEqual(compute_reply, LocalOutputs(*m_.model, compute),
                              compute.routes_size(), config.n_embd);
}

// A caller learns nothing about a path it cannot import (whether it exists,
// is readable, is a GGUF), and an import never blocks on a FIFO.
// With a report interval of 0, Progress hears the counts before the first
// expert and after each one: bytes done rise to the total, which is the
// experts' bytes; the final reply has the same counts.
TEST_F(ExpertImportTest, ProgressCountsRiseToTheTotal) {
  ExpertImporter::Options options;
  options.report_interval = absl::ZeroDuration();
  ExpertImporter importer(options, parts_.store.get(), parts_.registry.get());
  const arch::ModelConfig& config = m_.model->config();
  uint64_t total = 0;
  for (const auto& layer : m_.model->experts()) {
    for (const moe::ExpertWeights& w : layer) total += w.bytes();
  }
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  std::vector<v1::ImportReply> seen;
  v1::ImportReply reply;
  ASSERT_TRUE(importer
                  .Import(request, &reply,
                          [&seen](const v1::ImportReply& so_far) { seen.push_back(so_far); })
                  .ok());
  ASSERT_EQ(seen.size(), static_cast<size_t>(config.n_layer * config.n_expert) + 1);
  EXPECT_EQ(seen.front().bytes_done(), 0u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].bytes_total(), total);
    if (i > 0) {
      EXPECT_GT(seen[i].bytes_done(), seen[i - 1].bytes_done());
      EXPECT_EQ(seen[i].imported(), static_cast<int32_t>(i));
    }
  }
  EXPECT_EQ(seen.back().bytes_done(), total);
  EXPECT_EQ(reply.bytes_done(), total);
  EXPECT_EQ(reply.bytes_total(), total);
  EXPECT_EQ(reply.imported(), config.n_layer * config.n_expert);
}

TEST_F(ExpertImportTest, WhatIsNotAModelGetsOnlyCannotImport) {
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
    const absl::Status s = Import(request, &reply);
    EXPECT_TRUE(absl::IsNotFound(s)) << path << ": " << s;
    EXPECT_EQ(s.message(), "cannot import " + path);
  }
  // A path with control bytes comes back escaped.
  v1::ImportRequest request;
  request.set_gguf_path("/x\n\x1b[31m");
  v1::ImportReply reply;
  EXPECT_EQ(Import(request, &reply).message(), "cannot import /x\\x0a\\x1b[31m");
  EXPECT_EQ(parts_.store->experts_stored(), 0u);
}

// Shutdown does not wait for a long import: it stops before the next expert.
TEST_F(ExpertImportTest, StopsAtShutdown) {
  parts_.importer->BeginShutdown();
  v1::ImportRequest request;
  request.set_gguf_path(m_.path);
  v1::ImportReply reply;
  EXPECT_TRUE(absl::IsUnavailable(Import(request, &reply)));
  EXPECT_EQ(parts_.store->experts_stored(), 0u);
}

}  // namespace
}  // namespace colibri::expert_node
