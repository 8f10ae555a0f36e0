// The harmony dialect of AssistantOutputParser (gpt-oss): messages with a
// header and a body, their markers rendered control tokens.
#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/api/assistant_output.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {
namespace {

constexpr absl::string_view kStart = "<|start|>";
constexpr absl::string_view kChannel = "<|channel|>";
constexpr absl::string_view kMessage = "<|message|>";
constexpr absl::string_view kConstrain = "<|constrain|>";
// What ends a body: <|call|> and <|return|> are end-of-generation tokens
// (seen only with ignore_eos), a new <|start|> or <|channel|> opens the next
// message.
constexpr absl::string_view kBodyEnds[] = {"<|end|>", "<|call|>", "<|return|>", kStart, kChannel};
// Headers longer than this without a <|message|> are not headers.
constexpr size_t kMaxHeader = 512;

// The longest suffix of `text` that is a proper prefix of one of `markers`.
template <typename Markers>
size_t HeldForAny(absl::string_view text, const Markers& markers) {
  size_t held = 0;
  for (absl::string_view m : markers) {
    for (size_t k = std::min(m.size() - 1, text.size()); k > held; --k) {
      if (absl::EndsWith(text, m.substr(0, k))) {
        held = k;
        break;
      }
    }
  }
  return held;
}

// Whether `text` (which starts past any whitespace) is or may become a header:
// it opens with a marker, or with the recipient of the role's part
// ("to=functions.N", when the prompt ended with "<|start|>assistant").
bool MaybeHeader(absl::string_view text) {
  for (absl::string_view opener : {absl::string_view("<|"), absl::string_view("to=")}) {
    if (absl::StartsWith(text, opener) || absl::StartsWith(opener, text)) return true;
  }
  return false;
}

// The word after `key` in `header` (up to whitespace or '<'), "" if none.
std::string WordAfter(absl::string_view header, absl::string_view key) {
  const size_t at = header.find(key);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = header.substr(at + key.size());
  rest = absl::StripLeadingAsciiWhitespace(rest);
  size_t end = 0;
  while (end < rest.size() && !absl::ascii_isspace(static_cast<unsigned char>(rest[end])) &&
         rest[end] != '<') {
    ++end;
  }
  return std::string(rest.substr(0, end));
}

}  // namespace

absl::string_view HarmonyMarker(absl::string_view piece) {
  for (absl::string_view m :
       {kStart, kChannel, kMessage, kConstrain, kBodyEnds[0], kBodyEnds[1], kBodyEnds[2]}) {
    if (piece == m) return m;
  }
  return "";
}

void AssistantOutputParser::EndHarmonyMessage(OutputDelta* out) {
  if (!recipient_.empty()) {
    // A call: its whole body was held.
    const std::string name(absl::StripPrefix(recipient_, "functions."));
    const nlohmann::ordered_json args =
        nlohmann::ordered_json::parse(absl::StripAsciiWhitespace(pending_), nullptr, false);
    if (parse_tools_ && !name.empty() && args.is_object()) {
      out->tool_calls.push_back({absl::StrCat(id_prefix_, calls_++), name, args.dump()});
    } else {
      AppendContent(pending_, out);
    }
    pending_.clear();
  }
  harmony_header_ = true;
  channel_.clear();
  recipient_.clear();
}

void AssistantOutputParser::DrainHarmony(bool final, OutputDelta* out) {
  while (!pending_.empty()) {
    if (harmony_header_) {
      // Whitespace between messages is not content; a header's length counts
      // from its first other byte.
      pending_.erase(0, pending_.size() - absl::StripLeadingAsciiWhitespace(pending_).size());
      if (pending_.empty()) break;
      // Text that does not open like a header (a model that writes none) is
      // content, and so is a "header" that does not end within kMaxHeader.
      if (!MaybeHeader(pending_)) {
        channel_ = "final";
        harmony_header_ = false;
        continue;
      }
      const size_t message = pending_.find(kMessage.data(), 0, kMessage.size());
      if (message != std::string::npos && message + kMessage.size() <= kMaxHeader) {
        const absl::string_view header = absl::string_view(pending_).substr(0, message);
        channel_ = WordAfter(header, kChannel);
        recipient_ = WordAfter(header, "to=");
        pending_.erase(0, message + kMessage.size());
        harmony_header_ = false;
        continue;
      }
      if (pending_.size() < kMaxHeader && !final) return;
      if (final && pending_.size() < kMaxHeader) {
        // An unfinished header: markup only, unless it holds none.
        if (!absl::StrContains(pending_, kChannel) && !absl::StrContains(pending_, kStart) &&
            !absl::StrContains(pending_, kConstrain)) {
          AppendContent(pending_, out);
        }
        pending_.clear();
        return;
      }
      channel_ = "final";
      harmony_header_ = false;
      // The marker it opened with would open a header again: it is content.
      for (absl::string_view opener : {kStart, kChannel}) {
        if (absl::StartsWith(pending_, opener)) {
          AppendContent(opener, out);
          pending_.erase(0, opener.size());
          break;
        }
      }
      continue;
    }
    size_t at = std::string::npos;
    absl::string_view marker;
    for (absl::string_view m : kBodyEnds) {
      const size_t p = pending_.find(m.data(), 0, m.size());
      if (p < at) {
        at = p;
        marker = m;
      }
    }
    const bool call = !recipient_.empty();
    const size_t end = at != std::string::npos ? at
                       : final                 ? pending_.size()
                                               : pending_.size() - HeldForAny(pending_, kBodyEnds);
    if (call) {
      if (at == std::string::npos && !final) return;  // held whole until it ends
      std::string rest = pending_.substr(end + marker.size());
      pending_.resize(end);
      EndHarmonyMessage(out);
      pending_ = std::move(rest);
      // A marker that opens the next message stays for its header.
      if (marker == kStart || marker == kChannel) pending_.insert(0, marker.data(), marker.size());
      continue;
    }
    const absl::string_view body = absl::string_view(pending_).substr(0, end);
    if (channel_ == "analysis") {
      out->reasoning.append(body.data(), body.size());
    } else {
      AppendContent(body, out);
    }
    if (at == std::string::npos) {
      pending_.erase(0, end);
      return;
    }
    // Opening markers stay for the next header; closing ones go.
    pending_.erase(0, at + ((marker == kStart || marker == kChannel) ? 0 : marker.size()));
    EndHarmonyMessage(out);
  }
  if (final && !harmony_header_) EndHarmonyMessage(out);
}

}  // namespace colibri::coordinator
