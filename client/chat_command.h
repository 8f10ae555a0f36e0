// `colibri-client chat`: an interactive conversation with the served model.
// Each user line is sent with the whole history as a `chat` prompt
// (GenerateRequest.chat: the server applies the model's chat template), the
// reply streams to `out` and joins the history. Lines "/reset" (forget the
// history, keep the system prompt) and "/exit" (or end of input) are
// commands; empty lines are skipped. Works the same with input that is not a
// terminal (then no "> " prompt is shown).
//
// Thread-safety: RunChat is a function of its arguments only.
#ifndef COLIBRI_CLIENT_CHAT_COMMAND_H_
#define COLIBRI_CLIENT_CHAT_COMMAND_H_

#include <istream>
#include <ostream>
#include <string>

#include "client/client.h"

namespace colibri::client {

struct ChatOptions {
  // The first message of every conversation, role "system". Default: "" (none).
  std::string system;
  // max_tokens, sampling, stop and exact of every turn (its prompt is
  // replaced). Default: the proto's defaults.
  v1::GenerateRequest request;
  // Show "> " before reading each line. Default: false.
  bool show_prompt = false;
  // After each reply, write "[prompt P tokens, G generated, finish F]" to
  // `err`. Default: false.
  bool print_stats = false;
};

// Runs the conversation until "/exit" or the end of `in`. Returns 0, or 1
// when a turn failed (its error is written to `err`, the failed user line is
// dropped from the history and the conversation goes on).
int RunChat(Client& client, const ChatOptions& options, std::istream& in, std::ostream& out,
            std::ostream& err);

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_CHAT_COMMAND_H_
