// Internal to model/gguf: parsing and validating one GGUF file image.
//
// Error codes (see gguf_file.h): InvalidArgument for a file that is not a GGUF
// file we read (bad magic, unsupported version), DataLoss for everything else
// that is wrong inside the bytes (truncation, impossible counts, unknown types,
// bad dims, offsets or alignment, duplicates); ResourceExhausted for a header
// whose parsed form would take more than kMaxHeaderMemory.
#ifndef COLIBRI_MODEL_GGUF_GGUF_PARSER_H_
#define COLIBRI_MODEL_GGUF_GGUF_PARSER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_value.h"

namespace colibri::gguf {

// Limits on what a valid file may hold, beyond fitting in its bytes.
inline constexpr int kMaxArrayDepth = 8;                 // array of array of ...
inline constexpr uint64_t kMaxArrayLength = 1ull << 28;  // elements per metadata array
inline constexpr uint32_t kMaxDims = 4;
// Memory the parsed header (metadata values and the tensor table) may take.
// Parsed values are larger than their encoding (a nested array's 12 bytes
// become a whole Value, a uint8 element an int64), so counts that fit the file
// could still amplify it many times over; real vocabularies need tens of MiB.
inline constexpr uint64_t kMaxHeaderMemory = uint64_t{256} << 20;

struct ParsedImage {
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::vector<std::pair<std::string, Value>> metadata;
  absl::flat_hash_map<std::string, size_t> metadata_index;
  std::vector<TensorInfo> tensors;  // data points into the parsed bytes
  uint64_t data_offset = 0;         // start of the data section
};

class GgufParser {
 public:
  // Parses `bytes` completely; `name` (a path) prefixes every error message and
  // `split_index` is stored in each TensorInfo.
  static absl::StatusOr<ParsedImage> Parse(absl::Span<const uint8_t> bytes, absl::string_view name,
                                           int split_index);
};

}  // namespace colibri::gguf

#endif  // COLIBRI_MODEL_GGUF_GGUF_PARSER_H_
