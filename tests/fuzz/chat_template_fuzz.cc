// libFuzzer harness for the chat-template interpreter: any template source
// must parse or fail with a status, and any parsed template must render or
// fail with a status, never crash, hang or read out of bounds. Tight limits
// keep each input fast.
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCOLIBRI_FUZZ=ON
//   ninja -C build-fuzz chat_template_fuzz
//   ./build-fuzz/tests/fuzz/chat_template_fuzz -max_len=16384 build-fuzz/chat_template_corpus
// The build writes the fixture templates into build-fuzz/chat_template_corpus
// as seeds (when the fixtures are present).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat_template/chat_template.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using colibri::chat_template::ChatTemplate;
  const std::string source(reinterpret_cast<const char*>(data), size);
  colibri::chat_template::TemplateLimits limits;
  limits.max_loop_iterations = 10000;
  limits.max_output_bytes = 1 << 16;
  limits.max_work_bytes = 1 << 22;
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl = ChatTemplate::Parse(source, limits);
  if (!tmpl.ok()) return 0;
  static const nlohmann::ordered_json* const kContext = new nlohmann::ordered_json(
      nlohmann::ordered_json::parse(R"({
        "messages": [
          {"role": "system", "content": "Be brief."},
          {"role": "user", "content": "Hi ✓"},
          {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": {"x": 1}}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": true}"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})"));
  absl::StatusOr<std::string> out = (*tmpl)->Render(*kContext);
  return out.ok() && out->size() == 1 ? 1 : 0;
}
