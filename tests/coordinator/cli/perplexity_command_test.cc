// `colibri-coordinator perplexity` on the committed demo model: its held-out
// loss matches the figure PyTorch computed for the same tokens and windows
// (scripts/demo-model/provenance.json, written by scripts/demo-model/), within
// the error that Q8_0 quantization adds; and its errors are clear.
#include <cmath>
#include <fstream>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

// Q8_0 (8-bit blocks of 32) moves the loss of this model by far less than this
// many nats; a wrong export (layout, RoPE, norms, routing) moves it by > 0.5.
constexpr double kQuantizationTolerance = 0.01;

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string DemoDir() { return std::string(COLIBRI_SOURCE_DIR) + "/scripts/demo-model/"; }

// The value of "key: value" in a command's output, or NaN.
double Figure(const std::string& out, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(key + ": ([0-9.]+)"))) return std::nan("");
  return std::stod(m[1]);
}

TEST(PerplexityCommandTest, DemoModelMatchesPyTorchOnHeldOutText) {
  std::ifstream in(DemoDir() + "provenance.json");
  ASSERT_TRUE(in) << "scripts/demo-model/provenance.json is missing";
  const nlohmann::json prov = nlohmann::json::parse(in);
  const nlohmann::json& held = prov.at("held_out");
  const testing::CommandResult r = testing::RunCommand(
      {Coordinator(), "perplexity", "--model", DemoDir() + prov.at("model_file").get<std::string>(),
       "--text-file", DemoDir() + "heldout.txt", "--ctx", std::to_string(held.at("ctx").get<int>()),
       "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Figure(r.out, "scored tokens"), held.at("scored_tokens").get<double>()) << r.out;
  const double nll = Figure(r.out, "mean nll");
  EXPECT_NEAR(nll, held.at("pytorch_f16_nll").get<double>(), kQuantizationTolerance) << r.out;
  EXPECT_NEAR(Figure(r.out, "perplexity"), std::exp(nll), 1e-3 * std::exp(nll)) << r.out;
}

TEST(PerplexityCommandTest, MaxWindowsLimitsTheScoredTokens) {
  const testing::CommandResult r = testing::RunCommand(
      {Coordinator(), "perplexity", "--model", DemoDir() + "colibri-demo-kjv-q8_0.gguf",
       "--text-file", DemoDir() + "heldout.txt", "--ctx", "32", "--max-windows", "3", "--threads",
       "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("windows: 3 of 32 tokens\n"), std::string::npos) << r.out;
  EXPECT_EQ(Figure(r.out, "scored tokens"), 96) << r.out;
}

TEST(PerplexityCommandTest, ShortTextAndMissingFileAreErrors) {
  const std::string text = ::testing::TempDir() + "/short.txt";
  std::ofstream(text) << "And God said";
  testing::CommandResult r = testing::RunCommand({Coordinator(), "perplexity", "--model",
                                                  DemoDir() + "colibri-demo-kjv-q8_0.gguf",
                                                  "--text-file", text, "--ctx", "64"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("fewer than one window of 65"), std::string::npos) << r.err;

  r = testing::RunCommand({Coordinator(), "perplexity", "--model",
                           DemoDir() + "colibri-demo-kjv-q8_0.gguf", "--text-file",
                           text + ".absent"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot read text file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace colibri
