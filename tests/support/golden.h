// Reading the golden reference outputs of ../shared/fixtures/golden and the
// acceptance rule of the fixtures' README.
//
//   d(a, b) = max_i |a_i - b_i| / std(b), at one position.
//   Exact path: at every compared position d(ours, exact) <= 1e-3 and the same
//   argmax as exact.
//   Fast path: over all compared positions of a model, mean and max of
//   d(ours, exact) <= 1.25 x the same figures for llama.cpp + 1e-3.
// For the F32 model the llama.cpp files are the exact reference.
#ifndef COLIBRI_TESTS_SUPPORT_GOLDEN_H_
#define COLIBRI_TESTS_SUPPORT_GOLDEN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/support/paths.h"

namespace colibri::testing {

// The four fixture models, without ".gguf".
const std::vector<std::string>& GoldenModels();
const std::vector<std::string>& GoldenPrompts();  // english, code_unicode, long
// The models of the families added later (glm4moe, deepseek2, gpt-oss when MXFP4
// is supported), without ".gguf".
const std::vector<std::string>& FamilyGoldenModels();
// GoldenModels() then FamilyGoldenModels().
std::vector<std::string> AllGoldenModels();

using Row = std::vector<float>;

struct GoldenCase {
  std::string model;  // e.g. "mixtral-tiny-q4_k_m"
  std::string prompt;
  std::string model_path;
  int n_vocab = 0;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> greedy_tokens;
  // Logits by position (row at p = after feeding the token at position p):
  // llama.cpp's and the exact float64 reference's (the same as llama.cpp's for
  // the F32 model, which has no .exact files).
  std::map<int, Row> llama;
  std::map<int, Row> exact;
};

// Loads <golden>/<model>.<prompt>.*; returns false with a message on failure.
bool LoadGoldenCase(const std::string& model, const std::string& prompt, GoldenCase* out,
                    std::string* error);

double Distance(const Row& ours, const Row& reference);  // d(a, b) above
int Argmax(const Row& row);

// Distances of `ours` (by position) to the exact reference at every position
// the case compares. Missing positions in `ours` are reported in *error.
struct Comparison {
  std::vector<double> ours;   // d(ours, exact) per compared position
  std::vector<double> llama;  // d(llama.cpp, exact) at the same positions
  std::vector<int> positions;
  std::vector<bool> argmax_equal;  // ours vs exact
};
bool Compare(const GoldenCase& c, const std::map<int, Row>& ours, Comparison* out,
             std::string* error);

// Reads a file of little-endian float32 rows of n_vocab.
bool ReadRows(const std::string& path, int n_vocab, std::vector<Row>* rows, std::string* error);

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_GOLDEN_H_
