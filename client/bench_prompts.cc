#include "client/bench_prompts.h"

#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace colibri::client {

const std::vector<std::string>& BuiltInBenchPrompts() {
  static const std::vector<std::string>* const kPrompts = new std::vector<std::string>{
      "Rename the variable count to total in this C++ function: int Sum(const "
      "std::vector<int>& v) { int count = 0; for (int x : v) count += x; return count; }",
      "Quote the first sentence of the text below exactly, then explain it: In the "
      "beginning the river ran quietly past the mill.",
      "Tell the story of a shepherd who crossed the river at night with his flock.",
      "Why does bread rise in a warm kitchen and stay flat in a cold one?",
      "Write a Python function that returns the n-th Fibonacci number iteratively.",
      "Translate into French: the train to the coast leaves at seven in the morning.",
      "Summarize the causes of the First World War in three short paragraphs.",
      "List five ways to keep a vegetable garden watered during a dry summer.",
      "Explain to a child how a rainbow forms after the rain.",
      "Describe the sound of a market square on a busy Saturday morning.",
      "Compose a short poem about the first snow falling on a quiet village.",
      "Given the JSON {\"name\": \"Ada\", \"age\": 36}, write the SQL that inserts it "
      "into a table people(name, age).",
      "Once upon a time a lighthouse keeper found a letter inside a bottle.",
      "How many kilometres can a cyclist ride in three hours at twenty-two kilometres "
      "per hour? Show the steps.",
      "Fix the bug in this loop: for (int i = 0; i <= n; ++i) sum += values[i];",
      "Dear committee, I am writing to ask for an extension of the deadline because",
  };
  return *kPrompts;
}

absl::StatusOr<std::vector<std::string>> ReadBenchPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("prompts file ", path, ": cannot open it"));
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    prompts.push_back(std::move(line));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("prompts file ", path, ": read failed"));
  if (prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("prompts file ", path, " holds no prompt"));
  }
  return prompts;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> TokenizeBenchPrompts(
    const std::vector<std::string>& texts, int length, const TokenizeFunction& tokenize) {
  if (texts.empty()) return absl::InvalidArgumentError("no bench prompts");
  if (length < 1) return absl::InvalidArgumentError("prompt length must be >= 1");
  std::vector<std::vector<int32_t>> out;
  out.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenize(texts[i], /*add_special=*/true);
    if (!ids.ok()) return ids.status();
    if (static_cast<int>(ids->size()) < length) {
      absl::StatusOr<std::vector<int32_t>> more = tokenize(" " + texts[i], /*add_special=*/false);
      if (!more.ok()) return more.status();
      if (more->empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bench prompt ", i + 1, " has no tokens: \"", texts[i], "\""));
      }
      while (static_cast<int>(ids->size()) < length) {
        ids->insert(ids->end(), more->begin(), more->end());
      }
    }
    ids->resize(length);
    out.push_back(*std::move(ids));
  }
  return out;
}

}  // namespace colibri::client
