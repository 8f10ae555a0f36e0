#include "rpc/untrusted_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace colibri::rpc {

std::string EscapeUntrusted(absl::string_view bytes, size_t max_bytes) {
  const absl::string_view shown = bytes.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size());
  for (const char ch : shown) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c <= 0x7e) {
      out += ch;
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  if (shown.size() < bytes.size()) absl::StrAppend(&out, "...(", bytes.size(), " bytes)");
  return out;
}

}  // namespace colibri::rpc
