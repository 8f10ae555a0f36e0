#include "coordinator/api/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace colibri::coordinator::openai {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr char kParamPayload[] = "colibri.openai/param";
// Most stop strings a request may give.
constexpr size_t kMaxStopStrings = 16;
// Most completions logprobs (OpenAI allows 5; the core reports up to 20).
constexpr int kMaxCompletionLogprobs = kMaxTopLogprobs;
// Deepest nesting of arrays and objects a request body may have. Copying and
// printing a JSON value recurse once per level, so a body of a few hundred
// KiB of brackets would overflow a thread's stack; tool schemas need a few
// dozen levels at most.
constexpr int kMaxJsonDepth = 128;
// Most keys of one object. The parsed objects keep their keys in order and
// find a key by a linear search, so an object of k keys costs k^2 / 2 string
// comparisons to build: 200,000 keys took 20 s. Tool schemas and messages
// have a few dozen.
constexpr int kMaxJsonObjectKeys = 256;
// Most values (arrays, objects, their elements and members) in a body: the
// parsed form takes ~50 bytes per value however short its text, so this
// bounds a body's memory to ~13 MiB and its parse to milliseconds. A prompt
// of 262,000 token ids fits.
constexpr int64_t kMaxJsonValues = int64_t{1} << 18;

absl::Status FieldError(absl::string_view param, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

// The field's value, or null when it is absent or JSON null.
const ojson* Field(const ojson& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// Checks the shape of a JSON text against kMaxJsonDepth, kMaxJsonObjectKeys
// and kMaxJsonValues in one linear pass, before anything is parsed (brackets,
// commas and colons inside strings not counted). Malformed text gets some
// shape; the parser then rejects it.
absl::Status CheckJsonShape(absl::string_view text) {
  // Per open array or object: -1 for an array, else the object's keys.
  std::vector<int> open;
  int64_t values = 1;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        open.push_back(c == '[' ? -1 : 0);
        ++values;
        if (static_cast<int>(open.size()) > kMaxJsonDepth) {
          return FieldError("", absl::StrCat("the request body nests arrays and objects deeper "
                                             "than ", kMaxJsonDepth, " levels"));
        }
        break;
      case ']':
      case '}':
        if (!open.empty()) open.pop_back();
        break;
      case ':':
        if (!open.empty() && open.back() >= 0 && ++open.back() > kMaxJsonObjectKeys) {
          return FieldError("", absl::StrCat("the request body has an object with more than ",
                                             kMaxJsonObjectKeys, " keys"));
        }
        break;
      case ',':
        if (++values > kMaxJsonValues) {
          return FieldError("", absl::StrCat("the request body has more than ", kMaxJsonValues,
                                             " JSON values"));
        }
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ojson> ParseObject(absl::string_view body) {
  if (absl::Status s = CheckJsonShape(body); !s.ok()) return s;
  ojson value = ojson::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return FieldError("", "the request body is not valid JSON");
  if (!value.is_object()) return FieldError("", "the request body must be a JSON object");
  return value;
}

absl::StatusOr<bool> GetBool(const ojson& object, const char* name, bool fallback) {
  const ojson* v = Field(object, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return FieldError(name, absl::StrCat("'", name, "' must be a boolean"));
  return v->get<bool>();
}

// An integer field (an integral float such as 5.0 is accepted too).
absl::StatusOr<std::optional<int64_t>> GetInt(const ojson& object, const char* name) {
  const ojson* v = Field(object, name);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(name, absl::StrCat("'", name, "' is too large"));
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return FieldError(name, absl::StrCat("'", name, "' must be an integer"));
}

absl::StatusOr<std::optional<double>> GetNumber(const ojson& object, const char* name) {
  const ojson* v = Field(object, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return FieldError(name, absl::StrCat("'", name, "' must be a number"));
  const double d = v->get<double>();
  if (!std::isfinite(d)) return FieldError(name, absl::StrCat("'", name, "' must be finite"));
  return std::optional<double>(d);
}

// Sets *out from the number field when given, checking [lo, hi] (lo
// excluded when lo_open).
absl::Status ReadRange(const ojson& object, const char* name, double lo, double hi, bool lo_open,
                       float* out) {
  absl::StatusOr<std::optional<double>> v = GetNumber(object, name);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::OkStatus();
  const double d = **v;
  if (d < lo || d > hi || (lo_open && d == lo)) {
    return FieldError(name, absl::StrCat("'", name, "' must be in ", lo_open ? "(" : "[", lo, ", ",
                                         hi, "], got ", d));
  }
  *out = static_cast<float>(d);
  return absl::OkStatus();
}

// messages: a non-empty array of objects with a string role and a content
// that is a string, null, or an array of text parts (joined).
absl::StatusOr<ojson> NormalizeMessages(const ojson& request) {
  const ojson* messages = Field(request, "messages");
  if (messages == nullptr) return FieldError("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) {
    return FieldError("messages", "'messages' must be a non-empty array");
  }
  ojson out = ojson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const ojson& m = (*messages)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return FieldError(where, absl::StrCat("'", where, "' must be an object"));
    const ojson* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return FieldError(where + ".role", absl::StrCat("'", where, ".role' must be a string"));
    }
    ojson normalized = m;
    const ojson* content = Field(m, "content");
    if (content == nullptr) {
      normalized["content"] = nullptr;
    } else if (content->is_array()) {
      std::string text;
      for (size_t j = 0; j < content->size(); ++j) {
        const ojson& part = (*content)[j];
        const std::string part_where = absl::StrCat(where, ".content[", j, "]");
        const ojson* type = part.is_object() ? Field(part, "type") : nullptr;
        const ojson* part_text = part.is_object() ? Field(part, "text") : nullptr;
        if (type == nullptr || !type->is_string() || *type != "text" || part_text == nullptr ||
            !part_text->is_string()) {
          return FieldError(part_where, absl::StrCat("'", part_where,
                                                     "' must be a text part "
                                                     "{\"type\": \"text\", \"text\": ...}"));
        }
        text += part_text->get<std::string>();
      }
      normalized["content"] = text;
    } else if (!content->is_string()) {
      return FieldError(where + ".content",
                        absl::StrCat("'", where, ".content' must be a string or an array"));
    }
    out.push_back(std::move(normalized));
  }
  return out;
}

absl::StatusOr<ojson> Tools(const ojson& request) {
  const ojson* tools = Field(request, "tools");
  if (tools == nullptr) return ojson(nullptr);
  if (!tools->is_array()) return FieldError("tools", "'tools' must be an array");
  return *tools;
}

// Fields whose meaning this server cannot honour: a 400 naming them rather
// than an answer that ignores them.
absl::Status RefuseUnsupported(const ojson& request) {
  static constexpr const char* kConstraints[] = {"grammar",       "guided_regex", "guided_grammar",
                                                 "guided_choice", "functions",    "function_call"};
  for (const char* name : kConstraints) {
    if (const ojson* f = Field(request, name); f != nullptr && !f->is_null()) {
      return FieldError(name, absl::StrCat("'", name,
                                           "' is not supported; constrain the output with "
                                           "'response_format' (json_object, json_schema) or "
                                           "'tools' with 'tool_choice'"));
    }
  }
  return absl::OkStatus();
}

// The other servers' spellings of a JSON Schema constraint: llama-server's
// top-level "json_schema" (a schema) and vLLM's "guided_json" (a schema, or
// a string holding one). Each is response_format json_schema with that
// schema; more than one constraint in a request is a 400 naming the second.
absl::Status ParseSchemaAliases(const ojson& request, ApiRequest* out) {
  using Format = OutputConstraintRequest::Format;
  bool constrained = out->output.format != Format::kText;  // by response_format
  for (const char* name : {"json_schema", "guided_json"}) {
    const ojson* given = Field(request, name);
    if (given == nullptr || given->is_null()) continue;
    if (constrained) {
      return FieldError(name, absl::StrCat("'", name,
                                           "' and another output constraint "
                                           "('response_format', 'json_schema', 'guided_json') "
                                           "cannot be combined"));
    }
    ojson schema = *given;
    if (given->is_string() && absl::string_view(name) == "guided_json") {
      const std::string& text = given->get_ref<const std::string&>();
      // The same bounds as the body's own JSON.
      if (absl::Status shape = CheckJsonShape(text); !shape.ok()) {
        return FieldError(name, absl::StrCat("'guided_json': ", shape.message()));
      }
      schema = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    }
    if (!schema.is_object() && !schema.is_boolean()) {
      return FieldError(name, absl::StrCat("'", name, "' must be a JSON Schema (an object)"));
    }
    out->output.format = Format::kJsonSchema;
    out->output.json_schema = std::move(schema);
    constrained = true;
  }
  return absl::OkStatus();
}

// response_format: "text" (free text), "json_object" (any JSON object) or
// "json_schema" with json_schema.schema, kept in out->output.
absl::Status ParseResponseFormat(const ojson& request, ApiRequest* out) {
  using Format = OutputConstraintRequest::Format;
  const ojson* format = Field(request, "response_format");
  if (format == nullptr) return absl::OkStatus();
  const ojson* type = format->is_object() ? Field(*format, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return FieldError("response_format", "'response_format' must be an object with a 'type'");
  }
  const std::string kind = type->get<std::string>();
  if (kind == "text") return absl::OkStatus();
  if (kind == "json_object") {
    out->output.format = Format::kJsonObject;
    return absl::OkStatus();
  }
  if (kind != "json_schema") {
    return FieldError("response_format",
                      absl::StrCat("'response_format' of type '", kind,
                                   "' is not supported; only 'text', 'json_object' and "
                                   "'json_schema'"));
  }
  const ojson* spec = Field(*format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return FieldError("response_format",
                      "'response_format.json_schema' must be an object with a 'schema'");
  }
  if (const ojson* strict = Field(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    return FieldError("response_format", "'response_format.json_schema.strict' must be a boolean");
  }
  const ojson* given = Field(*spec, "schema");
  if (given == nullptr) {
    return FieldError("response_format", "'response_format.json_schema.schema' is required");
  }
  if (!given->is_object() && !given->is_boolean()) {
    return FieldError("response_format",
                      "'response_format.json_schema.schema' must be a JSON Schema (an object)");
  }
  out->output.format = Format::kJsonSchema;
  out->output.json_schema = *given;
  return absl::OkStatus();
}

// tool_choice: "auto" (the default), "none", "required" or
// {"type": "function", "function": {"name": N}}; parallel_tool_calls.
absl::Status ParseToolChoice(const ojson& request, ApiRequest* out) {
  using Choice = OutputConstraintRequest::ToolChoice;
  const ojson* choice = Field(request, "tool_choice");
  Choice value = Choice::kAuto;
  if (choice != nullptr && choice->is_object()) {
    const ojson* type = Field(*choice, "type");
    const ojson* function = Field(*choice, "function");
    const ojson* name =
        function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
    if (type == nullptr || *type != "function" || name == nullptr || !name->is_string() ||
        name->get<std::string>().empty()) {
      return FieldError("tool_choice",
                        "'tool_choice' naming a function must be {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
    }
    value = Choice::kNamed;
    out->output.tool_name = name->get<std::string>();
  } else if (choice != nullptr) {
    if (!choice->is_string()) {
      return FieldError("tool_choice", "'tool_choice' must be a string or an object");
    }
    const std::string text = choice->get<std::string>();
    if (text == "none") {
      value = Choice::kNone;
    } else if (text == "required") {
      value = Choice::kRequired;
    } else if (text != "auto") {
      return FieldError("tool_choice",
                        absl::StrCat("'tool_choice' must be \"auto\", \"none\", \"required\" "
                                     "or a named function, got \"",
                                     text, "\""));
    }
  }
  const bool has_tools = !out->tools.is_null() && !out->tools.empty();
  if ((value == Choice::kRequired || value == Choice::kNamed) && !has_tools) {
    return FieldError("tool_choice",
                      "'tool_choice' \"required\" or a named function needs 'tools'");
  }
  absl::StatusOr<bool> parallel = GetBool(request, "parallel_tool_calls", true);
  if (!parallel.ok()) return parallel.status();
  out->output.tool_choice = value;
  out->output.parallel_tool_calls = *parallel;
  out->parse_tool_calls = has_tools && value != Choice::kNone;
  return absl::OkStatus();
}

absl::Status ParsePrompt(const ojson& request, const ApiLimits& limits, ApiRequest* out) {
  const ojson* prompt = Field(request, "prompt");
  if (prompt == nullptr) return FieldError("prompt", "'prompt' is required");
  const ojson* p = prompt;
  // A batch of one prompt is the same as the prompt.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    p = &(*p)[0];
  }
  if (p->is_string()) {
    out->prompt = p->get<std::string>();
    if (out->prompt.empty()) return FieldError("prompt", "'prompt' is empty");
    return absl::OkStatus();
  }
  if (!p->is_array()) {
    return FieldError("prompt", "'prompt' must be a string or an array of token ids");
  }
  if (p->empty()) return FieldError("prompt", "'prompt' has no tokens");
  for (size_t i = 0; i < p->size(); ++i) {
    const ojson& id = (*p)[i];
    if (!id.is_number_integer()) {
      return FieldError("prompt",
                        "'prompt' must be a string or an array of token ids (one prompt only)");
    }
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v >= limits.n_vocab) {
      return FieldError("prompt",
                        absl::StrCat("prompt token ", i, " is ", v, ", outside the vocabulary [0, ",
                                     limits.n_vocab, ")"));
    }
    out->prompt_ids.push_back(static_cast<int32_t>(v));
  }
  if (static_cast<int64_t>(out->prompt_ids.size()) > limits.n_ctx) {
    return FieldError("prompt", absl::StrCat("the prompt has ", out->prompt_ids.size(),
                                             " tokens, more than the context of ", limits.n_ctx));
  }
  out->prompt_is_ids = true;
  return absl::OkStatus();
}

absl::Status ParseStop(const ojson& request, ApiRequest* out) {
  const ojson* stop = Field(request, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    if (!stop->get<std::string>().empty()) out->stop.push_back(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array())
    return FieldError("stop", "'stop' must be a string or an array of strings");
  if (stop->size() > kMaxStopStrings) {
    return FieldError(
        "stop", absl::StrCat("'stop' has ", stop->size(), " strings, more than ", kMaxStopStrings));
  }
  for (const ojson& s : *stop) {
    if (!s.is_string()) return FieldError("stop", "'stop' must be a string or an array of strings");
    if (!s.get<std::string>().empty()) out->stop.push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(Endpoint endpoint, const ojson& request, ApiRequest* out) {
  if (endpoint == Endpoint::kChatCompletions) {
    absl::StatusOr<bool> logprobs = GetBool(request, "logprobs", false);
    if (!logprobs.ok()) return logprobs.status();
    out->logprobs = *logprobs;
    absl::StatusOr<std::optional<int64_t>> top = GetInt(request, "top_logprobs");
    if (!top.ok()) return top.status();
    if (top->has_value()) {
      if (**top < 0 || **top > kMaxTopLogprobs) {
        return FieldError("top_logprobs", absl::StrCat("'top_logprobs' must be in [0, ",
                                                       kMaxTopLogprobs, "], got ", **top));
      }
      if (!out->logprobs && **top > 0) {
        return FieldError("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      }
      out->top_logprobs = static_cast<int>(**top);
    }
    return absl::OkStatus();
  }
  const ojson* v = Field(request, "logprobs");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_boolean()) {
    out->logprobs = v->get<bool>();
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<int64_t>> n = GetInt(request, "logprobs");
  if (!n.ok()) return n.status();
  if (**n < 0 || **n > kMaxCompletionLogprobs) {
    return FieldError("logprobs", absl::StrCat("'logprobs' must be in [0, ", kMaxCompletionLogprobs,
                                               "], got ", **n));
  }
  out->logprobs = true;
  out->top_logprobs = static_cast<int>(**n);
  return absl::OkStatus();
}

absl::Status ParseSampling(const ojson& request, ApiRequest* out) {
  sampling::SamplingOptions& s = out->sampling;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  if (absl::Status st = ReadRange(request, "temperature", 0, 100, false, &s.temperature);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ReadRange(request, "top_p", 0, 1, true, &s.top_p); !st.ok()) return st;
  if (absl::Status st = ReadRange(request, "min_p", 0, 1, false, &s.min_p); !st.ok()) return st;
  if (absl::Status st = ReadRange(request, "presence_penalty", -2, 2, false, &s.presence_penalty);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ReadRange(request, "frequency_penalty", -2, 2, false, &s.frequency_penalty);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ReadRange(request, "repeat_penalty", 0, 10, true, &s.repeat_penalty);
      !st.ok()) {
    return st;
  }
  absl::StatusOr<std::optional<int64_t>> top_k = GetInt(request, "top_k");
  if (!top_k.ok()) return top_k.status();
  if (top_k->has_value()) {
    if (**top_k < 0 || **top_k > std::numeric_limits<int32_t>::max()) {
      return FieldError("top_k", absl::StrCat("'top_k' must be >= 0, got ", **top_k));
    }
    s.top_k = static_cast<int32_t>(**top_k);
  }
  absl::StatusOr<std::optional<int64_t>> seed = GetInt(request, "seed");
  if (!seed.ok()) return seed.status();
  if (seed->has_value()) {
    s.seed = static_cast<uint64_t>(**seed);
    out->has_seed = true;
  }
  return absl::OkStatus();
}

}  // namespace

std::string ParamOf(const absl::Status& status) {
  const auto param = status.GetPayload(kParamPayload);
  return param.has_value() ? std::string(*param) : std::string();
}

absl::StatusOr<ApiRequest> ParseRequest(Endpoint endpoint, absl::string_view body,
                                        const ApiLimits& limits) {
  absl::StatusOr<ojson> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  const ojson& request = *parsed;
  ApiRequest out;
  out.endpoint = endpoint;

  if (endpoint == Endpoint::kChatCompletions) {
    absl::StatusOr<ojson> messages = NormalizeMessages(request);
    if (!messages.ok()) return messages.status();
    out.messages = std::move(*messages);
    absl::StatusOr<ojson> tools = Tools(request);
    if (!tools.ok()) return tools.status();
    out.tools = std::move(*tools);
    if (absl::Status s = ParseToolChoice(request, &out); !s.ok()) return s;
  } else {
    if (absl::Status s = ParsePrompt(request, limits, &out); !s.ok()) return s;
  }

  if (absl::Status s = RefuseUnsupported(request); !s.ok()) return s;
  if (absl::Status s = ParseResponseFormat(request, &out); !s.ok()) return s;
  if (absl::Status s = ParseSchemaAliases(request, &out); !s.ok()) return s;
  absl::StatusOr<std::optional<int64_t>> n = GetInt(request, "n");
  if (!n.ok()) return n.status();
  if (n->has_value() && **n != 1) {
    return FieldError("n", absl::StrCat("'n' must be 1 (one choice per request), got ", **n));
  }
  // max_completion_tokens replaces the deprecated max_tokens when both come.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    absl::StatusOr<std::optional<int64_t>> v = GetInt(request, name);
    if (!v.ok()) return v.status();
    if (!v->has_value()) continue;
    if (**v < 1) return FieldError(name, absl::StrCat("'", name, "' must be >= 1, got ", **v));
    if (**v > limits.n_ctx) {
      return FieldError(name, absl::StrCat("'", name, "' is ", **v, ", more than the context of ",
                                           limits.n_ctx, " tokens"));
    }
    out.max_tokens = static_cast<int>(**v);
  }
  if (absl::Status s = ParseSampling(request, &out); !s.ok()) return s;
  if (absl::Status s = ParseStop(request, &out); !s.ok()) return s;
  if (absl::Status s = ParseLogprobs(endpoint, request, &out); !s.ok()) return s;

  absl::StatusOr<bool> stream = GetBool(request, "stream", false);
  if (!stream.ok()) return stream.status();
  out.stream = *stream;
  if (const ojson* options = Field(request, "stream_options"); options != nullptr) {
    if (!options->is_object()) {
      return FieldError("stream_options", "'stream_options' must be an object");
    }
    absl::StatusOr<bool> usage = GetBool(*options, "include_usage", false);
    if (!usage.ok()) {
      return FieldError("stream_options.include_usage",
                        "'stream_options.include_usage' must be a boolean");
    }
    out.include_usage = *usage;
  }
  absl::StatusOr<bool> ignore_eos = GetBool(request, "ignore_eos", false);
  if (!ignore_eos.ok()) return ignore_eos.status();
  out.ignore_eos = *ignore_eos;
  if (const ojson* user = Field(request, "user"); user != nullptr && !user->is_string()) {
    return FieldError("user", "'user' must be a string");
  }
  if (const ojson* model = Field(request, "model"); model != nullptr && !model->is_string()) {
    return FieldError("model", "'model' must be a string");
  }
  return out;
}

absl::StatusOr<ojson> ParseJsonValue(absl::string_view text) {
  if (absl::Status s = CheckJsonShape(text); !s.ok()) return s;
  ojson value = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return FieldError("", "not valid JSON");
  return value;
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body) {
  absl::StatusOr<ojson> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  TokenizeRequest out;
  const ojson* content = Field(*parsed, "content");
  if (content == nullptr || !content->is_string()) {
    return FieldError("content", "'content' must be a string");
  }
  out.content = content->get<std::string>();
  absl::StatusOr<bool> add = GetBool(*parsed, "add_special", false);
  if (!add.ok()) return add.status();
  absl::StatusOr<bool> parse = GetBool(*parsed, "parse_special", true);
  if (!parse.ok()) return parse.status();
  out.add_special = *add;
  out.parse_special = *parse;
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body, int n_vocab) {
  absl::StatusOr<ojson> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  const ojson* tokens = Field(*parsed, "tokens");
  if (tokens == nullptr || !tokens->is_array()) {
    return FieldError("tokens", "'tokens' must be an array of token ids");
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const ojson& id = (*tokens)[i];
    if (!id.is_number_integer()) return FieldError("tokens", "'tokens' must hold integers");
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v >= n_vocab) {
      return FieldError("tokens", absl::StrCat("token ", i, " is ", v,
                                               ", outside the vocabulary [0, ", n_vocab, ")"));
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

absl::StatusOr<TemplateRequest> ParseTemplateRequest(absl::string_view body) {
  absl::StatusOr<ojson> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  TemplateRequest out;
  absl::StatusOr<ojson> messages = NormalizeMessages(*parsed);
  if (!messages.ok()) return messages.status();
  out.messages = std::move(*messages);
  absl::StatusOr<ojson> tools = Tools(*parsed);
  if (!tools.ok()) return tools.status();
  out.tools = std::move(*tools);
  absl::StatusOr<bool> add = GetBool(*parsed, "add_generation_prompt", true);
  if (!add.ok()) return add.status();
  out.add_generation_prompt = *add;
  return out;
}

ApiError MakeError(int http_status, absl::string_view message, absl::string_view param) {
  const char* type = "invalid_request_error";
  json code = nullptr;
  switch (http_status) {
    case 401:
      type = "authentication_error";
      code = "invalid_api_key";
      break;
    case 404:
      code = "not_found";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    default:
      if (http_status >= 500) type = "server_error";
  }
  ApiError error;
  error.http_status = http_status;
  error.body = {{"error",
                 {{"message", std::string(message)},
                  {"type", type},
                  {"param", param.empty() ? json(nullptr) : json(std::string(param))},
                  {"code", code}}}};
  return error;
}

ApiError ErrorFromStatus(const absl::Status& status, absl::string_view param) {
  int http = 500;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      http = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      http = 401;
      break;
    case absl::StatusCode::kNotFound:
      http = 404;
      break;
    case absl::StatusCode::kResourceExhausted:
      http = 429;
      break;
    case absl::StatusCode::kUnimplemented:
      http = 501;
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:  // only a shutting-down server cancels a live request
      http = 503;
      break;
    default:
      break;
  }
  return MakeError(http, status.message(), param.empty() ? ParamOf(status) : std::string(param));
}

}  // namespace colibri::coordinator::openai
