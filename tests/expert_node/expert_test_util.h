// Small helpers shared by the expert node tests: synthetic experts and
// temporary folders.
#ifndef COLIBRI_TESTS_EXPERT_NODE_EXPERT_TEST_UTIL_H_
#define COLIBRI_TESTS_EXPERT_NODE_EXPERT_TEST_UTIL_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "expert_node/expert_record.h"

namespace colibri::expert_node::testing {

// A synthetic F32 expert: gate/up [n_ff][n_embd], down [n_embd][n_ff].
struct SyntheticExpert {
  ExpertLayout layout;
  std::vector<uint8_t> gate, up, down;

  absl::Span<const uint8_t> gate_span() const { return gate; }
  absl::Span<const uint8_t> up_span() const { return up; }
  absl::Span<const uint8_t> down_span() const { return down; }
};

inline SyntheticExpert MakeExpert(int64_t n_embd, int64_t n_ff, uint32_t seed) {
  SyntheticExpert e;
  auto fill = [&](std::vector<uint8_t>* bytes, int64_t rows, int64_t cols, uint32_t s) {
    std::mt19937 rng(s);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(rows * cols);
    for (float& v : values) v = dist(rng);
    bytes->resize(values.size() * sizeof(float));
    std::memcpy(bytes->data(), values.data(), bytes->size());
    return TensorLayout{ops::TensorType::kF32, rows, cols, bytes->size()};
  };
  e.layout.gate = fill(&e.gate, n_ff, n_embd, seed * 3 + 0);
  e.layout.up = fill(&e.up, n_ff, n_embd, seed * 3 + 1);
  e.layout.down = fill(&e.down, n_embd, n_ff, seed * 3 + 2);
  e.layout.xxh64 = PayloadChecksum(e.gate, e.up, e.down);
  return e;
}

// A fresh empty folder under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "colibri-node-XXXXXX").string();
    path_ = ::mkdtemp(templ.data()) != nullptr ? templ : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace colibri::expert_node::testing

#endif  // COLIBRI_TESTS_EXPERT_NODE_EXPERT_TEST_UTIL_H_
