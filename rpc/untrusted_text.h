// Bytes from the network (a request's strings, a peer's error message) made
// safe to put into a log line or an error message: no control characters, no
// terminal escapes, no invalid UTF-8, bounded length.
//
// Thread-safety: a pure function.
#ifndef COLIBRI_RPC_UNTRUSTED_TEXT_H_
#define COLIBRI_RPC_UNTRUSTED_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace colibri::rpc {

// Printable ASCII (0x20..0x7e) as is, except the backslash (written "\\");
// every other byte as "\xNN". Longer inputs are cut after `max_bytes` input
// bytes and end with "...(N bytes)".
std::string EscapeUntrusted(absl::string_view bytes, size_t max_bytes = 256);

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_UNTRUSTED_TEXT_H_
