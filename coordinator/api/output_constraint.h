// What a client asks the generated text to be, whichever front end it came
// through, and its compilation into the grammar the scheduler enforces
// (GenerationSpec::constraint):
//   - a response format: any JSON object, or the instances of a JSON Schema
//     (grammar::CompileJsonSchema within kOutputSchemaCompile's bounds);
//   - a tool choice of "required" or one named function: the reply is a tool
//     call in the model family's own syntax (the one AssistantOutputParser
//     reads back), naming one of the request's functions and with arguments
//     that are an instance of that function's `parameters` schema.
//
// Tool-call syntax enforced per dialect (assistant_output.h):
//   hermes       <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>,
//                several calls separated by "\n"
//   deepseek_v3  <｜tool▁calls▁begin｜> then per call
//                <｜tool▁call▁begin｜>N<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
//                then <｜tool▁calls▁end｜> (the V3.1 form)
//   glm45        <tool_call>N\n then per argument
//                <arg_key>K</arg_key>\n<arg_value>V</arg_value>\n then
//                </tool_call>, several calls separated by "\n". The keys in
//                a fixed order: the properties as declared, then required
//                keys not among them; required ones always, others
//                optionally, none twice. V is raw text for a parameter that
//                takes only strings (GlmRawTextParameter: its length bounds
//                and enum/const are enforced, any other keyword of it is
//                InvalidArgument naming it), else compact JSON of its schema;
//                no V holds "</arg_value>" or "</tool_call>". Keywords of the
//                arguments object beyond properties, required and
//                additionalProperties are InvalidArgument naming them.
//   harmony      (gpt-oss, after the prompt's "<|start|>assistant")
//                <|channel|>commentary to=functions.N <|constrain|>json
//                <|message|>ARGS, then the end of generation (<|call|>): one
//                call per reply, parallel_tool_calls or not. The markers are
//                text: the vocabulary's harmony tokens are user-defined (their
//                piece is that text, as llama.cpp has them), so the mask
//                allows each marker's token and, as for any literal, its
//                spelling in other tokens, which decodes to the same text.
//   none         FailedPrecondition: a model without a known tool-call
//                syntax has nothing to constrain to.
// ARGS (and a JSON value V) is compact JSON (no spaces). With
// parallel_tool_calls, 1 to kMaxParallelToolCalls calls, each naming any
// allowed function; without it, exactly one.
//
// Thread-safety: every function is thread-safe (no shared state).
#ifndef COLIBRI_COORDINATOR_API_OUTPUT_CONSTRAINT_H_
#define COLIBRI_COORDINATOR_API_OUTPUT_CONSTRAINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/api/assistant_output.h"
#include "model/grammar/byte_nfa.h"
#include "model/grammar/json_schema_compiler.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {

// The bounds of a client's schema compilation: a hostile schema costs at
// most this many automaton states (about 40 bytes each plus edges) and the
// time to build them, on the thread that takes the request. A tool choice
// compiles its functions' parameters within one max_nfa_states together, and
// the whole call (with its repetitions) within another.
inline constexpr grammar::SchemaCompileOptions kOutputSchemaCompile = {
    /*max_nfa_states=*/200000, /*max_ref_depth=*/4,
    /*max_any_depth=*/grammar::SchemaCompileOptions{}.max_any_depth,
    /*max_schema_depth=*/64};

// Calls at most in one constrained reply with parallel_tool_calls.
inline constexpr int kMaxParallelToolCalls = 4;

struct OutputConstraintRequest {
  enum class Format {
    kText,        // free text
    kJsonObject,  // any JSON object
    kJsonSchema,  // an instance of `json_schema`
  };
  // Default: free text.
  Format format = Format::kText;
  // The schema of kJsonSchema (an object or a boolean). Default: null.
  nlohmann::ordered_json json_schema;

  enum class ToolChoice {
    kAuto,      // the model may call tools (parsed, not constrained)
    kNone,      // tool calls are not parsed
    kRequired,  // the reply is a call of one of the tools
    kNamed,     // the reply is a call of `tool_name`
  };
  // Default: auto.
  ToolChoice tool_choice = ToolChoice::kAuto;
  // The function of kNamed. Default: "".
  std::string tool_name;
  // Whether a constrained reply may hold several calls. Default: true (as
  // OpenAI's API).
  bool parallel_tool_calls = true;

  bool constrains_tools() const {
    return tool_choice == ToolChoice::kRequired || tool_choice == ToolChoice::kNamed;
  }
};

// The grammar of `request` for a model whose tool-call syntax is `dialect`,
// with the request's `tools` (OpenAI's [{"type": "function", "function":
// {"name", "parameters"}}]); null for free text. InvalidArgument for a schema
// that cannot be enforced (the compiler's message: keyword and JSON pointer)
// or outgrows kOutputSchemaCompile, a tool without a name, a named function
// not among the tools, parameters that do not describe an object, or both a
// JSON format and a tool choice; FailedPrecondition for a dialect whose calls
// cannot be constrained. *error_param (may be null)
// names the field an error is about: "response_format", "tool_choice" or
// "tools".
absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileOutputConstraint(
    const OutputConstraintRequest& request, const nlohmann::ordered_json& tools,
    ToolDialect dialect, std::string* error_param);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_OUTPUT_CONSTRAINT_H_
