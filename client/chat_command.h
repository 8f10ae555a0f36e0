// `colibri-client chat`: an interactive conversation with the served model.
// Each user line is sent with the whole history as a `chat` prompt
// (GenerateRequest.chat: the server applies the model's chat template), the
// reply streams to `out` and joins the history. Lines "/reset" (forget the
// history, keep the system prompt) and "/exit" (or end of input) are
// commands; empty lines are skipped. The lines come from a LineReader
// (line_reader.h: a terminal's line editor or plain lines of a pipe); each
// line sent is remembered there. An interrupted reply (Ctrl-C) stops, its
// call is cancelled, and what arrived of it joins the history as the
// assistant's turn (nothing arrived: the user line is dropped too); the
// conversation goes on.
//
// With tools in the request (ChatOptions::request.tools, see ParseTools) the
// reply is printed as the server splits it: its content, then each tool call
// as a line "[call ID] NAME ARGUMENTS"; the calls join the history with the
// assistant's turn. A line "/tool ID TEXT" answers call ID with TEXT (a "tool"
// message) and asks for the next reply.
//
// Thread-safety: RunChat is a function of its arguments only.
#ifndef COLIBRI_CLIENT_CHAT_COMMAND_H_
#define COLIBRI_CLIENT_CHAT_COMMAND_H_

#include <functional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/line_reader.h"

namespace colibri::client {

struct ChatOptions {
  // The first message of every conversation, role "system". Default: "" (none).
  std::string system;
  // max_tokens, sampling, stop and exact of every turn (its prompt is
  // replaced). Default: the proto's defaults.
  v1::GenerateRequest request;
  // Polled every 50 ms while a reply is awaited or streams (Client::Generate's
  // `cancel`); true stops that reply (see above). Default: null (never).
  std::function<bool()> interrupted;
  // After each reply, write "[prompt P tokens, G generated, finish F]" to
  // `err`. Default: false.
  bool print_stats = false;
};

// The tools of a JSON file in OpenAI's form ([{"type": "function",
// "function": {"name", "description", "parameters"}}, ...]) and a tool
// choice ("auto", "none", "required" or a function's name; "" leaves it
// unset) into `request`. InvalidArgument naming what is wrong.
absl::Status SetTools(const std::string& tools_json, const std::string& tool_choice,
                      v1::GenerateRequest* request);

// Runs the conversation until "/exit" or the end of `in`. Returns 0, or 1
// when a turn failed (its error is written to `err`, the failed user line is
// dropped from the history and the conversation goes on).
int RunChat(Client& client, const ChatOptions& options, LineReader& in, std::ostream& out,
            std::ostream& err);

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_CHAT_COMMAND_H_
