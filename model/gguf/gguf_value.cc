#include "model/gguf/gguf_value.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace colibri::gguf {

const char* ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return "uint8";
    case ValueType::kInt8:
      return "int8";
    case ValueType::kUint16:
      return "uint16";
    case ValueType::kInt16:
      return "int16";
    case ValueType::kUint32:
      return "uint32";
    case ValueType::kInt32:
      return "int32";
    case ValueType::kFloat32:
      return "float32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kUint64:
      return "uint64";
    case ValueType::kInt64:
      return "int64";
    case ValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool IsIntegerType(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool IsUnsignedType(ValueType type) {
  return type == ValueType::kUint8 || type == ValueType::kUint16 || type == ValueType::kUint32 ||
         type == ValueType::kUint64;
}

uint64_t Value::array_size() const {
  if (type != ValueType::kArray) return 0;
  switch (array_type) {
    case ValueType::kUint64:
      return uints.size();
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      return floats.size();
    case ValueType::kString:
      return strings.size();
    case ValueType::kArray:
      return arrays.size();
    default:
      return ints.size();
  }
}

namespace {

Value Unsigned(ValueType type, uint64_t v) {
  Value out;
  out.type = type;
  out.u = v;
  out.i = v <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(v) : 0;
  return out;
}

Value Signed(ValueType type, int64_t v) {
  Value out;
  out.type = type;
  out.i = v;
  return out;
}

Value Float(ValueType type, double v) {
  Value out;
  out.type = type;
  out.f = v;
  return out;
}

Value EmptyArray(ValueType element_type) {
  Value out;
  out.type = ValueType::kArray;
  out.array_type = element_type;
  return out;
}

}  // namespace

Value Value::Uint8(uint8_t v) { return Unsigned(ValueType::kUint8, v); }
Value Value::Int8(int8_t v) { return Signed(ValueType::kInt8, v); }
Value Value::Uint16(uint16_t v) { return Unsigned(ValueType::kUint16, v); }
Value Value::Int16(int16_t v) { return Signed(ValueType::kInt16, v); }
Value Value::Uint32(uint32_t v) { return Unsigned(ValueType::kUint32, v); }
Value Value::Int32(int32_t v) { return Signed(ValueType::kInt32, v); }
Value Value::Uint64(uint64_t v) { return Unsigned(ValueType::kUint64, v); }
Value Value::Int64(int64_t v) { return Signed(ValueType::kInt64, v); }
Value Value::Float32(float v) { return Float(ValueType::kFloat32, v); }
Value Value::Float64(double v) { return Float(ValueType::kFloat64, v); }
Value Value::Bool(bool v) { return Signed(ValueType::kBool, v ? 1 : 0); }

Value Value::String(std::string v) {
  Value out;
  out.type = ValueType::kString;
  out.s = std::move(v);
  return out;
}

Value Value::StringArray(std::vector<std::string> v) {
  Value out = EmptyArray(ValueType::kString);
  out.strings = std::move(v);
  return out;
}

Value Value::Float32Array(std::vector<float> v) {
  Value out = EmptyArray(ValueType::kFloat32);
  out.floats.assign(v.begin(), v.end());
  return out;
}

Value Value::Float64Array(std::vector<double> v) {
  Value out = EmptyArray(ValueType::kFloat64);
  out.floats = std::move(v);
  return out;
}

Value Value::Int32Array(std::vector<int32_t> v) {
  Value out = EmptyArray(ValueType::kInt32);
  out.ints.assign(v.begin(), v.end());
  return out;
}

Value Value::IntArray(ValueType type, std::vector<int64_t> v) {
  Value out = EmptyArray(type);
  out.ints = std::move(v);
  return out;
}

Value Value::Uint64Array(std::vector<uint64_t> v) {
  Value out = EmptyArray(ValueType::kUint64);
  out.uints = std::move(v);
  return out;
}

Value Value::ArrayOfArrays(std::vector<Value> v) {
  Value out = EmptyArray(ValueType::kArray);
  out.arrays = std::move(v);
  return out;
}

bool operator==(const Value& a, const Value& b) {
  return a.type == b.type && a.i == b.i && a.u == b.u && a.f == b.f && a.s == b.s &&
         a.array_type == b.array_type && a.ints == b.ints && a.uints == b.uints &&
         a.floats == b.floats && a.strings == b.strings && a.arrays == b.arrays;
}

std::string EscapeForMessage(absl::string_view s, size_t max_chars) {
  std::string out;
  size_t n = 0;
  for (char c : s) {
    if (n++ == max_chars) {
      out += "...";
      break;
    }
    const unsigned char uc = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (uc < 0x20 || uc == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(uc, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

std::string Quoted(const std::string& s, size_t max_chars) {
  return absl::StrCat("\"", EscapeForMessage(s, max_chars), "\"");
}

std::string ArrayElementToString(const Value& v, size_t k, size_t max_elements, size_t max_chars) {
  switch (v.array_type) {
    case ValueType::kUint64:
      return absl::StrCat(v.uints[k]);
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      return absl::StrCat(v.floats[k]);
    case ValueType::kString:
      return Quoted(v.strings[k], max_chars);
    case ValueType::kArray:
      return ValueToString(v.arrays[k], max_elements, max_chars);
    case ValueType::kBool:
      return v.ints[k] != 0 ? "true" : "false";
    default:
      return absl::StrCat(v.ints[k]);
  }
}

}  // namespace

std::string ValueToString(const Value& value, size_t max_elements, size_t max_chars) {
  switch (value.type) {
    case ValueType::kUint8:
    case ValueType::kUint16:
    case ValueType::kUint32:
    case ValueType::kUint64:
      return absl::StrCat(value.u);
    case ValueType::kInt8:
    case ValueType::kInt16:
    case ValueType::kInt32:
    case ValueType::kInt64:
      return absl::StrCat(value.i);
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      return absl::StrCat(value.f);
    case ValueType::kBool:
      return value.i != 0 ? "true" : "false";
    case ValueType::kString:
      return Quoted(value.s, max_chars);
    case ValueType::kArray:
      break;
  }
  const uint64_t n = value.array_size();
  std::string out = absl::StrCat("[array of ", n, " ", ValueTypeName(value.array_type));
  for (uint64_t k = 0; k < n && k < max_elements; ++k) {
    absl::StrAppend(&out, k == 0 ? ": " : ", ",
                    ArrayElementToString(value, k, max_elements, max_chars));
  }
  if (n > max_elements) out += ", ...";
  out += "]";
  return out;
}

}  // namespace colibri::gguf
