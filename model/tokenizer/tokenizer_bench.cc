// Encoding speed of a GGUF vocabulary on a test corpus.
//
//   colibri_tokenizer_bench <vocab.gguf> <corpus.inp> [megabytes]
//
// The corpus is a llama.cpp test file (strings separated by lines
// "__ggml_vocab_test__"); its strings, joined by newlines, form a document that
// is repeated to about `megabytes` MB (default 8). Prints the speed of encoding
// the copies one call each (prompt-sized calls) and of one call on all of it, by
// wall time and by the thread's CPU time (meaningful on a loaded machine).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// CPU time of this thread: the speed on a shared machine, where wall time also
// counts the time other processes hold the core.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int Run(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s <vocab.gguf> <corpus.inp> [megabytes]\n", argv[0]);
    return 2;
  }
  double megabytes = 8;
  if (argc == 4 && (!absl::SimpleAtod(argv[3], &megabytes) || megabytes <= 0)) {
    std::fprintf(stderr, "bad megabytes: %s\n", argv[3]);
    return 2;
  }

  const auto load_start = Clock::now();
  auto file = colibri::gguf::GgufFile::Open(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().ToString().c_str());
    return 1;
  }
  auto tokenizer = colibri::tokenizer::Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const double load_seconds = Seconds(load_start);

  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[2]);
    return 1;
  }
  std::ostringstream raw;
  raw << in.rdbuf();
  const std::string corpus = raw.str();
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::string document;
  for (size_t pos = 0; pos < corpus.size();) {
    size_t next = corpus.find(separator, pos);
    if (next == std::string::npos) next = corpus.size();
    if (!document.empty()) document += '\n';
    document.append(corpus, pos, next - pos);
    pos = next + separator.size();
  }
  if (document.empty()) {
    std::fprintf(stderr, "%s holds no text\n", argv[2]);
    return 1;
  }
  const size_t copies = static_cast<size_t>(megabytes * 1e6 / document.size()) + 1;
  const double total_mb = static_cast<double>(copies * document.size()) / 1e6;

  const colibri::tokenizer::EncodeOptions options;
  auto warmup = (*tokenizer)->Encode(document, options);
  if (!warmup.ok()) {
    std::fprintf(stderr, "%s\n", warmup.status().ToString().c_str());
    return 1;
  }

  size_t tokens = 0;
  const auto calls_start = Clock::now();
  const double calls_cpu_start = ThreadCpuSeconds();
  for (size_t i = 0; i < copies; ++i) {
    auto ids = (*tokenizer)->Encode(document, options);
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", ids.status().ToString().c_str());
      return 1;
    }
    tokens += ids->size();
  }
  const double calls_seconds = Seconds(calls_start);
  const double calls_cpu = ThreadCpuSeconds() - calls_cpu_start;

  std::string all;
  all.reserve(copies * document.size());
  for (size_t i = 0; i < copies; ++i) all += document;
  const auto one_start = Clock::now();
  const double one_cpu_start = ThreadCpuSeconds();
  auto one = (*tokenizer)->Encode(all, options);
  const double one_seconds = Seconds(one_start);
  const double one_cpu = ThreadCpuSeconds() - one_cpu_start;
  if (!one.ok()) {
    std::fprintf(stderr, "%s\n", one.status().ToString().c_str());
    return 1;
  }

  std::printf("vocab %s: %d tokens, loaded in %.2f s\n", argv[1], (*tokenizer)->n_vocab(),
              load_seconds);
  std::printf("document: %zu bytes -> %zu tokens; %zu copies = %.1f MB\n", document.size(),
              warmup->size(), copies, total_mb);
  std::printf("one call per copy: %.2f MB/s wall, %.2f MB/s cpu (%.0f tokens/s cpu)\n",
              total_mb / calls_seconds, total_mb / calls_cpu,
              static_cast<double>(tokens) / calls_cpu);
  std::printf("one call on %.1f MB: %.2f MB/s wall, %.2f MB/s cpu (%zu tokens)\n", total_mb,
              total_mb / one_seconds, total_mb / one_cpu, one->size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
