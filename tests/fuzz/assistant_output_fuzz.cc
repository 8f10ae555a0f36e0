// libFuzzer harness for the parser of generated text
// (coordinator/api/assistant_output.h): the model's output is not trusted
// input either (a random-weight or a confused model writes anything). The
// input's first byte picks the dialect and the options, the second seeds the
// chunking, the rest is the generated text. Whatever the text:
//   - the parser neither crashes nor throws;
//   - the text fed in chunks of 1-16 bytes (a token's piece may end inside a
//     marker or a UTF-8 sequence) gives what the whole text fed at once gives;
//   - every tool call has a name, an id unique in the reply, and arguments
//     that are a JSON object.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "coordinator/api/assistant_output.h"
#include "nlohmann/json.hpp"

namespace {

namespace co = colibri::coordinator;

// Tools with a raw-text (GLM-4.5) and a JSON parameter.
const nlohmann::ordered_json& Tools() {
  static const auto* tools = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
      "properties": {"q": {"enum": ["a", "b"]}}}}}])"));
  return *tools;
}

co::OutputDelta Run(co::OutputDialect dialect, bool parse_tools, absl::string_view text,
                    uint32_t chunk_seed) {
  co::AssistantOutputParser parser(dialect, parse_tools, "call_");
  parser.set_tools(Tools());
  co::OutputDelta all;
  if (chunk_seed == 0) {
    all.Append(parser.Feed(text));
  } else {
    uint32_t state = chunk_seed;
    size_t at = 0;
    while (at < text.size()) {
      state = state * 1103515245u + 12345u;
      const size_t n = 1 + (state >> 16) % 16;
      all.Append(parser.Feed(text.substr(at, n)));
      at += n;
    }
  }
  all.Append(parser.Finish());
  if (parser.called_tools() != !all.tool_calls.empty()) __builtin_trap();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t options = data[0];
  co::OutputDialect dialect;
  dialect.tools = static_cast<co::ToolDialect>(options % 5);
  dialect.think = (options & 0x08) != 0;
  dialect.starts_in_reasoning = dialect.think && (options & 0x10) != 0;
  const bool parse_tools = (options & 0x20) == 0;
  const absl::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  const co::OutputDelta whole = Run(dialect, parse_tools, text, 0);
  const co::OutputDelta chunked = Run(dialect, parse_tools, text, 1u + data[1]);
  if (whole.content != chunked.content || whole.reasoning != chunked.reasoning) __builtin_trap();
  if (whole.tool_calls.size() != chunked.tool_calls.size()) __builtin_trap();
  std::set<std::string> ids;
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    const co::ToolCall& a = whole.tool_calls[i];
    const co::ToolCall& b = chunked.tool_calls[i];
    if (a.id != b.id || a.name != b.name || a.arguments != b.arguments) __builtin_trap();
    if (a.name.empty() || !ids.insert(a.id).second) __builtin_trap();
    const auto args = nlohmann::json::parse(a.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) __builtin_trap();
  }
  return 0;
}
