// Size limits of client requests, checked before the coordinator allocates
// anything whose size a request chooses: every field a client controls that
// sizes a buffer, a loop or a search is bounded here by the session's context
// or by a configured limit. Both front ends apply the same limits: the gRPC
// service (colibri.v1.Inference) through CheckGenerateRequest and
// CheckTokenizeRequest, the HTTP API through CheckPromptText, CheckChat and
// CheckStopStrings, before any prompt is rendered or tokenized.
//
// Thread-safety: stateless functions.
#ifndef COLIBRI_COORDINATOR_API_REQUEST_LIMITS_H_
#define COLIBRI_COORDINATOR_API_REQUEST_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "colibri/v1/inference.pb.h"

namespace colibri::coordinator {

struct RequestLimits {
  // Positions of a session's context: a token prompt may not be longer, and
  // no generation keeps more tokens than this. Required (> 0).
  int n_ctx = 0;
  // Vocabulary size: prompt ids must be in [0, n_vocab). Required (> 0).
  int n_vocab = 0;
  // Largest max_tokens a request may ask for. A value above the context is
  // accepted (the generation then ends with FINISH_REASON_CONTEXT) but never
  // sizes a buffer beyond n_ctx. Default: 1 << 20.
  int max_tokens = 1 << 20;
  // Largest prompt text (Generate) or text (Tokenize), and the most bytes of
  // roles and contents of a chat's messages. Tokenizing 1 MiB of text gives
  // about 250,000 tokens, far beyond any context served. Default: 1 MiB.
  int64_t max_text_bytes = 1 << 20;
  // Most messages in one chat: each is rendered by the template and kept as
  // a JSON value, so their count bounds that work apart from their bytes.
  // Default: 4096.
  int max_messages = 4096;
  // Most stop strings in one request. Default: 16.
  int max_stop_strings = 16;
  // Longest stop string, in bytes. Default: 256.
  int64_t max_stop_bytes = 256;
};

// InvalidArgument when `limits` itself is unusable (n_ctx or n_vocab not
// positive, a limit below 1).
absl::Status ValidateRequestLimits(const RequestLimits& limits);

// Checks every size of a Generate request against `limits`: prompt text bytes,
// prompt token count (against n_ctx) and ids (against n_vocab), max_tokens,
// the number and length of stop strings, the response_format schema text, a
// chat's bytes (messages, their tool calls, and the tools). OutOfRange naming
// the limit for a size beyond it; InvalidArgument for a negative max_tokens,
// an empty or missing prompt, ids outside the vocabulary, and tools or a
// tool choice without a chat prompt. Does not look at sampling
// parameters or whether the text fits the context once tokenized.
absl::Status CheckGenerateRequest(const v1::GenerateRequest& request, const RequestLimits& limits);

// Checks a Tokenize request's text against max_text_bytes (OutOfRange).
absl::Status CheckTokenizeRequest(const v1::TokenizeRequest& request, const RequestLimits& limits);

// The checks the two calls above are made of, for front ends with their own
// request types. `what` names the text in the message ("the prompt text").
// OutOfRange beyond max_text_bytes.
absl::Status CheckPromptText(const char* what, size_t bytes, const RequestLimits& limits);
// A chat of n_messages messages whose roles and contents have `bytes` bytes:
// OutOfRange beyond max_messages or max_text_bytes, InvalidArgument for none.
absl::Status CheckChat(size_t n_messages, int64_t bytes, const RequestLimits& limits);
// OutOfRange beyond max_stop_strings, or for a string above max_stop_bytes.
absl::Status CheckStopStrings(const std::vector<std::string>& stop, const RequestLimits& limits);

// Gives freed heap memory back to the system (malloc_trim) after a request
// of at least kReleaseAfterBytes: parsing a large body or prompt leaves
// megabytes of freed blocks that the allocator would otherwise keep.
inline constexpr size_t kReleaseAfterBytes = size_t{1} << 20;
void ReleaseMemoryAfterRequest(size_t request_bytes);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_REQUEST_LIMITS_H_
