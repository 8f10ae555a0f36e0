// Chat templates: the Jinja templates GGUF files carry in
// `tokenizer.chat_template`, rendered as Hugging Face transformers'
// apply_chat_template renders them (Jinja2's sandbox with trim_blocks and
// lstrip_blocks, loop controls, `{% generation %}`, `tojson` as
// json.dumps(ensure_ascii=False), `raise_exception`, `strftime_now`).
//
// The interpreter covers the Jinja subset real templates use: if/elif/else,
// for (loop.*, else, `if` filters), set (names, tuples, namespace attributes,
// blocks), macro/call, break/continue, filter blocks, raw, the usual filters
// and tests, Python str/dict methods, slicing and Python operator semantics.
// Lists and dicts are immutable as in transformers' sandbox: `list.append`
// fails as it does there.
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_CHAT_TEMPLATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace colibri::chat_template {

struct Stmt;

// Bounds that make hostile templates fail with a Status instead of exhausting
// the stack, the CPU or memory.
struct TemplateLimits {
  // Nesting of statements and expressions in the source, and of evaluation at
  // run time (statements + expressions + macro calls). Default: 200.
  int max_depth = 200;
  // Nested macro calls (recursion). Default: 64.
  int max_macro_depth = 64;
  // Loop iterations over a whole render, including items walked by filters
  // and range(). Default: 1,000,000.
  uint64_t max_loop_iterations = 1000000;
  // Bytes of rendered output. Default: 16 MiB.
  uint64_t max_output_bytes = 16u << 20;
  // Bytes built by string and list operations over a whole render
  // (concatenation, join, replace, tojson, output...). Default: 256 MiB.
  uint64_t max_work_bytes = 256u << 20;
};

// A ChatML template for GGUF files that carry none: `<|im_start|>role\n
// content<|im_end|>\n` per message, then `<|im_start|>assistant\n` when
// add_generation_prompt is true.
inline constexpr std::string_view kDefaultChatMlTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

struct RenderOptions {
  // What strftime_now() formats. Default (unset): the current time.
  absl::Time now = absl::InfinitePast();
  // Zone of strftime_now(). Default: the machine's local zone.
  absl::TimeZone time_zone = absl::LocalTimeZone();
};

class ChatTemplate {
 public:
  // Parses a template; InvalidArgument naming line/column on a syntax error,
  // ResourceExhausted when it nests deeper than limits.max_depth.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(std::string_view source,
                                                             const TemplateLimits& limits = {});

  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // Renders with `context` (a JSON object: messages, tools, add_generation_prompt,
  // bos_token, eos_token, and any other variables; absent keys are undefined).
  // Errors come back as a Status: raise_exception(msg) as InvalidArgument with
  // exactly msg; type and undefined-variable errors as InvalidArgument "line N:
  // ..."; limits as ResourceExhausted. Thread-safe (const).
  //
  // Object key order matters to templates (tojson prints keys in order), so
  // pass an ordered_json parsed from the request. The nlohmann::json overload
  // is kept for callers holding one: its objects iterate in sorted key order.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& context) const;
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options) const;

 private:
  ChatTemplate(std::unique_ptr<std::vector<std::unique_ptr<Stmt>>> body,
               const TemplateLimits& limits);

  std::unique_ptr<std::vector<std::unique_ptr<Stmt>>> body_;
  const TemplateLimits limits_;
};

}  // namespace colibri::chat_template

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
