#include "model/gguf/gguf_parser.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/ops/tensor_type.h"

namespace colibri::gguf {
namespace {

constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kFloat64); }

// Fewest bytes one element of an array of `type` occupies.
uint64_t MinElementBytes(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kString:
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    case ValueType::kArray:
      return 12;  // element type + count
  }
  return 1;
}

// A bounds-checked little-endian reader over one file image.
class Cursor {
 public:
  explicit Cursor(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  bool Read(void* out, uint64_t n) {
    if (n > remaining()) return false;
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool ReadLe(T* out) {
    uint8_t b[sizeof(T)];
    if (!Read(b, sizeof(T))) return false;
    uint64_t v = 0;
    for (size_t k = 0; k < sizeof(T); ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
    *out = static_cast<T>(v);
    return true;
  }
  // uint64 length + bytes; false if either runs past the end.
  bool ReadString(std::string* out) {
    uint64_t len = 0;
    if (!ReadLe(&len) || len > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return true;
  }

 private:
  absl::Span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

class ImageParser {
 public:
  ImageParser(absl::Span<const uint8_t> bytes, absl::string_view name, int split_index)
      : bytes_(bytes), cursor_(bytes), name_(name), split_index_(split_index) {}

  absl::StatusOr<ParsedImage> Run() {
    uint64_t tensor_count = 0;
    uint64_t kv_count = 0;
    COLIBRI_RETURN_IF_ERROR(ParseHeader(&tensor_count, &kv_count));
    COLIBRI_RETURN_IF_ERROR(
        Charge(kv_count * sizeof(std::pair<std::string, Value>), "metadata_kv_count"));
    out_.metadata.reserve(kv_count);
    for (uint64_t k = 0; k < kv_count; ++k) COLIBRI_RETURN_IF_ERROR(ParseKeyValue(k));
    COLIBRI_RETURN_IF_ERROR(ParseAlignment());
    COLIBRI_RETURN_IF_ERROR(Charge(tensor_count * sizeof(TensorInfo), "tensor_count"));
    out_.tensors.reserve(tensor_count);
    for (uint64_t t = 0; t < tensor_count; ++t) COLIBRI_RETURN_IF_ERROR(ParseTensorInfo(t));
    COLIBRI_RETURN_IF_ERROR(PlaceTensors());
    return std::move(out_);
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(name_, ": ", what));
  }
  absl::Status Truncated(absl::string_view what) const {
    return Error(absl::StrCat(what, " runs past the end of the file (at byte ", cursor_.pos(),
                              " of ", bytes_.size(), ")"));
  }
  static std::string Meta(absl::string_view key) {
    return absl::StrCat("metadata '", EscapeForMessage(key), "'");
  }

  // Accounts for `bytes` more of parsed header memory (before allocating them).
  absl::Status Charge(uint64_t bytes, absl::string_view what) {
    header_memory_ += bytes;
    if (header_memory_ <= kMaxHeaderMemory) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": ", what, ": the parsed header would take more than ",
                     kMaxHeaderMemory >> 20, " MiB of memory"));
  }

  absl::Status ParseHeader(uint64_t* tensor_count, uint64_t* kv_count) {
    char magic[4];
    if (!cursor_.Read(magic, 4)) return Truncated("magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": magic is not \"GGUF\"; not a GGUF file"));
    }
    if (!cursor_.ReadLe(&out_.version)) return Truncated("version");
    if (out_.version == 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": version 1 (32-bit counts) is not supported; re-convert to GGUF v3"));
    }
    if (out_.version != 2 && out_.version != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": version ", out_.version, " is not supported (want 2 or 3)"));
    }
    if (!cursor_.ReadLe(tensor_count)) return Truncated("tensor_count");
    if (!cursor_.ReadLe(kv_count)) return Truncated("metadata_kv_count");
    // Bound both counts by the bytes left before anything is reserved.
    const uint64_t left = cursor_.remaining();
    if (*kv_count > left / kMinKvBytes) {
      return Error(absl::StrCat("metadata_kv_count ", *kv_count, " cannot fit in the ", left,
                                " bytes after the header"));
    }
    if (*tensor_count > (left - *kv_count * kMinKvBytes) / kMinTensorInfoBytes) {
      return Error(absl::StrCat("tensor_count ", *tensor_count, " cannot fit in the ", left,
                                " bytes after the header"));
    }
    return absl::OkStatus();
  }

  absl::Status ParseKeyValue(uint64_t k) {
    std::string key;
    if (!cursor_.ReadString(&key)) return Truncated(absl::StrCat("metadata key #", k));
    if (out_.metadata_index.contains(key)) {
      return Error(absl::StrCat("duplicate metadata key '", EscapeForMessage(key), "'"));
    }
    uint32_t type = 0;
    if (!cursor_.ReadLe(&type)) return Truncated(absl::StrCat(Meta(key), " value type"));
    if (!IsKnownValueType(type)) {
      return Error(absl::StrCat(Meta(key), ": value type ", type, " is unknown"));
    }
    Value value;
    COLIBRI_RETURN_IF_ERROR(ParseValue(static_cast<ValueType>(type), key, 0, &value));
    out_.metadata_index.emplace(key, out_.metadata.size());
    out_.metadata.emplace_back(std::move(key), std::move(value));
    return absl::OkStatus();
  }

  // Reads one integer/bool/float scalar of `type` as raw bits.
  bool ReadScalarBits(ValueType type, uint64_t* bits) {
    switch (MinElementBytes(type)) {
      case 1: {
        uint8_t v;
        if (!cursor_.ReadLe(&v)) return false;
        *bits = v;
        return true;
      }
      case 2: {
        uint16_t v;
        if (!cursor_.ReadLe(&v)) return false;
        *bits = v;
        return true;
      }
      case 4: {
        uint32_t v;
        if (!cursor_.ReadLe(&v)) return false;
        *bits = v;
        return true;
      }
      default:
        return cursor_.ReadLe(bits);
    }
  }

  // Sign-extends the raw bits of a signed integer type.
  static int64_t SignedFromBits(ValueType type, uint64_t bits) {
    switch (type) {
      case ValueType::kInt8:
        return static_cast<int8_t>(bits);
      case ValueType::kInt16:
        return static_cast<int16_t>(bits);
      case ValueType::kInt32:
        return static_cast<int32_t>(bits);
      default:
        return static_cast<int64_t>(bits);
    }
  }

  static double FloatFromBits(ValueType type, uint64_t bits) {
    if (type == ValueType::kFloat32) {
      const uint32_t b32 = static_cast<uint32_t>(bits);
      float f;
      std::memcpy(&f, &b32, sizeof(f));
      return f;
    }
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    return d;
  }

  absl::Status ParseValue(ValueType type, absl::string_view key, int depth, Value* out) {
    out->type = type;
    if (type == ValueType::kArray) return ParseArray(key, depth + 1, out);
    if (type == ValueType::kString) {
      if (!cursor_.ReadString(&out->s)) return Truncated(absl::StrCat(Meta(key), " string"));
      return absl::OkStatus();
    }
    uint64_t bits = 0;
    if (!ReadScalarBits(type, &bits)) {
      return Truncated(absl::StrCat(Meta(key), " ", ValueTypeName(type), " value"));
    }
    if (type == ValueType::kFloat32 || type == ValueType::kFloat64) {
      out->f = FloatFromBits(type, bits);
    } else if (type == ValueType::kBool) {
      if (bits > 1) return Error(absl::StrCat(Meta(key), ": bool value ", bits, " is not 0 or 1"));
      out->i = static_cast<int64_t>(bits);
    } else if (IsUnsignedType(type)) {
      out->u = bits;
      out->i = bits <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(bits) : 0;
    } else {
      out->i = SignedFromBits(type, bits);
    }
    return absl::OkStatus();
  }

  // Element type, count and elements; `depth` counts this array (top level 1).
  absl::Status ParseArray(absl::string_view key, int depth, Value* out) {
    out->type = ValueType::kArray;
    if (depth > kMaxArrayDepth) {
      return Error(absl::StrCat(Meta(key), ": arrays nested deeper than ", kMaxArrayDepth));
    }
    uint32_t raw_type = 0;
    uint64_t count = 0;
    if (!cursor_.ReadLe(&raw_type)) return Truncated(absl::StrCat(Meta(key), " array type"));
    if (!IsKnownValueType(raw_type)) {
      return Error(absl::StrCat(Meta(key), ": array element type ", raw_type, " is unknown"));
    }
    const ValueType type = static_cast<ValueType>(raw_type);
    out->array_type = type;
    if (!cursor_.ReadLe(&count)) return Truncated(absl::StrCat(Meta(key), " array length"));
    if (count > cursor_.remaining() / MinElementBytes(type) || count > kMaxArrayLength) {
      return Error(absl::StrCat(Meta(key), ": array of ", count, " ", ValueTypeName(type),
                                " cannot fit in the remaining ", cursor_.remaining(),
                                " bytes (limit ", kMaxArrayLength, " elements)"));
    }
    const uint64_t element_memory = type == ValueType::kString  ? sizeof(std::string)
                                    : type == ValueType::kArray ? sizeof(Value)
                                                                : sizeof(int64_t);
    COLIBRI_RETURN_IF_ERROR(Charge(count * element_memory, Meta(key)));
    switch (type) {
      case ValueType::kString:
        out->strings.resize(count);
        for (uint64_t k = 0; k < count; ++k) {
          if (!cursor_.ReadString(&out->strings[k])) {
            return Truncated(absl::StrCat(Meta(key), " element ", k));
          }
        }
        return absl::OkStatus();
      case ValueType::kArray:
        // A Value is far larger than its 12 encoded bytes: grow as elements parse.
        out->arrays.reserve(std::min<uint64_t>(count, 1024));
        for (uint64_t k = 0; k < count; ++k) {
          out->arrays.emplace_back();
          COLIBRI_RETURN_IF_ERROR(ParseArray(key, depth + 1, &out->arrays.back()));
        }
        return absl::OkStatus();
      default:
        break;
    }
    const bool is_float = type == ValueType::kFloat32 || type == ValueType::kFloat64;
    if (is_float) {
      out->floats.resize(count);
    } else if (type == ValueType::kUint64) {
      out->uints.resize(count);
    } else {
      out->ints.resize(count);
    }
    for (uint64_t k = 0; k < count; ++k) {
      uint64_t bits = 0;
      if (!ReadScalarBits(type, &bits)) {
        return Truncated(absl::StrCat(Meta(key), " element ", k));
      }
      if (is_float) {
        out->floats[k] = FloatFromBits(type, bits);
      } else if (type == ValueType::kUint64) {
        out->uints[k] = bits;
      } else if (type == ValueType::kBool) {
        if (bits > 1) {
          return Error(
              absl::StrCat(Meta(key), " element ", k, ": bool value ", bits, " is not 0 or 1"));
        }
        out->ints[k] = static_cast<int64_t>(bits);
      } else {
        out->ints[k] =
            IsUnsignedType(type) ? static_cast<int64_t>(bits) : SignedFromBits(type, bits);
      }
    }
    return absl::OkStatus();
  }

  absl::Status ParseAlignment() {
    auto it = out_.metadata_index.find("general.alignment");
    if (it == out_.metadata_index.end()) return absl::OkStatus();
    const Value& v = out_.metadata[it->second].second;
    if (v.type != ValueType::kUint32) {
      return Error(absl::StrCat("metadata 'general.alignment' has type ", ValueTypeName(v.type),
                                ", want uint32"));
    }
    if (v.u == 0 || (v.u & (v.u - 1)) != 0) {
      return Error(
          absl::StrCat("metadata 'general.alignment' is ", v.u, ", want a nonzero power of two"));
    }
    out_.alignment = v.u;
    return absl::OkStatus();
  }

  absl::Status ParseTensorInfo(uint64_t t) {
    TensorInfo info;
    info.split_index = split_index_;
    if (!cursor_.ReadString(&info.name)) return Truncated(absl::StrCat("tensor #", t, " name"));
    const std::string where = absl::StrCat("tensor '", EscapeForMessage(info.name), "'");
    uint32_t n_dims = 0;
    if (!cursor_.ReadLe(&n_dims)) return Truncated(absl::StrCat(where, " n_dims"));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return Error(absl::StrCat(where, ": n_dims ", n_dims, " is not in [1, ", kMaxDims, "]"));
    }
    info.dims.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      if (!cursor_.ReadLe(&dim)) return Truncated(absl::StrCat(where, " dims"));
      if (dim > static_cast<uint64_t>(INT64_MAX)) {
        return Error(absl::StrCat(where, ": dim ", d, " is ", dim, ", too large"));
      }
      info.dims[d] = static_cast<int64_t>(dim);
    }
    uint32_t type_id = 0;
    if (!cursor_.ReadLe(&type_id)) return Truncated(absl::StrCat(where, " type"));
    const ops::TensorTypeTraits* traits = ops::FindTensorType(type_id);
    if (traits == nullptr) {
      return Error(absl::StrCat(where, ": type ", type_id, " is not a GGML type"));
    }
    info.type = traits->type;
    if (!cursor_.ReadLe(&info.offset_in_file)) return Truncated(absl::StrCat(where, " offset"));

    int64_t n = 1;
    for (int64_t dim : info.dims) {
      if (dim != 0 && n > INT64_MAX / dim) {
        return Error(absl::StrCat(where, ": element count of dims overflows int64"));
      }
      n *= dim;
    }
    info.n_elements = n;
    if (info.dims[0] % traits->block_size != 0) {
      return Error(absl::StrCat(where, ": row length ", info.dims[0], " is not a multiple of the ",
                                traits->name, " block size ", traits->block_size));
    }
    const uint64_t blocks = static_cast<uint64_t>(n / traits->block_size);
    const uint64_t type_size = static_cast<uint64_t>(traits->type_size);
    if (blocks != 0 && type_size > UINT64_MAX / blocks) {
      return Error(absl::StrCat(where, ": byte size overflows"));
    }
    info.n_bytes = blocks * type_size;
    if (!tensor_index_.emplace(info.name, out_.tensors.size()).second) {
      return Error(absl::StrCat("duplicate tensor name '", EscapeForMessage(info.name), "'"));
    }
    out_.tensors.push_back(std::move(info));
    return absl::OkStatus();
  }

  // Turns relative offsets into absolute ones and checks ranges and overlaps.
  absl::Status PlaceTensors() {
    const uint64_t a = out_.alignment;
    const uint64_t size = bytes_.size();
    out_.data_offset = (cursor_.pos() + a - 1) / a * a;  // pos <= size, no overflow
    for (TensorInfo& info : out_.tensors) {
      const std::string where = absl::StrCat("tensor '", EscapeForMessage(info.name), "'");
      const uint64_t rel = info.offset_in_file;
      if (rel % a != 0) {
        return Error(
            absl::StrCat(where, ": offset ", rel, " is not a multiple of the alignment ", a));
      }
      if (rel > size || out_.data_offset > size - rel ||
          info.n_bytes > size - rel - out_.data_offset) {
        return Error(absl::StrCat(where, ": data at offset ", rel, " (", info.n_bytes,
                                  " bytes) is outside the file (data section starts at ",
                                  out_.data_offset, ", file is ", size, " bytes)"));
      }
      info.offset_in_file = out_.data_offset + rel;
      info.data = bytes_.data() == nullptr ? nullptr : bytes_.data() + info.offset_in_file;
    }
    std::vector<size_t> order(out_.tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [this](size_t x, size_t y) {
      return out_.tensors[x].offset_in_file < out_.tensors[y].offset_in_file;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = out_.tensors[order[k - 1]];
      const TensorInfo& next = out_.tensors[order[k]];
      if (prev.n_bytes != 0 && next.n_bytes != 0 &&
          next.offset_in_file < prev.offset_in_file + prev.n_bytes) {
        return Error(absl::StrCat("tensors '", EscapeForMessage(prev.name), "' and '",
                                EscapeForMessage(next.name), "' overlap"));
      }
    }
    return absl::OkStatus();
  }

  absl::Span<const uint8_t> bytes_;
  Cursor cursor_;
  absl::string_view name_;
  int split_index_;
  ParsedImage out_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
  uint64_t header_memory_ = 0;  // see Charge
};

}  // namespace

absl::StatusOr<ParsedImage> GgufParser::Parse(absl::Span<const uint8_t> bytes,
                                              absl::string_view name, int split_index) {
  return ImageParser(bytes, name, split_index).Run();
}

}  // namespace colibri::gguf
