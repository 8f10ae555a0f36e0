#include "coordinator/api/assistant_output.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {
namespace {

using json = nlohmann::ordered_json;

constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";
constexpr absl::string_view kToolCallOpen = "<tool_call>";
constexpr absl::string_view kToolCallClose = "</tool_call>";

// The longest suffix of `text` that is a proper prefix of `marker`.
size_t HeldFor(absl::string_view text, absl::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k) {
    if (absl::EndsWith(text, marker.substr(0, k))) return k;
  }
  return 0;
}

// A JSON object's compact text from `text` (an object, or a string holding
// one); false otherwise.
bool ArgumentsFrom(const json& value, std::string* out) {
  if (value.is_object()) {
    *out = value.dump();
    return true;
  }
  if (value.is_string()) {
    json inner = json::parse(value.get<std::string>(), nullptr, false);
    if (inner.is_object()) {
      *out = inner.dump();
      return true;
    }
  }
  return false;
}

bool ParseHermes(absl::string_view body, std::string* name, std::string* arguments) {
  json call = json::parse(absl::StripAsciiWhitespace(body), nullptr, false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return false;
  *name = call["name"].get<std::string>();
  if (!call.contains("arguments") && !call.contains("parameters")) {
    *arguments = "{}";
    return !name->empty();
  }
  return !name->empty() &&
         ArgumentsFrom(call.contains("arguments") ? call["arguments"] : call["parameters"],
                       arguments);
}

// `raw_keys`: per function, the parameters whose values are text as written.
bool ParseGlm45(absl::string_view body, const std::map<std::string, std::set<std::string>>& raw_keys,
                std::string* name, std::string* arguments) {
  constexpr absl::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>";
  constexpr absl::string_view kValue = "<arg_value>", kValueEnd = "</arg_value>";
  const size_t first = body.find(kKey);
  *name = std::string(absl::StripAsciiWhitespace(body.substr(0, first)));
  if (name->empty() || name->find_first_of("<>\n") != std::string::npos) return false;
  const auto raw = raw_keys.find(*name);
  json args = json::object();
  absl::string_view rest = first == absl::string_view::npos ? "" : body.substr(first);
  while (!absl::StripAsciiWhitespace(rest).empty()) {
    rest = absl::StripLeadingAsciiWhitespace(rest);
    if (!absl::ConsumePrefix(&rest, kKey)) return false;
    const size_t key_end = rest.find(kKeyEnd);
    if (key_end == absl::string_view::npos) return false;
    const std::string key(absl::StripAsciiWhitespace(rest.substr(0, key_end)));
    rest = absl::StripLeadingAsciiWhitespace(rest.substr(key_end + kKeyEnd.size()));
    if (!absl::ConsumePrefix(&rest, kValue)) return false;
    const size_t value_end = rest.find(kValueEnd);
    if (value_end == absl::string_view::npos) return false;
    const std::string value(rest.substr(0, value_end));
    rest = rest.substr(value_end + kValueEnd.size());
    if (raw != raw_keys.end() && raw->second.count(key) > 0) {
      args[key] = value;
      continue;
    }
    json parsed = json::parse(value, nullptr, false);
    args[key] = parsed.is_discarded() ? json(value) : std::move(parsed);
  }
  // Raw text may hold bytes that are not UTF-8 (a model writes any): they
  // become U+FFFD, as they do in the response's own serialization.
  *arguments = args.dump(-1, ' ', false, json::error_handler_t::replace);
  return true;
}

// One DeepSeek call, between its begin and end markers.
bool ParseDeepSeekCall(absl::string_view call, std::string* name, std::string* arguments) {
  absl::ConsumePrefix(&call, "function");
  absl::ConsumePrefix(&call, kDeepSeekSep);
  absl::string_view args;
  const size_t sep = call.find(kDeepSeekSep);
  if (sep != absl::string_view::npos) {  // V3.1: NAME<sep>ARGS
    *name = std::string(absl::StripAsciiWhitespace(call.substr(0, sep)));
    args = call.substr(sep + kDeepSeekSep.size());
  } else {  // V3: NAME\n```json\nARGS\n```
    const size_t nl = call.find('\n');
    if (nl == absl::string_view::npos) return false;
    *name = std::string(absl::StripAsciiWhitespace(call.substr(0, nl)));
    args = absl::StripAsciiWhitespace(call.substr(nl + 1));
    if (absl::ConsumePrefix(&args, "```")) {
      absl::ConsumePrefix(&args, "json");
      if (!absl::ConsumeSuffix(&args, "```")) return false;
    }
  }
  if (name->empty()) return false;
  return ArgumentsFrom(json::parse(absl::StripAsciiWhitespace(args), nullptr, false), arguments);
}

}  // namespace

bool GlmRawTextParameter(const json& schema) {
  if (!schema.is_object()) return false;
  const auto type = schema.find("type");
  if (type != schema.end()) {
    return *type == "string" || (type->is_array() && type->size() == 1 && (*type)[0] == "string");
  }
  const auto values = schema.find("enum");
  if (values != schema.end()) {
    if (!values->is_array() || values->empty()) return false;
    for (const json& v : *values) {
      if (!v.is_string()) return false;
    }
    return true;
  }
  const auto constant = schema.find("const");
  return constant != schema.end() && constant->is_string();
}

OutputDialect DialectFor(absl::string_view arch, absl::string_view chat_template,
                         absl::string_view prompt) {
  OutputDialect d;
  if (absl::StrContains(chat_template, "<|channel|>") || arch == "gpt-oss") {
    d.tools = ToolDialect::kHarmony;
    return d;  // reasoning is a channel, not a think block
  } else if (absl::StrContains(chat_template, "tool▁calls▁begin")) {
    d.tools = ToolDialect::kDeepSeekV3;
  } else if (absl::StrContains(chat_template, "<arg_key>")) {
    d.tools = ToolDialect::kGlm45;
  } else if (absl::StrContains(chat_template, "<tool_call>")) {
    d.tools = ToolDialect::kHermes;
  } else if (absl::StartsWith(arch, "qwen")) {
    d.tools = ToolDialect::kHermes;  // the Qwen families' syntax when a template omits it
  }
  d.think = absl::StrContains(chat_template, "<think>") || absl::StrContains(prompt, "<think>");
  d.starts_in_reasoning =
      d.think && absl::EndsWith(absl::StripTrailingAsciiWhitespace(prompt), kThinkOpen);
  return d;
}

AssistantOutputParser::AssistantOutputParser(OutputDialect dialect, bool parse_tools,
                                             std::string id_prefix)
    : dialect_(dialect),
      parse_tools_(parse_tools),
      id_prefix_(std::move(id_prefix)),
      mode_(dialect.starts_in_reasoning ? Mode::kReasoning : Mode::kContent) {
  if (!parse_tools_) return;
  switch (dialect_.tools) {
    case ToolDialect::kHermes:
    case ToolDialect::kGlm45:
      open_tools_ = std::string(kToolCallOpen);
      close_tools_ = std::string(kToolCallClose);
      break;
    case ToolDialect::kDeepSeekV3:
      open_tools_ = std::string(kDeepSeekCallsBegin);
      close_tools_ = std::string(kDeepSeekCallsEnd);
      break;
    case ToolDialect::kHarmony:  // DrainHarmony reads its own markers
    case ToolDialect::kNone:
      break;
  }
}

void AssistantOutputParser::set_tools(const json& tools) {
  raw_text_keys_.clear();
  if (!tools.is_array()) return;
  for (const json& tool : tools) {
    if (!tool.is_object() || !tool.contains("function")) continue;
    const json& function = tool["function"];
    if (!function.is_object() || !function.contains("name") || !function["name"].is_string()) {
      continue;
    }
    std::set<std::string>& keys = raw_text_keys_[function["name"].get<std::string>()];
    const auto parameters = function.find("parameters");
    if (parameters == function.end() || !parameters->is_object()) continue;
    const auto properties = parameters->find("properties");
    if (properties == parameters->end() || !properties->is_object()) continue;
    for (const auto& [key, schema] : properties->items()) {
      if (GlmRawTextParameter(schema)) keys.insert(key);
    }
  }
}

OutputDelta AssistantOutputParser::Feed(absl::string_view text) {
  pending_.append(text.data(), text.size());
  OutputDelta out;
  Drain(false, &out);
  return out;
}

OutputDelta AssistantOutputParser::Finish() {
  OutputDelta out;
  Drain(true, &out);
  return out;
}

void AssistantOutputParser::AppendContent(absl::string_view text, OutputDelta* out) {
  if (trim_leading_) {
    text = absl::StripLeadingAsciiWhitespace(text);
    if (text.empty()) return;
    trim_leading_ = false;
  }
  out->content.append(text.data(), text.size());
}

void AssistantOutputParser::Drain(bool final, OutputDelta* out) {
  if (dialect_.tools == ToolDialect::kHarmony) return DrainHarmony(final, out);
  while (!pending_.empty()) {
    if (mode_ == Mode::kContent) {
      size_t at = std::string::npos;
      absl::string_view marker;
      const auto consider = [&](absl::string_view m) {
        const size_t p = pending_.find(m.data(), 0, m.size());
        if (p < at) {
          at = p;
          marker = m;
        }
      };
      if (dialect_.think) consider(kThinkOpen);
      if (!open_tools_.empty()) consider(open_tools_);
      if (at != std::string::npos) {
        AppendContent(absl::string_view(pending_).substr(0, at), out);
        pending_.erase(0, at + marker.size());
        mode_ = marker == kThinkOpen ? Mode::kReasoning : Mode::kTools;
        continue;
      }
      size_t held = 0;
      if (!final) {
        if (dialect_.think) held = std::max(held, HeldFor(pending_, kThinkOpen));
        if (!open_tools_.empty()) held = std::max(held, HeldFor(pending_, open_tools_));
      }
      AppendContent(absl::string_view(pending_).substr(0, pending_.size() - held), out);
      pending_.erase(0, pending_.size() - held);
      return;
    }
    if (mode_ == Mode::kReasoning) {
      const size_t at = pending_.find(kThinkClose.data(), 0, kThinkClose.size());
      if (at != std::string::npos) {
        out->reasoning.append(pending_, 0, at);
        pending_.erase(0, at + kThinkClose.size());
        mode_ = Mode::kContent;
        trim_leading_ = true;
        continue;
      }
      const size_t held = final ? 0 : HeldFor(pending_, kThinkClose);
      out->reasoning.append(pending_, 0, pending_.size() - held);
      pending_.erase(0, pending_.size() - held);
      return;
    }
    // kTools: held whole until the block closes.
    const size_t at = pending_.find(close_tools_);
    if (at == std::string::npos && !final) return;
    std::vector<ToolCall> calls;
    if (at != std::string::npos &&
        ParseBlock(absl::string_view(pending_).substr(0, at), &calls)) {
      for (ToolCall& call : calls) out->tool_calls.push_back(std::move(call));
      pending_.erase(0, at + close_tools_.size());
      trim_leading_ = true;
    } else {
      // Not a call after all: the model's text, markers included.
      const size_t end = at == std::string::npos ? pending_.size() : at + close_tools_.size();
      AppendContent(absl::StrCat(open_tools_, absl::string_view(pending_).substr(0, end)), out);
      pending_.erase(0, end);
    }
    mode_ = Mode::kContent;
  }
}

bool AssistantOutputParser::ParseBlock(absl::string_view body, std::vector<ToolCall>* calls) {
  std::vector<std::pair<std::string, std::string>> parsed;  // name, arguments
  std::string name, arguments;
  switch (dialect_.tools) {
    case ToolDialect::kHermes:
      if (!ParseHermes(body, &name, &arguments)) return false;
      parsed.emplace_back(name, arguments);
      break;
    case ToolDialect::kGlm45:
      if (!ParseGlm45(body, raw_text_keys_, &name, &arguments)) return false;
      parsed.emplace_back(name, arguments);
      break;
    case ToolDialect::kDeepSeekV3: {
      absl::string_view rest = body;
      while (!absl::StripAsciiWhitespace(rest).empty()) {
        rest = absl::StripLeadingAsciiWhitespace(rest);
        if (!absl::ConsumePrefix(&rest, kDeepSeekCallBegin)) return false;
        const size_t end = rest.find(kDeepSeekCallEnd);
        if (end == absl::string_view::npos) return false;
        if (!ParseDeepSeekCall(rest.substr(0, end), &name, &arguments)) return false;
        parsed.emplace_back(name, arguments);
        rest = rest.substr(end + kDeepSeekCallEnd.size());
      }
      if (parsed.empty()) return false;
      break;
    }
    case ToolDialect::kHarmony:
    case ToolDialect::kNone:
      return false;
  }
  for (auto& [n, a] : parsed) {
    calls->push_back({absl::StrCat(id_prefix_, calls_++), std::move(n), std::move(a)});
  }
  return true;
}

}  // namespace colibri::coordinator
