// scripts/cluster-up.sh and cluster-down.sh: a 2-node cluster from a fixture
// model generates text, and cluster-down stops every process it recorded; the
// README's default (3 nodes, the committed demo model trained on the King James
// Bible) streams English: valid UTF-8 whose words are mostly words of the
// training text.
#include <signal.h>
#include <stdlib.h>

#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/unicode_util.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

bool Alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

std::string Scripts() { return std::string(COLIBRI_SOURCE_DIR) + "/scripts/"; }

std::string StateDir() {
  std::string templ = ::testing::TempDir() + "/cluster_up.XXXXXX";
  EXPECT_NE(::mkdtemp(templ.data()), nullptr);
  return templ + "/state";
}

// Runs cluster-up.sh with prebuilt binaries; returns the generated text.
std::string ClusterUp(const std::vector<std::string>& args) {
  ::setenv("COLIBRI_BUILD_DIR", testing::BinaryPath("").c_str(), 1);
  ::setenv("COLIBRI_SKIP_BUILD", "1", 1);
  std::vector<std::string> argv = {"/bin/bash", Scripts() + "cluster-up.sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  const testing::CommandResult up = testing::RunCommand(argv);
  EXPECT_EQ(up.exit_code, 0) << up.out << up.err;
  const std::string marker = "generated through the cluster:\n";
  const size_t at = up.out.find(marker);
  EXPECT_NE(at, std::string::npos) << up.out << up.err;
  if (at == std::string::npos) return "";
  const std::string text = up.out.substr(at + marker.size());
  EXPECT_NE(text.find_first_not_of(" \n"), std::string::npos) << "no generated text: " << up.out;
  return text;
}

TEST(ClusterScriptsTest, ClusterUpGeneratesTextAndClusterDownStopsEverything) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const std::string dir = StateDir();
  const std::string scripts = Scripts();
  const std::string model = testing::FixturesDir() + "/models/qwen2moe-tiny-q8_0.gguf";
  ClusterUp({"--model", model, "--nodes", "2", "--dir", dir, "--prompt", "Once upon a time",
             "--n-predict", "12"});

  std::vector<int> pids;
  for (const std::string name : {"coordinator", "node1", "node2"}) {
    std::ifstream in(dir + "/pids/" + name + ".pid");
    int pid = 0;
    ASSERT_TRUE(in >> pid) << name;
    EXPECT_TRUE(Alive(pid)) << name;
    pids.push_back(pid);
  }

  const testing::CommandResult down =
      testing::RunCommand({"/bin/bash", scripts + "cluster-down.sh", "--dir", dir});
  ASSERT_EQ(down.exit_code, 0) << down.out << down.err;
  for (int pid : pids) EXPECT_FALSE(Alive(pid)) << pid;
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/pids"));

  const testing::CommandResult again =
      testing::RunCommand({"/bin/bash", scripts + "cluster-down.sh", "--dir", dir});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("nothing running"), std::string::npos) << again.out;
}

// The lower-cased runs of ASCII letters in text.
std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  return words;
}

// What the README's first command runs: the committed demo model, so the text
// must be recognisably English. scripts/demo-model/words.txt is the vocabulary of the
// training text (written by scripts/demo-model/, not by colibri); a
// random-weight model's output has far fewer than 80% of its words there.
TEST(ClusterScriptsTest, DefaultDemoClusterStreamsEnglish) {
  const std::string dir = StateDir();
  const std::string text = ClusterUp({"--dir", dir});
  EXPECT_EQ(tokenizer::ToValidUtf8(text), text);

  std::ifstream in(Scripts() + "../scripts/demo-model/words.txt");
  ASSERT_TRUE(in) << "scripts/demo-model/words.txt is missing";
  std::unordered_set<std::string> dictionary;
  for (std::string w; in >> w;) dictionary.insert(w);
  ASSERT_GT(dictionary.size(), 5000u);
  std::vector<std::string> words = Words(text);
  if (!words.empty()) words.pop_back();  // the last word may be cut off by -n
  ASSERT_GE(words.size(), 15u) << text;
  size_t known = 0;
  for (const std::string& w : words) known += dictionary.count(w);
  EXPECT_GE(known, words.size() * 8 / 10)
      << known << " of " << words.size() << " words are English: " << text;
  const testing::CommandResult down =
      testing::RunCommand({"/bin/bash", Scripts() + "cluster-down.sh", "--dir", dir});
  EXPECT_EQ(down.exit_code, 0) << down.out << down.err;
}

}  // namespace
}  // namespace colibri
