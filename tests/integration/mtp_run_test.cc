// `colibri-coordinator run --draft mtp` as a user runs it, locally and with
// the main layers' experts on 2 expert nodes: the same token ids and logits
// rows as plain decoding, greedy and seeded, drafts accepted on the echo model
// (tests/support/tiny_nextn_model.h), and a clear refusal for a model without
// a NextN block.
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/node_process.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"
#include "tests/support/tiny_nextn_model.h"

namespace colibri {
namespace {

using testing::CommandResult;
using testing::NodeProcess;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The accepted-draft count of run's "speculation (mtp)" line; -1 if absent.
int64_t AcceptedDrafts(const std::string& err) {
  std::smatch m;
  if (std::regex_search(err, m, std::regex("speculation \\(mtp\\):.* ([0-9]+) accepted"))) {
    return std::stoll(m[1]);
  }
  return -1;
}

std::vector<std::string> RunArgs(const std::string& model, bool seeded) {
  std::vector<std::string> a = {testing::BinaryPath("coordinator/colibri-coordinator"),
                                "run",
                                "--model",
                                model,
                                "--prompt-tokens",
                                "1,7,3,30,12,5,9,22",
                                "--n-predict",
                                "24",
                                "--threads",
                                "2",
                                "--print-token-ids",
                                "--ignore-eos"};
  if (seeded) {
    a.insert(a.end(), {"--temp", "0.7", "--seed", "7", "--repeat-penalty", "1.1"});
  } else {
    a.insert(a.end(), {"--temp", "0"});
  }
  return a;
}

TEST(MtpRunTest, SameTokensAndLogitsLocallyAndOnNodes) {
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  std::vector<const NodeProcess*> views;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<NodeProcess>(
        testing::MakeTempDir("mtp-node" + std::to_string(i)), "node-" + std::to_string(i)));
    std::string error;
    ASSERT_TRUE(nodes.back()->Start(0, &error)) << error;
    views.push_back(nodes.back().get());
  }
  const std::string dir = testing::MakeTempDir("mtp-run");
  int64_t accepted_echo = 0;
  for (bool echo : {false, true}) {
    testing::TinyNextnOptions options;
    options.echo = echo;
    const std::string model = dir + (echo ? "/echo.gguf" : "/random.gguf");
    ASSERT_TRUE(testing::TinyNextnModel(options).WriteFile(model).ok());
    for (bool seeded : {false, true}) {
      SCOPED_TRACE(std::string(echo ? "echo" : "random") + (seeded ? " seeded" : " greedy"));
      std::vector<std::string> plain_args = RunArgs(model, seeded);
      plain_args.insert(plain_args.end(), {"--logits-out", dir + "/plain.f32"});
      const CommandResult plain = testing::RunCommand(plain_args);
      ASSERT_EQ(plain.exit_code, 0) << plain.err;
      const std::string reference = ReadAll(dir + "/plain.f32");
      EXPECT_FALSE(reference.empty());
      for (bool on_nodes : {false, true}) {
        SCOPED_TRACE(on_nodes ? "nodes" : "local");
        std::vector<std::string> a = RunArgs(model, seeded);
        a.insert(a.end(), {"--draft", "mtp", "--draft-max", "4", "--draft-fixed", "--logits-out",
                           dir + "/mtp.f32"});
        if (on_nodes) a.insert(a.end(), {"--nodes", testing::JoinAddresses(views)});
        const CommandResult spec = testing::RunCommand(a);
        ASSERT_EQ(spec.exit_code, 0) << spec.err;
        EXPECT_EQ(plain.out, spec.out);
        EXPECT_TRUE(ReadAll(dir + "/mtp.f32") == reference) << "logits differ";
        const int64_t accepted = AcceptedDrafts(spec.err);
        EXPECT_GE(accepted, 0) << spec.err;
        if (echo) accepted_echo += accepted;
      }
    }
  }
  EXPECT_GT(accepted_echo, 0);
}

// A glm4moe file made by colibri-make-model (GLM-4.5-Air's structure at a
// tiny width: a dense first layer, shared expert, partial RoPE, one NextN
// block): run --draft mtp gives the plain token ids and logits, locally and
// on 2 nodes, greedy and seeded.
TEST(MtpRunTest, Glm4MoeFilesFromTheMakerGiveThePlainOutput) {
  const std::string dir = testing::MakeTempDir("mtp-glm");
  const std::string model = dir + "/glm.gguf";
  const CommandResult made = testing::RunCommand(testing::TinyGlm4MoeMakeModelCommand(
      testing::BinaryPath("tools/colibri-make-model"), model));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  std::vector<const NodeProcess*> views;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<NodeProcess>(
        testing::MakeTempDir("mtp-glm-node" + std::to_string(i)), "node-" + std::to_string(i)));
    std::string error;
    ASSERT_TRUE(nodes.back()->Start(0, &error)) << error;
    views.push_back(nodes.back().get());
  }
  for (bool seeded : {false, true}) {
    SCOPED_TRACE(seeded ? "seeded" : "greedy");
    std::vector<std::string> plain_args = RunArgs(model, seeded);
    plain_args.insert(plain_args.end(), {"--logits-out", dir + "/plain.f32"});
    const CommandResult plain = testing::RunCommand(plain_args);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const std::string reference = ReadAll(dir + "/plain.f32");
    EXPECT_FALSE(reference.empty());
    for (bool on_nodes : {false, true}) {
      SCOPED_TRACE(on_nodes ? "nodes" : "local");
      std::vector<std::string> a = RunArgs(model, seeded);
      a.insert(a.end(), {"--draft", "mtp", "--draft-max", "3", "--draft-fixed", "--logits-out",
                         dir + "/mtp.f32"});
      if (on_nodes) a.insert(a.end(), {"--nodes", testing::JoinAddresses(views)});
      const CommandResult spec = testing::RunCommand(a);
      ASSERT_EQ(spec.exit_code, 0) << spec.err;
      EXPECT_EQ(plain.out, spec.out);
      EXPECT_TRUE(ReadAll(dir + "/mtp.f32") == reference) << "logits differ";
      EXPECT_NE(spec.err.find("glm4moe"), std::string::npos) << spec.err;
      std::smatch m;
      ASSERT_TRUE(std::regex_search(spec.err, m, std::regex("([0-9]+) drafted"))) << spec.err;
      EXPECT_GT(std::stoll(m[1]), 0) << spec.err;  // drafts were made and verified
    }
  }
}

TEST(MtpRunTest, RefusesAModelWithoutNextn) {
  testing::TinyNextnOptions options;
  options.n_nextn = 0;
  const std::string model = testing::MakeTempDir("mtp-plain") + "/plain.gguf";
  ASSERT_TRUE(testing::TinyNextnModel(options).WriteFile(model).ok());
  std::vector<std::string> a = RunArgs(model, false);
  a.insert(a.end(), {"--draft", "mtp"});
  const CommandResult r = testing::RunCommand(a);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("has no NextN/MTP block"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace colibri
