// libFuzzer harness for the tokenizers: any text must encode (with and
// without special-token parsing) into ids inside the vocabulary, and those ids
// must decode, whole and streamed, without a crash or an out-of-bounds read.
//
// The vocabulary is a vocab-only GGUF from the fixtures: COLIBRI_FUZZ_VOCAB
// names it (default: the gpt-2 one of COLIBRI_FIXTURES_DIR). The first byte of
// an input picks the encode options.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"

namespace {

std::unique_ptr<colibri::gguf::GgufFile> g_file;
std::unique_ptr<colibri::tokenizer::Tokenizer> g_tokenizer;

std::string VocabPath() {
  const char* env = std::getenv("COLIBRI_FUZZ_VOCAB");
  if (env != nullptr && *env != '\0') return env;
  return std::string(COLIBRI_FUZZ_FIXTURES_DIR) + "/vocab/ggml-vocab-gpt-2.gguf";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string path = VocabPath();
  absl::StatusOr<std::unique_ptr<colibri::gguf::GgufFile>> file =
      colibri::gguf::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot open %s: %s\n", path.c_str(),
                 std::string(file.status().message()).c_str());
    std::exit(1);
  }
  g_file = *std::move(file);
  absl::StatusOr<std::unique_ptr<colibri::tokenizer::Tokenizer>> tok =
      colibri::tokenizer::Tokenizer::FromGguf(*g_file);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: no tokenizer in %s: %s\n", path.c_str(),
                 std::string(tok.status().message()).c_str());
    std::exit(1);
  }
  g_tokenizer = *std::move(tok);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  colibri::tokenizer::EncodeOptions options;
  options.add_special = (data[0] & 1) != 0;
  options.parse_special = (data[0] & 2) != 0;
  const bool render_special = (data[0] & 4) != 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<std::vector<int32_t>> ids = g_tokenizer->Encode(text, options);
  if (!ids.ok()) return 0;
  const int32_t n_vocab = g_tokenizer->n_vocab();
  for (int32_t id : *ids) {
    if (id < 0 || id >= n_vocab) __builtin_trap();  // an id outside the vocabulary
  }
  const std::string whole = g_tokenizer->Decode(*ids, render_special);
  colibri::tokenizer::StreamDecoder stream(*g_tokenizer, render_special);
  size_t streamed = 0;
  for (int32_t id : *ids) streamed += stream.Push(id).size();
  streamed += stream.Flush().size();
  return whole.size() + streamed == 1 ? 1 : 0;
}
