#include "model/gguf/gguf_file.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_parser.h"

namespace colibri::gguf {
namespace {

constexpr char kSplitNo[] = "split.no";
constexpr char kSplitCount[] = "split.count";
constexpr char kSplitTensorsCount[] = "split.tensors.count";
// "-00001-of-00003.gguf"
constexpr size_t kSplitSuffixLength = 20;

absl::Status WrongType(absl::string_view file, absl::string_view key, const Value& v,
                       absl::string_view want) {
  std::string have = ValueTypeName(v.type);
  if (v.type == ValueType::kArray) have = absl::StrCat("array of ", ValueTypeName(v.array_type));
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": metadata '", key, "' is ", have, ", want ", want));
}

absl::StatusOr<int64_t> AsInt(absl::string_view file, absl::string_view key, const Value& v) {
  if (!IsIntegerType(v.type)) return WrongType(file, key, v, "an integer");
  if (IsUnsignedType(v.type) && v.u > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": metadata '", key, "' value ", v.u, " does not fit int64"));
  }
  return IsUnsignedType(v.type) ? static_cast<int64_t>(v.u) : v.i;
}

absl::StatusOr<uint64_t> AsUint(absl::string_view file, absl::string_view key, const Value& v) {
  if (!IsIntegerType(v.type)) return WrongType(file, key, v, "an unsigned integer");
  if (IsUnsignedType(v.type)) return v.u;
  if (v.i < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": metadata '", key, "' value ", v.i, " is negative"));
  }
  return static_cast<uint64_t>(v.i);
}

const Value* FindIn(const ParsedImage& image, absl::string_view key) {
  auto it = image.metadata_index.find(key);
  return it == image.metadata_index.end() ? nullptr : &image.metadata[it->second].second;
}

// split.no / split.count as a number; -1 when absent (v null).
absl::Status ReadSplitKey(const Value* v, absl::string_view file, absl::string_view key,
                          int64_t* out) {
  *out = -1;
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<uint64_t> n = AsUint(file, key, *v);
  if (!n.ok()) return absl::DataLossError(n.status().message());
  if (*n > 65535) return absl::DataLossError(absl::StrCat(file, ": ", key, " ", *n, " > 65535"));
  *out = static_cast<int64_t>(*n);
  return absl::OkStatus();
}

}  // namespace

int64_t TensorInfo::rows() const {
  int64_t r = 1;
  for (size_t d = 1; d < dims.size(); ++d) r *= dims[d];
  return r;
}

GgufFile::~GgufFile() = default;

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(absl::Span<const uint8_t> bytes,
                                                              std::string name) {
  COLIBRI_ASSIGN_OR_RETURN(ParsedImage image, GgufParser::Parse(bytes, name, 0));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->version_ = image.version;
  file->alignment_ = image.alignment;
  file->metadata_ = std::move(image.metadata);
  file->metadata_index_ = std::move(image.metadata_index);
  file->tensors_ = std::move(image.tensors);
  for (size_t t = 0; t < file->tensors_.size(); ++t) {
    file->tensor_index_.emplace(file->tensors_[t].name, t);
  }
  file->data_offsets_.push_back(image.data_offset);
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> first, MappedFile::Open(path));
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file,
                           FromBytes(absl::MakeConstSpan(first->data(), first->size()), path));
  file->mappings_.push_back(std::move(first));

  int64_t split_no = -1;
  int64_t split_count = -1;
  COLIBRI_RETURN_IF_ERROR(ReadSplitKey(file->FindValue(kSplitNo), path, kSplitNo, &split_no));
  COLIBRI_RETURN_IF_ERROR(
      ReadSplitKey(file->FindValue(kSplitCount), path, kSplitCount, &split_count));
  if (split_count == 0) return absl::DataLossError(absl::StrCat(path, ": split.count is 0"));
  if (split_count > 1 && split_no != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": split.no is ", split_no, " of ",
                                                   split_count, "; open the first file"));
  }
  if (split_count <= 1) {
    if (split_no > 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": split.no ", split_no, " without split.count"));
    }
    return file;
  }

  const std::string want_suffix = absl::StrFormat("-00001-of-%05d.gguf", split_count);
  if (path.size() < kSplitSuffixLength ||
      path.compare(path.size() - kSplitSuffixLength, kSplitSuffixLength, want_suffix) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": split.count is ", split_count,
                                                   " but the name does not end in ", want_suffix));
  }
  const std::string prefix = path.substr(0, path.size() - kSplitSuffixLength);
  for (int64_t s = 1; s < split_count; ++s) {
    const std::string sibling = absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, s + 1, split_count);
    absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(sibling);
    if (!mapped.ok()) {
      return absl::Status(mapped.status().code(),
                          absl::StrCat(path, ": split file ", s + 1, " of ", split_count, ": ",
                                       mapped.status().message()));
    }
    COLIBRI_ASSIGN_OR_RETURN(
        ParsedImage image,
        GgufParser::Parse(absl::MakeConstSpan((*mapped)->data(), (*mapped)->size()), sibling,
                          static_cast<int>(s)));
    int64_t no = -1;
    int64_t count = -1;
    COLIBRI_RETURN_IF_ERROR(ReadSplitKey(FindIn(image, kSplitNo), sibling, kSplitNo, &no));
    COLIBRI_RETURN_IF_ERROR(ReadSplitKey(FindIn(image, kSplitCount), sibling, kSplitCount, &count));
    if (no != s || count != split_count) {
      return absl::DataLossError(absl::StrCat(sibling, ": split.no is ", no, " and split.count ",
                                              count, ", want ", s, " and ", split_count));
    }
    for (TensorInfo& info : image.tensors) {
      if (!file->tensor_index_.emplace(info.name, file->tensors_.size()).second) {
        const TensorInfo& other = file->tensors_[file->tensor_index_[info.name]];
        return absl::DataLossError(absl::StrCat(sibling, ": tensor '", EscapeForMessage(info.name),
                                                "' is also in split file ", other.split_index + 1));
      }
      file->tensors_.push_back(std::move(info));
    }
    file->data_offsets_.push_back(image.data_offset);
    file->mappings_.push_back(*std::move(mapped));
  }
  if (const Value* v = file->FindValue(kSplitTensorsCount)) {
    absl::StatusOr<int64_t> want = AsInt(path, kSplitTensorsCount, *v);
    if (!want.ok()) return absl::DataLossError(want.status().message());
    if (*want != static_cast<int64_t>(file->tensors_.size())) {
      return absl::DataLossError(absl::StrCat(path, ": split.tensors.count is ", *want, " but the ",
                                              split_count, " files hold ", file->tensors_.size(),
                                              " tensors"));
    }
  }
  return file;
}

int GgufFile::split_count() const {
  return mappings_.empty() ? 1 : static_cast<int>(mappings_.size());
}

const Value* GgufFile::FindValue(absl::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const MappedFile* GgufFile::mapping(int split_index) const {
  if (split_index < 0 || static_cast<size_t>(split_index) >= mappings_.size()) return nullptr;
  return mappings_[split_index].get();
}

uint64_t GgufFile::data_offset(int split_index) const {
  if (split_index < 0 || static_cast<size_t>(split_index) >= data_offsets_.size()) return 0;
  return data_offsets_[split_index];
}

namespace {

absl::Status Missing(absl::string_view file, absl::string_view key) {
  return absl::NotFoundError(absl::StrCat(file, ": metadata key '", key, "' not found"));
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != ValueType::kString) return WrongType(path_, key, *v, "a string");
  return v->s;
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  return AsInt(path_, key, *v);
}

absl::StatusOr<uint64_t> GgufFile::GetUint(absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  return AsUint(path_, key, *v);
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type == ValueType::kFloat32 || v->type == ValueType::kFloat64) return v->f;
  if (IsUnsignedType(v->type)) return static_cast<double>(v->u);
  if (IsIntegerType(v->type)) return static_cast<double>(v->i);
  return WrongType(path_, key, *v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != ValueType::kBool) return WrongType(path_, key, *v, "a bool");
  return v->i != 0;
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStringArray(
    absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != ValueType::kArray || v->array_type != ValueType::kString) {
    return WrongType(path_, key, *v, "an array of string");
  }
  return &v->strings;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != ValueType::kArray ||
      !(IsIntegerType(v->array_type) || v->array_type == ValueType::kBool)) {
    return WrongType(path_, key, *v, "an array of integers");
  }
  if (v->array_type != ValueType::kUint64) return v->ints;
  std::vector<int64_t> out;
  out.reserve(v->uints.size());
  for (uint64_t u : v->uints) {
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata '", key, "' element ",
                                                     out.size(), " value ", u,
                                                     " does not fit int64"));
    }
    out.push_back(static_cast<int64_t>(u));
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(absl::string_view key) const {
  const Value* v = FindValue(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != ValueType::kArray) return WrongType(path_, key, *v, "an array of numbers");
  switch (v->array_type) {
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      return std::vector<float>(v->floats.begin(), v->floats.end());
    case ValueType::kUint64:
      return std::vector<float>(v->uints.begin(), v->uints.end());
    default:
      if (!IsIntegerType(v->array_type)) return WrongType(path_, key, *v, "an array of numbers");
      return std::vector<float>(v->ints.begin(), v->ints.end());
  }
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(absl::string_view key, int64_t fallback) const {
  if (FindValue(key) == nullptr) return fallback;
  return GetInt(key);
}

absl::StatusOr<double> GgufFile::GetFloatOr(absl::string_view key, double fallback) const {
  if (FindValue(key) == nullptr) return fallback;
  return GetFloat(key);
}

absl::StatusOr<bool> GgufFile::GetBoolOr(absl::string_view key, bool fallback) const {
  if (FindValue(key) == nullptr) return fallback;
  return GetBool(key);
}

absl::StatusOr<std::string> GgufFile::GetStringOr(absl::string_view key,
                                                  std::string fallback) const {
  if (FindValue(key) == nullptr) return fallback;
  return GetString(key);
}

}  // namespace colibri::gguf
