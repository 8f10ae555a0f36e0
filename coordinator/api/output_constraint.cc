#include "coordinator/api/output_constraint.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/grammar/grammar_compose.h"

namespace colibri::coordinator {
namespace {

using ojson = nlohmann::ordered_json;
using Grammar = std::shared_ptr<const grammar::CompiledGrammar>;

absl::Status Fail(absl::Status status, const char* param, std::string* error_param) {
  if (error_param != nullptr) *error_param = param;
  return status;
}

absl::StatusOr<Grammar> CompileFormat(const OutputConstraintRequest& request,
                                      std::string* error_param) {
  const ojson schema = request.format == OutputConstraintRequest::Format::kJsonObject
                           ? ojson{{"type", "object"}}
                           : request.json_schema;
  absl::StatusOr<Grammar> compiled = grammar::CompileJsonSchema(schema, kOutputSchemaCompile);
  if (!compiled.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "'response_format' schema cannot be enforced: ", compiled.status().message())),
                "response_format", error_param);
  }
  return compiled;
}

// One function a call may name: its name and its arguments' grammar.
struct Callable {
  std::string name;
  Grammar arguments;
};

// `parameters` as a schema of the arguments object: absent or null is any
// object, a schema without "type" gets "type": "object".
absl::StatusOr<ojson> ArgumentsSchema(const ojson* parameters, const std::string& name) {
  if (parameters == nullptr || parameters->is_null()) return ojson{{"type", "object"}};
  if (parameters->is_boolean() && parameters->get<bool>()) return ojson{{"type", "object"}};
  if (!parameters->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the parameters of function '", name, "' must be a JSON Schema object"));
  }
  ojson schema = *parameters;
  auto type = schema.find("type");
  if (type == schema.end()) {
    schema["type"] = "object";
  } else if (*type != "object" && !(type->is_array() && std::find(type->begin(), type->end(),
                                                                  "object") != type->end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the parameters of function '", name, "' must describe an object (\"type\": \"object\")"));
  } else {
    *type = "object";
  }
  return schema;
}

// The functions a call may name (all, or the one of kNamed), compiled.
absl::StatusOr<std::vector<Callable>> Callables(const OutputConstraintRequest& request,
                                                const ojson& tools, std::string* error_param) {
  if (!tools.is_array() || tools.empty()) {
    return Fail(
        absl::InvalidArgumentError("'tool_choice' \"required\" or a named function needs 'tools'"),
        "tool_choice", error_param);
  }
  std::vector<Callable> out;
  // All the functions' automata share one budget, so that many tools cost
  // what one large schema may.
  grammar::SchemaCompileOptions budget = kOutputSchemaCompile;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& tool = tools[i];
    const ojson* function = nullptr;
    if (tool.is_object() && tool.contains("function") && tool["function"].is_object()) {
      function = &tool["function"];
    }
    if (function == nullptr || !function->contains("name") || !(*function)["name"].is_string() ||
        (*function)["name"].get<std::string>().empty()) {
      return Fail(absl::InvalidArgumentError(
                      absl::StrCat("'tools[", i,
                                   "]' must be {\"type\": \"function\", \"function\": "
                                   "{\"name\": ..., \"parameters\": ...}}")),
                  "tools", error_param);
    }
    const std::string name = (*function)["name"].get<std::string>();
    if (request.tool_choice == OutputConstraintRequest::ToolChoice::kNamed &&
        name != request.tool_name) {
      continue;
    }
    const auto parameters = function->find("parameters");
    absl::StatusOr<ojson> schema =
        ArgumentsSchema(parameters == function->end() ? nullptr : &*parameters, name);
    if (!schema.ok()) return Fail(schema.status(), "tools", error_param);
    absl::StatusOr<Grammar> compiled = grammar::CompileJsonSchema(*schema, budget);
    if (compiled.ok()) {
      const size_t used = (*compiled)->nfa.size();
      budget.max_nfa_states = used < budget.max_nfa_states ? budget.max_nfa_states - used : 0;
    }
    if (!compiled.ok()) {
      return Fail(absl::InvalidArgumentError(
                      absl::StrCat("the parameters of function '", name,
                                   "' cannot be enforced: ", compiled.status().message())),
                  "tools", error_param);
    }
    out.push_back({name, *std::move(compiled)});
  }
  if (out.empty()) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("'tool_choice' names function '", request.tool_name,
                                                "', which is not among 'tools'")),
        "tool_choice", error_param);
  }
  return out;
}

absl::StatusOr<Grammar> CompileToolCalls(const OutputConstraintRequest& request, const ojson& tools,
                                         ToolDialect dialect, std::string* error_param) {
  switch (dialect) {
    case ToolDialect::kHermes:
    case ToolDialect::kDeepSeekV3:
      break;
    case ToolDialect::kGlm45:
      return Fail(absl::FailedPreconditionError(
                      "'tool_choice' \"required\" or a named function is not supported for "
                      "GLM-4.5 models (their calls are key/value pairs, not JSON); use \"auto\""),
                  "tool_choice", error_param);
    case ToolDialect::kHarmony:
      return Fail(absl::FailedPreconditionError(
                      "'tool_choice' \"required\" or a named function is not supported for "
                      "gpt-oss models yet (their calls are framed by control tokens); use "
                      "\"auto\""),
                  "tool_choice", error_param);
    case ToolDialect::kNone:
      return Fail(absl::FailedPreconditionError(
                      "'tool_choice' \"required\" or a named function needs a model whose "
                      "tool-call syntax this server knows (Hermes/Qwen, DeepSeek-V3); use "
                      "\"auto\""),
                  "tool_choice", error_param);
  }
  absl::StatusOr<std::vector<Callable>> callables = Callables(request, tools, error_param);
  if (!callables.ok()) return callables.status();

  grammar::ComposeOptions calls;
  calls.max_nfa_states = kOutputSchemaCompile.max_nfa_states;
  calls.max_repeats = request.parallel_tool_calls ? kMaxParallelToolCalls : 1;
  std::vector<grammar::GrammarSequence> alternatives;
  for (Callable& c : *callables) {
    const std::string quoted = ojson(c.name).dump();
    if (dialect == ToolDialect::kHermes) {
      alternatives.push_back({grammar::GrammarPart::Literal(absl::StrCat(
                                  "<tool_call>\n{\"name\": ", quoted, ", \"arguments\": ")),
                              grammar::GrammarPart::Of(std::move(c.arguments)),
                              grammar::GrammarPart::Literal("}\n</tool_call>")});
    } else {
      alternatives.push_back(
          {grammar::GrammarPart::Literal(absl::StrCat(kDeepSeekCallBegin, c.name, kDeepSeekSep)),
           grammar::GrammarPart::Of(std::move(c.arguments)),
           grammar::GrammarPart::Literal(std::string(kDeepSeekCallEnd))});
    }
  }
  if (dialect == ToolDialect::kHermes) calls.separator = "\n";
  absl::StatusOr<Grammar> composed = grammar::ComposeGrammar(alternatives, calls);
  if (composed.ok() && dialect == ToolDialect::kDeepSeekV3) {
    grammar::ComposeOptions block;
    block.max_nfa_states = kOutputSchemaCompile.max_nfa_states;
    composed =
        grammar::ComposeGrammar({{grammar::GrammarPart::Literal(std::string(kDeepSeekCallsBegin)),
                                  grammar::GrammarPart::Of(*std::move(composed)),
                                  grammar::GrammarPart::Literal(std::string(kDeepSeekCallsEnd))}},
                                block);
  }
  if (!composed.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("the tool calls cannot be enforced: ",
                                                        composed.status().message())),
                "tools", error_param);
  }
  return composed;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileOutputConstraint(
    const OutputConstraintRequest& request, const ojson& tools, ToolDialect dialect,
    std::string* error_param) {
  const bool format = request.format != OutputConstraintRequest::Format::kText;
  if (format && request.constrains_tools()) {
    return Fail(absl::InvalidArgumentError(
                    "'tool_choice' \"required\" or a named function cannot be combined with a "
                    "JSON 'response_format'"),
                "tool_choice", error_param);
  }
  if (format) return CompileFormat(request, error_param);
  if (request.constrains_tools()) return CompileToolCalls(request, tools, dialect, error_param);
  return Grammar();
}

}  // namespace colibri::coordinator
