// libFuzzer harness for the coordinator's request checks
// (coordinator/api/request_limits.h): the input's first byte picks a
// colibri.v1.Inference request type (Generate or Tokenize), the rest is parsed
// as that message and checked against small limits. Whatever the bytes, the
// check answers with a status; an accepted request is within every limit.
#include <cstddef>
#include <cstdint>

#include "colibri/v1/inference.pb.h"
#include "coordinator/api/request_limits.h"

namespace {

namespace v1 = colibri::v1;
using colibri::coordinator::RequestLimits;

RequestLimits Limits() {
  RequestLimits limits;
  limits.n_ctx = 64;
  limits.n_vocab = 1000;
  limits.max_tokens = 4096;
  limits.max_text_bytes = 512;
  limits.max_stop_strings = 4;
  limits.max_stop_bytes = 16;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const RequestLimits limits = Limits();
  const int n = static_cast<int>(size - 1);
  if (data[0] % 2 == 0) {
    v1::GenerateRequest request;
    if (!request.ParseFromArray(data + 1, n)) return 0;
    if (!colibri::coordinator::CheckGenerateRequest(request, limits).ok()) return 0;
    // Accepted: every size is within its limit.
    if (request.max_tokens() < 0 || request.max_tokens() > limits.max_tokens ||
        request.stop_size() > limits.max_stop_strings ||
        request.text().size() > static_cast<size_t>(limits.max_text_bytes) ||
        request.tokens().ids_size() > limits.n_ctx) {
      __builtin_trap();
    }
    for (int32_t id : request.tokens().ids()) {
      if (id < 0 || id >= limits.n_vocab) __builtin_trap();
    }
    for (const auto& s : request.stop()) {
      if (s.size() > static_cast<size_t>(limits.max_stop_bytes)) __builtin_trap();
    }
  } else {
    v1::TokenizeRequest request;
    if (!request.ParseFromArray(data + 1, n)) return 0;
    if (colibri::coordinator::CheckTokenizeRequest(request, limits).ok() &&
        request.text().size() > static_cast<size_t>(limits.max_text_bytes)) {
      __builtin_trap();
    }
  }
  return 0;
}
