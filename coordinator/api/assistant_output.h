// Splits an assistant's generated text into what the OpenAI chat API
// reports apart: `content`, `reasoning_content` (the text inside the model's
// thinking block) and `tool_calls` (the model's own tool-call syntax,
// parsed into a name and JSON arguments). One parser serves the streamed and
// the whole response: text goes in as it is generated, and what can be
// released comes out; text that may be the start of a marker is held back
// until it is known not to be.
//
// Dialects (the markers as the model writes them in plain text):
//   think        <think> ... </think> (Qwen3, GLM-4.5, DeepSeek-R1); a
//                prompt that ends with "<think>" (the template opened the
//                block) starts inside it.
//   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>
//                (Qwen2.5, Qwen3, Hermes)
//   glm45        <tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value>...
//                </tool_call>; the value of a parameter that takes only
//                strings (GlmRawTextParameter, with the request's tools given
//                by set_tools) is that text as it stands, any other value
//                that parses as JSON is taken as such, else as a string
//   deepseek_v3  <｜tool▁calls▁begin｜> ... <｜tool▁calls▁end｜>, each call
//                <｜tool▁call▁begin｜>[function<｜tool▁sep｜>]N then the
//                arguments (bare or in a ```json fence) <｜tool▁call▁end｜>
//   harmony      gpt-oss: messages "<|channel|>C[ to=R][ <|constrain|>json]
//                <|message|>BODY" ended by <|end|>, <|call|>, <|return|> or
//                the next <|start|>; the markers are control tokens, which
//                decoded text leaves out, so the caller feeds each one's
//                markup where it came (HarmonyMarker). Channel analysis is
//                reasoning, final and commentary are content, a message to
//                "functions.N" (its recipient in the header) is a call of N
//                with BODY as arguments. Text before any header is content.
// A tool-call block whose body does not parse is given back as content,
// markers included (harmony: its body only), so nothing the model wrote is
// lost.
//
// Thread-safety: a parser is used by one thread at a time.
#ifndef COLIBRI_COORDINATOR_API_ASSISTANT_OUTPUT_H_
#define COLIBRI_COORDINATOR_API_ASSISTANT_OUTPUT_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {

// DeepSeek-V3's tool-call markers.
inline constexpr absl::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr absl::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr absl::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr absl::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
inline constexpr absl::string_view kDeepSeekSep = "<｜tool▁sep｜>";

enum class ToolDialect { kNone, kHermes, kGlm45, kDeepSeekV3, kHarmony };

struct OutputDialect {
  ToolDialect tools = ToolDialect::kNone;
  bool think = false;                // <think> blocks are reasoning
  bool starts_in_reasoning = false;  // the prompt opened the block
};

// The dialect of a model from its architecture and chat template, for a
// rendered prompt (whose end tells whether a think block is open).
OutputDialect DialectFor(absl::string_view arch, absl::string_view chat_template,
                         absl::string_view prompt);

// Whether GLM-4.5 writes the value of a parameter with JSON Schema `schema`
// as raw text (its template writes strings unquoted): the schema admits
// strings only ("type": "string", or an enum or const of strings).
bool GlmRawTextParameter(const nlohmann::ordered_json& schema);

// The markup of a harmony marker ("<|channel|>", ...) when `piece` (a
// control token rendered) is one, else "".
absl::string_view HarmonyMarker(absl::string_view piece);

struct ToolCall {
  std::string id;         // "call_<n>" unique within the response, made here
  std::string name;
  std::string arguments;  // a JSON object, serialized compactly
};

// What a Feed or Finish releases, in order within each field.
struct OutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  // Appends `more`'s fields to this one's.
  void Append(OutputDelta more) {
    content += more.content;
    reasoning += more.reasoning;
    for (ToolCall& call : more.tool_calls) tool_calls.push_back(std::move(call));
  }
};

class AssistantOutputParser {
 public:
  // parse_tools false (no tools in the request, or tool_choice "none"):
  // tool-call markers are plain content. id_prefix starts every call's id.
  AssistantOutputParser(OutputDialect dialect, bool parse_tools, std::string id_prefix);

  // The request's tools (OpenAI's [{"type": "function", "function": {"name",
  // "parameters"}}]; anything else is ignored): GLM-4.5 values of their
  // raw-text parameters stay strings. Default: none (every value that
  // parses as JSON is taken as JSON).
  void set_tools(const nlohmann::ordered_json& tools);

  OutputDelta Feed(absl::string_view text);
  // The end of generation: releases everything held (an unfinished think
  // block as reasoning, an unfinished tool-call block as content).
  OutputDelta Finish();
  // Whether any tool call was released (finish_reason "tool_calls").
  bool called_tools() const { return calls_ > 0; }

 private:
  enum class Mode { kContent, kReasoning, kTools };
  // Moves what can be released from pending_ into *out; `final` releases all.
  void Drain(bool final, OutputDelta* out);
  // Drain for the harmony dialect (assistant_output_harmony.cc).
  void DrainHarmony(bool final, OutputDelta* out);
  // Ends the harmony message being read (its held body, if a call).
  void EndHarmonyMessage(OutputDelta* out);
  // Parses a tool block's body (without its markers) into *calls; false
  // when it does not parse.
  bool ParseBlock(absl::string_view body, std::vector<ToolCall>* calls);
  void AppendContent(absl::string_view text, OutputDelta* out);

  const OutputDialect dialect_;
  const bool parse_tools_;
  const std::string id_prefix_;
  // GLM-4.5: per function, its raw-text parameters (set_tools).
  std::map<std::string, std::set<std::string>> raw_text_keys_;
  std::string open_tools_;   // "" when tool calls are not parsed
  std::string close_tools_;
  Mode mode_;
  std::string pending_;
  // Content right after a think block or a tool call: leading whitespace
  // (the newlines models put there) is dropped.
  bool trim_leading_ = false;
  int calls_ = 0;
  // Harmony: reading a header (until <|message|>) or a body, and the body's
  // channel and recipient ("" when none).
  bool harmony_header_ = true;
  std::string channel_;
  std::string recipient_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_ASSISTANT_OUTPUT_H_
