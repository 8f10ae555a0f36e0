// A chat reply split as the chat APIs report it: content, reasoning and tool
// calls (assistant_output.h), fed token by token. Both front ends (HTTP chat
// completions, gRPC Generate with a chat prompt) build their reply this way,
// so they read the same dialect for the same model and request.
//
// Thread-safety: a ChatReply is used by one thread at a time.
#ifndef COLIBRI_COORDINATOR_API_CHAT_REPLY_H_
#define COLIBRI_COORDINATOR_API_CHAT_REPLY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "coordinator/api/assistant_output.h"
#include "coordinator/api/generation_request.h"
#include "coordinator/generation/generation.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {

class ChatReply {
 public:
  // The dialect comes from context's arch and chat template, and from the
  // end of `prompt_ids` (a think block the template opened); `request` gives
  // the tools and whether their calls are parsed (ParsesToolCalls). Calls'
  // ids start with id_prefix. context's tokenizer is borrowed (may be null:
  // no harmony markers are recovered).
  ChatReply(const GenerationRequestContext& context, absl::Span<const int32_t> prompt_ids,
            const GenerationRequest& request, std::string id_prefix);

  // What `token` releases. For a harmony model, a control token that frames
  // messages is fed as its markup (decoded text leaves it out).
  OutputDelta Feed(const GeneratedToken& token);
  // The end of generation: `trailing_text` (GenerationResult's) and all that
  // was held.
  OutputDelta Finish(absl::string_view trailing_text);
  // Whether a tool call was released (finish reason "tool_calls").
  bool called_tools() const { return parser_.called_tools(); }

 private:
  const tokenizer::Tokenizer* const tokenizer_;
  const bool harmony_;
  AssistantOutputParser parser_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_CHAT_REPLY_H_
