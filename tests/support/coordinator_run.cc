#include "tests/support/coordinator_run.h"

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/subprocess.h"

namespace colibri::testing {

std::string Coordinator() { return BinaryPath("coordinator/colibri-coordinator"); }

std::vector<std::string> GreedyRunArgs(const GoldenCase& c, int n_predict) {
  std::vector<int> ids(c.prompt_tokens.begin(), c.prompt_tokens.end());
  return {Coordinator(),
          "run",
          "--model",
          c.model_path,
          "--prompt-tokens",
          JoinIds(ids),
          "--n-predict",
          std::to_string(n_predict),
          "--temp",
          "0",
          "--threads",
          "2",
          "--print-token-ids",
          "--ignore-eos"};
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t Counter(const std::string& text, const std::string& prefix, const std::string& key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::smatch m;
    if (std::regex_search(line, m, std::regex(" " + key + "=([0-9]+)"))) {
      return std::stoll(m[1]);
    }
  }
  return -1;
}

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace colibri::testing
