#include "coordinator/cli/schema_check_command.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_file.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/token_trie.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Totals {
  size_t cases = 0;
  size_t compiled = 0;
  size_t valid = 0;
  size_t valid_accepted = 0;
  size_t invalid = 0;
  size_t invalid_accepted = 0;
  std::vector<double> mask_us;  // every mask of every case
};

double Round(double x, double unit) { return std::round(x / unit) * unit; }

std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Microseconds on the wall clock or the calling thread's CPU clock.
double NowUs(bool cpu_time) {
  if (cpu_time) {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
  }
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

// Feeds `text`'s tokens through `matcher`, timing each step's mask. When it
// refuses, `refused_at` (if given) is the byte offset of the refused token, or
// the text's length when the end is not accepted.
absl::StatusOr<bool> Walk(const tokenizer::Tokenizer& tok, grammar::GrammarMatcher* matcher,
                          const std::string& text, bool cpu_time, std::vector<double>* mask_us,
                          size_t* refused_at = nullptr) {
  tokenizer::EncodeOptions enc;
  COLIBRI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text, enc));
  matcher->Reset();
  size_t offset = 0;
  if (refused_at != nullptr) *refused_at = text.size();
  for (size_t i = 0; i <= ids.size(); ++i) {
    const double t0 = NowUs(cpu_time);
    absl::StatusOr<const grammar::TokenBitmask*> mask = matcher->ComputeMask();
    const double t1 = NowUs(cpu_time);
    if (!mask.ok()) return mask.status();
    mask_us->push_back(t1 - t0);
    if (i == ids.size()) break;
    if (!(*mask)->Allowed(ids[i])) {
      if (refused_at != nullptr) *refused_at = offset;
      return false;
    }
    COLIBRI_RETURN_IF_ERROR(matcher->AcceptToken(ids[i]));
    offset += tok.TokenToPiece(ids[i], /*render_special=*/false).size();
  }
  return matcher->IsAccepting();
}

Json CheckCase(const std::string& path, const tokenizer::Tokenizer& tok,
               const std::shared_ptr<const grammar::TokenTrie>& trie,
               const SchemaCheckOptions& options, Totals* totals) {
  const bool cpu_time = options.cpu_time;
  Json line;
  line["case"] = Basename(path);
  line["compiled"] = false;
  line["error"] = nullptr;
  line["tests"] = Json::array();
  line["compile_ms"] = nullptr;
  line["mask_us_mean"] = nullptr;
  line["mask_us_p99"] = nullptr;
  ++totals->cases;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    line["error"] = absl::StrCat("cannot read ", path);
    return line;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::string body = text.str();
  Json doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("schema")) {
    line["error"] = "case file: not a JSON object with a \"schema\"";
    return line;
  }
  std::vector<std::pair<bool, const Json*>> tests;
  if (auto it = doc.find("tests"); it != doc.end() && it->is_array()) {
    for (const Json& t : *it) {
      if (!t.is_object() || !t.contains("data")) continue;
      auto valid = t.find("valid");
      tests.emplace_back(valid != t.end() && *valid == true, &t["data"]);
    }
  }
  const auto t0 = Clock::now();
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
      grammar::CompileJsonSchema(doc["schema"], options.compile);
  line["compile_ms"] =
      Round(std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), 0.001);
  std::vector<double> mask_us;
  std::optional<grammar::GrammarMatcher> matcher;
  if (compiled.ok()) {
    line["compiled"] = true;
    ++totals->compiled;
    matcher.emplace(*compiled, trie, grammar::MatcherOptions());
  } else {
    line["error"] = std::string(compiled.status().message());
  }
  for (const auto& [valid, data] : tests) {
    bool accepted = false;
    Json test{{"valid", valid}, {"accepted", false}};
    if (matcher) {
      const std::string instance = data->dump(-1, ' ', false, Json::error_handler_t::replace);
      size_t refused_at = 0;
      absl::StatusOr<bool> walked = Walk(tok, &*matcher, instance, cpu_time, &mask_us, &refused_at);
      if (walked.ok() && !*walked && valid && options.explain) {
        test["refused_at"] = refused_at;
        const size_t from = refused_at > 60 ? refused_at - 60 : 0;
        test["near"] =
            instance.substr(from, refused_at - from) + "|" + instance.substr(refused_at, 40);
      }
      if (walked.ok()) {
        accepted = *walked;
      } else if (line["error"].is_null()) {
        line["error"] = std::string(walked.status().message());
      }
    }
    if (matcher) (valid ? totals->valid : totals->invalid) += 1;
    if (accepted) (valid ? totals->valid_accepted : totals->invalid_accepted) += 1;
    test["accepted"] = accepted;
    line["tests"].push_back(std::move(test));
  }
  if (!mask_us.empty()) {
    double sum = 0;
    for (double us : mask_us) sum += us;
    line["mask_us_mean"] = Round(sum / static_cast<double>(mask_us.size()), 0.01);
    std::vector<double> sorted = mask_us;
    const size_t k = std::min(sorted.size() - 1, static_cast<size_t>(std::ceil(0.99 * static_cast<double>(sorted.size()))) - 1);
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end());
    line["mask_us_p99"] = Round(sorted[k], 0.01);
    totals->mask_us.insert(totals->mask_us.end(), mask_us.begin(), mask_us.end());
  }
  return line;
}

std::string Percent(size_t part, size_t whole) {
  return whole == 0 ? "-" : absl::StrFormat("%.2f%%", 100.0 * static_cast<double>(part) /
                                                          static_cast<double>(whole));
}

}  // namespace

absl::Status RunSchemaCheck(const SchemaCheckOptions& options, std::ostream& out,
                            std::ostream& log) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                           gguf::GgufFile::Open(options.vocab_path));
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                           tokenizer::Tokenizer::FromGguf(*file));
  std::shared_ptr<const grammar::TokenTrie> trie = grammar::TokenTrie::Build(*tok);
  // Warm-up, not timed: the first masks of a process run on cold caches and
  // would inflate the first case's figures.
  if (auto warm = grammar::CompileJsonSchemaText(R"({"type":"object"})", options.compile);
      warm.ok()) {
    grammar::GrammarMatcher matcher(*warm, trie, grammar::MatcherOptions());
    std::vector<double> ignored;
    (void)Walk(*tok, &matcher, R"({"warm":["up",1,{"a":null}]})", options.cpu_time,
               &ignored);
  }
  Totals totals;
  for (const std::string& path : options.case_files) {
    out << CheckCase(path, *tok, trie, options, &totals)
               .dump(-1, ' ', false, Json::error_handler_t::replace)
        << "\n";
    out.flush();
  }
  std::vector<double>& us = totals.mask_us;
  double mean = 0;
  double p99 = 0;
  if (!us.empty()) {
    for (double x : us) mean += x;
    mean /= static_cast<double>(us.size());
    std::sort(us.begin(), us.end());
    p99 = us[std::min(us.size() - 1,
                      static_cast<size_t>(std::ceil(0.99 * static_cast<double>(us.size()))) - 1)];
  }
  log << absl::StrFormat(
      "schema-check: %zu cases, %zu compiled (%s); in compiled cases: valid accepted %zu/%zu "
      "(%s), invalid accepted %zu/%zu; %zu masks (%s): mean %.1f us, p99 %.1f us (limits: 50 us "
      "mean, 500 us p99)\n",
      totals.cases, totals.compiled, Percent(totals.compiled, totals.cases),
      totals.valid_accepted, totals.valid, Percent(totals.valid_accepted, totals.valid),
      totals.invalid_accepted, totals.invalid, us.size(),
      options.cpu_time ? "CPU time" : "wall clock", mean, p99);
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
