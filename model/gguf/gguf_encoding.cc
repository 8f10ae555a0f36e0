#include "model/gguf/gguf_encoding.h"

#include <cstring>

namespace colibri::gguf::internal {

void ByteSink::U16(uint16_t v) {
  const uint8_t b[2] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)};
  Append(b, 2);
}

void ByteSink::U32(uint32_t v) {
  uint8_t b[4];
  for (int k = 0; k < 4; ++k) b[k] = static_cast<uint8_t>(v >> (8 * k));
  Append(b, 4);
}

void ByteSink::U64(uint64_t v) {
  uint8_t b[8];
  for (int k = 0; k < 8; ++k) b[k] = static_cast<uint8_t>(v >> (8 * k));
  Append(b, 8);
}

void ByteSink::F32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  U32(bits);
}

void ByteSink::F64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  U64(bits);
}

void ByteSink::String(absl::string_view s) {
  U64(s.size());
  Append(s.data(), s.size());
}

void VectorSink::Append(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  out_->insert(out_->end(), p, p + size);
}

namespace {

void EncodeInteger(ValueType type, int64_t i, uint64_t u, ByteSink& sink) {
  switch (type) {
    case ValueType::kUint8:
      sink.U8(static_cast<uint8_t>(u));
      break;
    case ValueType::kInt8:
      sink.U8(static_cast<uint8_t>(i));
      break;
    case ValueType::kUint16:
      sink.U16(static_cast<uint16_t>(u));
      break;
    case ValueType::kInt16:
      sink.U16(static_cast<uint16_t>(i));
      break;
    case ValueType::kUint32:
      sink.U32(static_cast<uint32_t>(u));
      break;
    case ValueType::kInt32:
      sink.U32(static_cast<uint32_t>(i));
      break;
    case ValueType::kUint64:
      sink.U64(u);
      break;
    case ValueType::kInt64:
      sink.U64(static_cast<uint64_t>(i));
      break;
    case ValueType::kBool:
      sink.U8(i != 0 ? 1 : 0);
      break;
    default:
      break;
  }
}

// Element type, count and elements of an array (nested arrays recurse).
void EncodeArray(const Value& value, ByteSink& sink) {
  sink.U32(static_cast<uint32_t>(value.array_type));
  sink.U64(value.array_size());
  switch (value.array_type) {
    case ValueType::kFloat32:
      for (double f : value.floats) sink.F32(static_cast<float>(f));
      break;
    case ValueType::kFloat64:
      for (double f : value.floats) sink.F64(f);
      break;
    case ValueType::kString:
      for (const std::string& s : value.strings) sink.String(s);
      break;
    case ValueType::kArray:
      for (const Value& v : value.arrays) EncodeArray(v, sink);
      break;
    case ValueType::kUint64:
      for (uint64_t u : value.uints) sink.U64(u);
      break;
    default:
      for (int64_t i : value.ints) {
        EncodeInteger(value.array_type, i, static_cast<uint64_t>(i), sink);
      }
      break;
  }
}

}  // namespace

void EncodeValue(const Value& value, ByteSink& sink) {
  switch (value.type) {
    case ValueType::kFloat32:
      sink.F32(static_cast<float>(value.f));
      break;
    case ValueType::kFloat64:
      sink.F64(value.f);
      break;
    case ValueType::kString:
      sink.String(value.s);
      break;
    case ValueType::kArray:
      EncodeArray(value, sink);
      break;
    default:
      EncodeInteger(value.type, value.i, value.u, sink);
      break;
  }
}

void EncodeKeyValue(absl::string_view key, const Value& value, ByteSink& sink) {
  sink.String(key);
  sink.U32(static_cast<uint32_t>(value.type));
  EncodeValue(value, sink);
}

}  // namespace colibri::gguf::internal
