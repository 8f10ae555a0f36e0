#include "coordinator/api/chat_reply.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace colibri::coordinator {
namespace {

// The dialect for a reply to `prompt_ids`: whether a think block is open
// shows in the prompt's last tokens.
OutputDialect ReplyDialect(const GenerationRequestContext& context,
                           absl::Span<const int32_t> prompt_ids) {
  std::string tail;
  if (context.tokenizer != nullptr) {
    const size_t n = std::min<size_t>(prompt_ids.size(), 8);
    tail = context.tokenizer->Decode(prompt_ids.subspan(prompt_ids.size() - n), true);
  }
  return DialectFor(context.arch, context.chat_template, tail);
}

}  // namespace

ChatReply::ChatReply(const GenerationRequestContext& context, absl::Span<const int32_t> prompt_ids,
                     const GenerationRequest& request, std::string id_prefix)
    : tokenizer_(context.tokenizer),
      harmony_(context.tool_dialect == ToolDialect::kHarmony),
      parser_(ReplyDialect(context, prompt_ids), ParsesToolCalls(request), std::move(id_prefix)) {
  parser_.set_tools(request.tools);
}

OutputDelta ChatReply::Feed(const GeneratedToken& token) {
  if (!harmony_ || tokenizer_ == nullptr || !tokenizer_->IsControl(token.id)) {
    return parser_.Feed(token.text);
  }
  return parser_.Feed(
      absl::StrCat(token.text, HarmonyMarker(tokenizer_->TokenToPiece(token.id, true))));
}

OutputDelta ChatReply::Finish(absl::string_view trailing_text) {
  OutputDelta out = parser_.Feed(trailing_text);
  out.Append(parser_.Finish());
  return out;
}

}  // namespace colibri::coordinator
