#include "coordinator/api/output_constraint.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
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

// One function a call may name: its name and its arguments' schema.
struct Callable {
  std::string name;
  ojson schema;
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

// The functions a call may name (all, or the one of kNamed).
absl::StatusOr<std::vector<Callable>> Callables(const OutputConstraintRequest& request,
                                                const ojson& tools, std::string* error_param) {
  if (!tools.is_array() || tools.empty()) {
    return Fail(
        absl::InvalidArgumentError("'tool_choice' \"required\" or a named function needs 'tools'"),
        "tool_choice", error_param);
  }
  std::vector<Callable> out;
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
    out.push_back({name, *std::move(schema)});
  }
  if (out.empty()) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("'tool_choice' names function '", request.tool_name,
                                                "', which is not among 'tools'")),
        "tool_choice", error_param);
  }
  return out;
}

// Compiles `schema` within what is left of *budget (all of a request's
// functions share one, so that many tools cost what one large schema may)
// and takes what it used; `what` names the schema in an error.
absl::StatusOr<Grammar> CompileWithin(const ojson& schema, grammar::SchemaCompileOptions* budget,
                                      const std::string& what) {
  absl::StatusOr<Grammar> compiled = grammar::CompileJsonSchema(schema, *budget);
  if (!compiled.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " cannot be enforced: ", compiled.status().message()));
  }
  const size_t used = (*compiled)->nfa.size();
  budget->max_nfa_states = used < budget->max_nfa_states ? budget->max_nfa_states - used : 0;
  return compiled;
}

// True when `g` holds a value of an unconstrained schema (calls on the
// matcher's stack), which no excluded text can be intersected with.
bool NestsFreeValues(const grammar::CompiledGrammar& g) {
  for (const grammar::NfaState& state : g.nfa.states()) {
    for (const grammar::OpEdge& op : state.ops) {
      if (op.op == grammar::StackOp::kCall) return true;
    }
  }
  return false;
}

// What a GLM-4.5 value must not contain: the tags the parser looks for.
const std::vector<std::string>& GlmClosingTags() {
  static const std::vector<std::string>* tags =
      new std::vector<std::string>{"</arg_value>", "</tool_call>"};
  return *tags;
}

// The keywords of a raw-text parameter's schema that its text can follow.
bool GlmRawTextKeyword(const std::string& keyword) {
  static constexpr absl::string_view kKnown[] = {
      "type",    "enum",  "const", "minLength", "maxLength", "description",
      "title",   "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"};
  return std::find(std::begin(kKnown), std::end(kKnown), keyword) != std::end(kKnown);
}

// The keywords of the arguments object that the fixed key order can follow.
bool GlmObjectKeyword(const std::string& keyword) {
  static constexpr absl::string_view kKnown[] = {
      "type", "properties", "required", "additionalProperties", "description", "title",
      "$defs", "definitions", "$schema", "$id", "$comment", "default", "examples", "strict"};
  return std::find(std::begin(kKnown), std::end(kKnown), keyword) != std::end(kKnown);
}

// The value of a raw-text parameter `key` (GlmRawTextParameter): one of its
// enum/const strings, or text within its length bounds, without the closing
// tags.
absl::StatusOr<grammar::GrammarPart> GlmRawValue(const ojson& schema, const std::string& key,
                                                 const std::string& function) {
  const std::string where = absl::StrCat("parameter '", key, "' of function '", function, "'");
  for (const auto& [keyword, value] : schema.items()) {
    if (!GlmRawTextKeyword(keyword)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GLM-4.5 tool calls write string values as raw text, which cannot follow '",
                       keyword, "' (", where, ")"));
    }
  }
  const auto bound = [&](const char* name, int fallback) -> absl::StatusOr<int> {
    const auto it = schema.find(name);
    if (it == schema.end()) return fallback;
    if (!it->is_number_unsigned() || it->get<uint64_t>() > (1u << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' must be an integer in [0, 2^20] (", where, ")"));
    }
    return static_cast<int>(it->get<uint64_t>());
  };
  absl::StatusOr<int> min = bound("minLength", 0);
  if (!min.ok()) return min.status();
  absl::StatusOr<int> max = bound("maxLength", -1);
  if (!max.ok()) return max.status();
  std::vector<std::string> values;
  if (schema.contains("const")) {
    values.push_back(schema["const"].get<std::string>());
  } else if (schema.contains("enum")) {
    for (const ojson& v : schema["enum"]) values.push_back(v.get<std::string>());
  } else {
    if (*max >= 0 && *max < *min) {
      return absl::InvalidArgumentError(absl::StrCat("minLength is above maxLength (", where, ")"));
    }
    return grammar::GrammarPart::Text(*min, *max, GlmClosingTags());
  }
  // Enumerated strings: alternatives of their literal text (those that fit
  // the length bounds and hold no closing tag).
  std::vector<grammar::GrammarSequence> alternatives;
  for (const std::string& v : values) {
    int chars = 0;
    for (unsigned char c : v) chars += (c & 0xC0) != 0x80 ? 1 : 0;
    if (chars < *min || (*max >= 0 && chars > *max)) continue;
    bool tagged = false;
    for (const std::string& tag : GlmClosingTags()) tagged = tagged || v.find(tag) != v.npos;
    if (!tagged) alternatives.push_back({grammar::GrammarPart::Literal(v)});
  }
  if (alternatives.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no value of ", where, " can be written as a GLM-4.5 argument"));
  }
  absl::StatusOr<Grammar> g = grammar::ComposeGrammar(alternatives, {});
  if (!g.ok()) return g.status();
  return grammar::GrammarPart::Of(*std::move(g));
}

// A GLM-4.5 call's arguments: "<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n"
// per key, the keys in a fixed order (the properties as declared, then the
// required keys not among them) so that none repeats; required keys always,
// the others optionally. V is raw text for a parameter that takes only
// strings, else compact JSON of its schema (with the root's $defs).
absl::StatusOr<grammar::GrammarSequence> GlmArguments(const Callable& c,
                                                      grammar::SchemaCompileOptions* budget) {
  const ojson& schema = c.schema;
  for (const auto& [keyword, value] : schema.items()) {
    if (!GlmObjectKeyword(keyword)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GLM-4.5 tool calls cannot enforce '", keyword, "' on the parameters of function '",
          c.name, "' (their keys are written one by one in a fixed order)"));
    }
  }
  const ojson no_properties = ojson::object();
  const ojson& properties = schema.contains("properties") && schema["properties"].is_object()
                                ? schema["properties"]
                                : no_properties;
  std::vector<std::string> required;
  if (schema.contains("required") && schema["required"].is_array()) {
    for (const ojson& k : schema["required"]) {
      if (k.is_string()) required.push_back(k.get<std::string>());
    }
  }
  const auto is_required = [&](const std::string& k) {
    return std::find(required.begin(), required.end(), k) != required.end();
  };
  std::vector<std::pair<std::string, ojson>> keys;
  for (const auto& [k, v] : properties.items()) keys.emplace_back(k, v);
  for (const std::string& k : required) {
    if (properties.contains(k)) continue;
    const ojson extra = schema.contains("additionalProperties") ? schema["additionalProperties"]
                                                                : ojson(true);
    if (extra == false) {
      return absl::InvalidArgumentError(absl::StrCat("required key '", k, "' of function '",
                                                     c.name, "' is not among its properties"));
    }
    keys.emplace_back(k, extra);
  }
  grammar::GrammarSequence out;
  for (const auto& [key, property] : keys) {
    if (key.empty() || key.find_first_of("<>\n") != std::string::npos ||
        absl::StripAsciiWhitespace(key) != key) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", key, "' of function '", c.name, "' cannot be a GLM-4.5 argument key"));
    }
    grammar::GrammarSequence entry = {grammar::GrammarPart::Literal(
        absl::StrCat("<arg_key>", key, "</arg_key>\n<arg_value>"))};
    if (GlmRawTextParameter(property)) {
      absl::StatusOr<grammar::GrammarPart> value = GlmRawValue(property, key, c.name);
      if (!value.ok()) return value.status();
      entry.push_back(*std::move(value));
    } else {
      ojson value_schema = property;
      for (const char* defs : {"$defs", "definitions"}) {
        if (value_schema.is_object() && schema.contains(defs) && !value_schema.contains(defs)) {
          value_schema[defs] = schema[defs];
        }
      }
      absl::StatusOr<Grammar> value = CompileWithin(
          value_schema, budget,
          absl::StrCat("parameter '", key, "' of function '", c.name, "'"));
      if (!value.ok()) return value.status();
      if (NestsFreeValues(**value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", key, "' of function '", c.name,
            "' takes a value of an unconstrained schema (free JSON nesting to any depth), which "
            "GLM-4.5 tool calls cannot keep from containing </arg_value>; give it a type"));
      }
      entry.push_back(grammar::GrammarPart::Of(*std::move(value), GlmClosingTags()));
    }
    entry.push_back(grammar::GrammarPart::Literal("</arg_value>\n"));
    if (is_required(key)) {
      for (grammar::GrammarPart& part : entry) out.push_back(std::move(part));
      continue;
    }
    grammar::ComposeOptions optional;
    optional.max_nfa_states = budget->max_nfa_states;
    absl::StatusOr<Grammar> maybe =
        grammar::ComposeGrammar({entry, {grammar::GrammarPart::Literal("")}}, optional);
    if (!maybe.ok()) return maybe.status();
    out.push_back(grammar::GrammarPart::Of(*std::move(maybe)));
  }
  return out;
}

// One call's alternative in `dialect`'s syntax.
absl::StatusOr<grammar::GrammarSequence> CallSyntax(const Callable& c, ToolDialect dialect,
                                                    grammar::SchemaCompileOptions* budget) {
  if (dialect == ToolDialect::kGlm45) {
    if (c.name.find_first_of("<>\n \t\r") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("function name '", c.name, "' cannot be written in a GLM-4.5 tool call"));
    }
    absl::StatusOr<grammar::GrammarSequence> arguments = GlmArguments(c, budget);
    if (!arguments.ok()) return arguments.status();
    grammar::GrammarSequence call = {
        grammar::GrammarPart::Literal(absl::StrCat("<tool_call>", c.name, "\n"))};
    for (grammar::GrammarPart& part : *arguments) call.push_back(std::move(part));
    call.push_back(grammar::GrammarPart::Literal("</tool_call>"));
    return call;
  }
  absl::StatusOr<Grammar> arguments =
      CompileWithin(c.schema, budget, absl::StrCat("the parameters of function '", c.name, "'"));
  if (!arguments.ok()) return arguments.status();
  if (dialect == ToolDialect::kHarmony) {
    if (c.name.find_first_of("<> \t\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("function name '", c.name, "' cannot be written in a gpt-oss tool call"));
    }
    return grammar::GrammarSequence{
        grammar::GrammarPart::Literal(absl::StrCat(
            "<|channel|>commentary to=functions.", c.name, " <|constrain|>json<|message|>")),
        grammar::GrammarPart::Of(*std::move(arguments))};
  }
  if (dialect == ToolDialect::kHermes) {
    return grammar::GrammarSequence{
        grammar::GrammarPart::Literal(
            absl::StrCat("<tool_call>\n{\"name\": ", ojson(c.name).dump(), ", \"arguments\": ")),
        grammar::GrammarPart::Of(*std::move(arguments)),
        grammar::GrammarPart::Literal("}\n</tool_call>")};
  }
  return grammar::GrammarSequence{
      grammar::GrammarPart::Literal(absl::StrCat(kDeepSeekCallBegin, c.name, kDeepSeekSep)),
      grammar::GrammarPart::Of(*std::move(arguments)),
      grammar::GrammarPart::Literal(std::string(kDeepSeekCallEnd))};
}

absl::StatusOr<Grammar> CompileToolCalls(const OutputConstraintRequest& request, const ojson& tools,
                                         ToolDialect dialect, std::string* error_param) {
  switch (dialect) {
    case ToolDialect::kHermes:
    case ToolDialect::kDeepSeekV3:
    case ToolDialect::kGlm45:
    case ToolDialect::kHarmony:
      break;
    case ToolDialect::kNone:
      return Fail(absl::FailedPreconditionError(
                      "'tool_choice' \"required\" or a named function needs a model whose "
                      "tool-call syntax this server knows (Hermes/Qwen, GLM-4.5, DeepSeek-V3, "
                      "gpt-oss); use \"auto\""),
                  "tool_choice", error_param);
  }
  absl::StatusOr<std::vector<Callable>> callables = Callables(request, tools, error_param);
  if (!callables.ok()) return callables.status();

  grammar::SchemaCompileOptions budget = kOutputSchemaCompile;
  std::vector<grammar::GrammarSequence> alternatives;
  for (const Callable& c : *callables) {
    absl::StatusOr<grammar::GrammarSequence> call = CallSyntax(c, dialect, &budget);
    if (!call.ok()) return Fail(call.status(), "tools", error_param);
    alternatives.push_back(*std::move(call));
  }
  grammar::ComposeOptions calls;
  calls.max_nfa_states = kOutputSchemaCompile.max_nfa_states;
  // A harmony call ends the generation (<|call|>): one per reply.
  calls.max_repeats = request.parallel_tool_calls && dialect != ToolDialect::kHarmony
                          ? kMaxParallelToolCalls
                          : 1;
  if (dialect != ToolDialect::kDeepSeekV3) calls.separator = "\n";
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
