// ToJson: Python's json.dumps layout, which chat templates print through
// `tojson` (transformers passes ensure_ascii=False unless the template asks).
#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/chat_template/utf8.h"
#include "model/chat_template/value.h"

namespace colibri::chat_template {
namespace {

void AppendEscaped(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  size_t pos = 0;
  while (pos < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      ++pos;
      switch (c) {
        case '"':
          *out += "\\\"";
          break;
        case '\\':
          *out += "\\\\";
          break;
        case '\n':
          *out += "\\n";
          break;
        case '\r':
          *out += "\\r";
          break;
        case '\t':
          *out += "\\t";
          break;
        case '\b':
          *out += "\\b";
          break;
        case '\f':
          *out += "\\f";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            *out += buf;
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      continue;
    }
    const size_t start = pos;
    const uint32_t cp = DecodeUtf8(s, &pos);
    if (!ensure_ascii) {
      out->append(s, start, pos - start);
      continue;
    }
    char buf[16];
    if (cp >= 0x10000) {
      const uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    *out += buf;
  }
  out->push_back('"');
}

std::string FloatJson(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return FormatFloat(f);
}

absl::StatusOr<std::string> KeyString(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.str();
    case Value::Kind::kInt:
      return absl::StrCat(key.int_value());
    case Value::Kind::kFloat:
      return FloatJson(key.number());
    case Value::Kind::kBool:
      return std::string(key.bool_value() ? "true" : "false");
    case Value::Kind::kNone:
      return std::string("null");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("keys must be str, int, float, bool or None, not ", key.TypeName()));
  }
}

class JsonWriter {
 public:
  JsonWriter(const JsonFormat& format, int max_depth) : format_(format), max_depth_(max_depth) {
    item_sep_ =
        format.item_separator.empty() ? (format.indent >= 0 ? "," : ", ") : format.item_separator;
  }

  absl::Status Write(const Value& v, int level, std::string* out) {
    if (level > max_depth_) {
      return absl::ResourceExhaustedError("tojson: value nested deeper than the limit");
    }
    switch (v.kind()) {
      case Value::Kind::kNone:
        *out += "null";
        return absl::OkStatus();
      case Value::Kind::kBool:
        *out += v.bool_value() ? "true" : "false";
        return absl::OkStatus();
      case Value::Kind::kInt:
        absl::StrAppend(out, v.int_value());
        return absl::OkStatus();
      case Value::Kind::kFloat:
        *out += FloatJson(v.number());
        return absl::OkStatus();
      case Value::Kind::kString:
        AppendEscaped(v.str(), format_.ensure_ascii, out);
        return absl::OkStatus();
      case Value::Kind::kList: {
        if (v.list().empty()) {
          *out += "[]";
          return absl::OkStatus();
        }
        out->push_back('[');
        for (size_t i = 0; i < v.list().size(); ++i) {
          if (i > 0) *out += item_sep_;
          NewLine(level + 1, out);
          if (absl::Status s = Write(v.list()[i], level + 1, out); !s.ok()) return s;
        }
        NewLine(level, out);
        out->push_back(']');
        return absl::OkStatus();
      }
      case Value::Kind::kDict: {
        if (v.is_namespace()) break;
        if (v.dict().empty()) {
          *out += "{}";
          return absl::OkStatus();
        }
        std::vector<std::pair<std::string, const Value*>> items;
        for (const auto& [k, val] : v.dict()) {
          absl::StatusOr<std::string> key = KeyString(k);
          if (!key.ok()) return key.status();
          items.emplace_back(*std::move(key), &val);
        }
        if (format_.sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out->push_back('{');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) *out += item_sep_;
          NewLine(level + 1, out);
          AppendEscaped(items[i].first, format_.ensure_ascii, out);
          *out += format_.key_separator;
          if (absl::Status s = Write(*items[i].second, level + 1, out); !s.ok()) return s;
        }
        NewLine(level, out);
        out->push_back('}');
        return absl::OkStatus();
      }
      default:
        break;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }

 private:
  void NewLine(int level, std::string* out) const {
    if (format_.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(format_.indent) * level, ' ');
  }

  const JsonFormat& format_;
  const int max_depth_;
  std::string item_sep_;
};

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, const JsonFormat& format, int max_depth) {
  std::string out;
  JsonWriter writer(format, max_depth);
  if (absl::Status s = writer.Write(value, 0, &out); !s.ok()) return s;
  return out;
}

}  // namespace colibri::chat_template
