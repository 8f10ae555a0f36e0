// One GGUF metadata value: a scalar, a string, or an array (possibly nested).
#ifndef COLIBRI_MODEL_GGUF_GGUF_VALUE_H_
#define COLIBRI_MODEL_GGUF_GGUF_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace colibri::gguf {

// On-disk ids (gguf_type).
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* ValueTypeName(ValueType type);  // "uint32", "string", "array", ...
// True for the eight integer types (not kBool).
bool IsIntegerType(ValueType type);
bool IsUnsignedType(ValueType type);

// Arrays are stored by element kind so that 150k-entry vocabularies stay compact:
// integer elements in `ints` (kUint64 arrays keep all their elements in `uints`
// instead), float elements in `floats`, bools in `ints` (0/1), strings in
// `strings`, nested arrays in `arrays`.
//
// The reader and the factories below produce this canonical form; the writer
// reads unsigned scalars from `u`, signed scalars and bools from `i`, and narrow
// integer array elements from `ints` (values must fit the element type).
struct Value {
  ValueType type = ValueType::kUint8;
  // Scalars: exactly one of these is meaningful, by `type`.
  int64_t i = 0;   // signed integers, bool (0/1), unsigned values that fit int64
  uint64_t u = 0;  // every unsigned integer type (also mirrored into i when it fits)
  double f = 0.0;  // kFloat32 / kFloat64
  std::string s;   // kString
  // Arrays (type == kArray):
  ValueType array_type = ValueType::kUint8;
  std::vector<int64_t> ints;
  std::vector<uint64_t> uints;  // only for kUint64 arrays
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<Value> arrays;  // array_type == kArray

  // Number of elements of an array value (0 for scalars).
  uint64_t array_size() const;

  static Value Uint32(uint32_t v);
  static Value Int32(int32_t v);
  static Value Uint64(uint64_t v);
  static Value Float32(float v);
  static Value Bool(bool v);
  static Value String(std::string v);
  static Value StringArray(std::vector<std::string> v);
  static Value Float32Array(std::vector<float> v);
  static Value Int32Array(std::vector<int32_t> v);

  static Value Uint8(uint8_t v);
  static Value Int8(int8_t v);
  static Value Uint16(uint16_t v);
  static Value Int16(int16_t v);
  static Value Int64(int64_t v);
  static Value Float64(double v);
  // An array of any integer or bool element type; each value must fit `type`.
  static Value IntArray(ValueType type, std::vector<int64_t> v);
  static Value Uint64Array(std::vector<uint64_t> v);
  static Value Float64Array(std::vector<double> v);
  // An array whose elements are arrays (each `v[k].type == kArray`).
  static Value ArrayOfArrays(std::vector<Value> v);
};

// Field-wise equality of the canonical form (floats compare with ==).
bool operator==(const Value& a, const Value& b);
inline bool operator!=(const Value& a, const Value& b) { return !(a == b); }

// A short human rendering for display (`inspect`): scalars as `42`, `0.5`,
// `true`, `"text"` (escaped, cut after `max_chars`); arrays as
// `[array of 32000 string: "<unk>", "<s>", "</s>", ...]` with at most
// `max_elements` elements shown.
std::string ValueToString(const Value& value, size_t max_elements = 4, size_t max_chars = 60);

// Text read from a file (a key, a tensor or architecture name) made safe to
// put in an error message or a log line: double quotes and backslashes escaped,
// newline and tab as \n and \t, other control bytes as \xNN, and cut after
// `max_chars` bytes with "...". Bytes >= 0x80 pass unchanged (UTF-8 text).
std::string EscapeForMessage(absl::string_view s, size_t max_chars = 80);

}  // namespace colibri::gguf

#endif  // COLIBRI_MODEL_GGUF_GGUF_VALUE_H_
