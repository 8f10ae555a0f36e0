// libFuzzer harness for the GGUF parser and the model loader: any byte string
// must parse or fail with a status, never crash or read out of bounds; a file
// that parses is read as a model config and loaded, so that header counts
// (block_count, head and expert counts, embedding width) the tensor table
// cannot back end in a status rather than an allocation sized by them.
// gguf.dict (passed by scripts/fuzz.sh) names those keys and extreme values.
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCOLIBRI_FUZZ=ON
//   ninja -C build-fuzz gguf_fuzz
//   ./build-fuzz/tests/fuzz/gguf_fuzz -max_len=65536 -dict=tests/fuzz/gguf.dict
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/arch/model.h"
#include "model/arch/model_config.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exactly-sized buffer so that ASan sees any over-read.
  const std::vector<uint8_t> bytes(data, data + size);
  absl::StatusOr<std::unique_ptr<colibri::gguf::GgufFile>> file =
      colibri::gguf::GgufFile::FromBytes(absl::MakeConstSpan(bytes), "fuzz.gguf");
  if (!file.ok()) return 0;
  size_t sink = 0;
  for (const auto& [key, value] : (*file)->metadata()) {
    sink += colibri::gguf::ValueToString(value).size() + key.size();
  }
  for (const colibri::gguf::TensorInfo& t : (*file)->tensors()) {
    if (t.n_bytes > 0) sink += t.data[0] + t.data[t.n_bytes - 1];  // must be in bounds
  }
  if (colibri::arch::ReadModelConfig(**file).ok()) {
    // The model borrows `bytes`, which outlives it.
    absl::StatusOr<std::unique_ptr<colibri::arch::Model>> model =
        colibri::arch::Model::Load(std::move(*file));
    if (model.ok()) sink += (*model)->config().n_layer;
  }
  return sink == 1 ? 1 : 0;
}
