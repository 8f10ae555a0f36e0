// libFuzzer harness for the expert node's stored-record decoders
// (expert_node/expert_record.h): value headers, keys and model records read
// back from RocksDB. Any bytes must decode or fail with a status, never crash;
// a header that decodes must encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "expert_node/expert_record.h"

namespace ex = colibri::expert_node;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // The header names its own layer and expert at bytes 8 and 12; decoding
  // with those reaches past the identity check.
  int32_t layer = 0;
  int32_t expert = 0;
  if (size >= 16) {
    std::memcpy(&layer, data + 8, 4);
    std::memcpy(&expert, data + 12, 4);
  }
  absl::StatusOr<ex::ExpertLayout> layout = ex::DecodeHeader(bytes, layer, expert);
  if (layout.ok()) {
    const std::string again = ex::EncodeHeader(layer, expert, *layout);
    if (again.size() != layout->header_bytes()) __builtin_trap();
    absl::StatusOr<ex::ExpertLayout> back = ex::DecodeHeader(again, layer, expert);
    if (!back.ok() || back->payload_bytes() != layout->payload_bytes() ||
        back->xxh64 != layout->xxh64 || back->activation != layout->activation) {
      __builtin_trap();  // encode and decode disagree
    }
  }
  absl::StatusOr<ex::ExpertId> key = ex::ParseExpertKey(bytes);
  if (key.ok()) {
    // A parsed key re-encodes to a key that parses to the same id.
    absl::StatusOr<ex::ExpertId> again = ex::ParseExpertKey(ex::ExpertIndexKey(*key));
    if (!again.ok() || !(*again == *key)) __builtin_trap();
  }
  ex::DecodeModelInfo(bytes).status().IgnoreError();
  ex::ValidateFingerprint(bytes).IgnoreError();
  return 0;
}
