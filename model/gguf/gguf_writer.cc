#include "model/gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_encoding.h"

namespace colibri::gguf {
namespace {

constexpr uint32_t kGgufVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr char kAlignmentKey[] = "general.alignment";

uint64_t PadTo(uint64_t n, uint64_t alignment) {
  if (alignment <= 1) return n;
  const uint64_t rem = n % alignment;
  return rem == 0 ? n : n + (alignment - rem);
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Checked product of dims; false on a negative dim or overflow.
bool ElementCount(const std::vector<int64_t>& dims, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d != 0 && n > INT64_MAX / d) return false;
    n *= d;
  }
  *out = n;
  return true;
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

GgufWriter::GgufWriter(uint64_t alignment) : alignment_(alignment) {}

void GgufWriter::SetValue(std::string key, Value value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

absl::Status GgufWriter::AddTensor(std::string name, ops::TensorType type,
                                   std::vector<int64_t> dims, std::vector<uint8_t> bytes) {
  if (tensor_names_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' added twice"));
  }
  if (dims.empty() || dims.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", dims.size(), " dims, want 1 to 4"));
  }
  int64_t n_elements = 0;
  if (!ElementCount(dims, &n_elements)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': dims are negative or overflow"));
  }
  const ops::TensorTypeTraits& traits = ops::GetTraits(type);
  if (dims[0] % traits.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': row length ", dims[0],
                                                   " is not a multiple of the ", traits.name,
                                                   " block size ", traits.block_size));
  }
  const uint64_t want = static_cast<uint64_t>(n_elements / traits.block_size) *
                        static_cast<uint64_t>(traits.type_size);
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", bytes.size(),
                                                   " bytes, want ", want, " for ", traits.name));
  }
  tensor_names_.insert(name);
  tensors_.push_back({std::move(name), type, std::move(dims), std::move(bytes)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddF32Tensor(std::string name, std::vector<int64_t> dims,
                                      absl::Span<const float> values) {
  std::vector<uint8_t> bytes;
  bytes.reserve(values.size() * sizeof(float));
  internal::VectorSink sink(&bytes);
  for (float v : values) sink.F32(v);
  return AddTensor(std::move(name), ops::TensorType::kF32, std::move(dims), std::move(bytes));
}

GgufWriter::Metadata GgufWriter::MetadataToWrite() const {
  Metadata out;
  bool has_alignment = false;
  for (const auto& kv : metadata_) has_alignment |= kv.first == kAlignmentKey;
  if (alignment_ != kDefaultAlignment && !has_alignment) {
    out.emplace_back(kAlignmentKey, Value::Uint32(static_cast<uint32_t>(alignment_)));
  }
  out.insert(out.end(), metadata_.begin(), metadata_.end());
  return out;
}

std::vector<uint8_t> GgufWriter::EncodeHead(const Metadata& metadata, size_t first,
                                            size_t last) const {
  std::vector<uint8_t> head;
  internal::VectorSink sink(&head);
  sink.Append("GGUF", 4);
  sink.U32(kGgufVersion);
  sink.U64(last - first);
  sink.U64(metadata.size());
  for (const auto& [key, value] : metadata) internal::EncodeKeyValue(key, value, sink);
  uint64_t offset = 0;
  for (size_t t = first; t < last; ++t) {
    const PendingTensor& tensor = tensors_[t];
    sink.String(tensor.name);
    sink.U32(static_cast<uint32_t>(tensor.dims.size()));
    for (int64_t d : tensor.dims) sink.U64(static_cast<uint64_t>(d));
    sink.U32(static_cast<uint32_t>(tensor.type));
    sink.U64(offset);
    offset = PadTo(offset + tensor.bytes.size(), alignment_);
  }
  head.resize(PadTo(head.size(), alignment_), 0);
  return head;
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> image = EncodeHead(MetadataToWrite(), 0, tensors_.size());
  uint64_t total = image.size();
  for (const PendingTensor& t : tensors_) total = PadTo(total + t.bytes.size(), alignment_);
  image.reserve(total);
  for (const PendingTensor& t : tensors_) {
    image.insert(image.end(), t.bytes.begin(), t.bytes.end());
    image.resize(PadTo(image.size(), alignment_), 0);
  }
  return image;
}

absl::Status GgufWriter::WriteRange(const std::string& path, const Metadata& metadata, size_t first,
                                    size_t last) const {
  if (!IsPowerOfTwo(alignment_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": alignment ", alignment_, " is not a power of two"));
  }
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(tmp.c_str(), "wb"));
  if (file == nullptr) return IoError("cannot create", tmp);
  const std::vector<uint8_t> head = EncodeHead(metadata, first, last);
  bool ok = std::fwrite(head.data(), 1, head.size(), file.get()) == head.size();
  static const uint8_t kZeros[256] = {};
  for (size_t t = first; ok && t < last; ++t) {
    const std::vector<uint8_t>& bytes = tensors_[t].bytes;
    ok = std::fwrite(bytes.data(), 1, bytes.size(), file.get()) == bytes.size();
    for (uint64_t pad = PadTo(bytes.size(), alignment_) - bytes.size(); ok && pad > 0;) {
      const size_t n = pad < sizeof(kZeros) ? static_cast<size_t>(pad) : sizeof(kZeros);
      ok = std::fwrite(kZeros, 1, n, file.get()) == n;
      pad -= n;
    }
  }
  if (!ok) {
    const absl::Status status = IoError("write failed", tmp);
    file.reset();
    std::remove(tmp.c_str());
    return status;
  }
  if (std::fclose(file.release()) != 0) {
    const absl::Status status = IoError("close failed", tmp);
    std::remove(tmp.c_str());
    return status;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status status = IoError("rename failed", tmp);
    std::remove(tmp.c_str());
    return status;
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  return WriteRange(path, MetadataToWrite(), 0, tensors_.size());
}

absl::StatusOr<std::vector<std::string>> GgufWriter::WriteSplitFiles(const std::string& prefix,
                                                                     int split_count) const {
  if (split_count < 1 || split_count > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("split count ", split_count, " out of range"));
  }
  std::vector<std::string> paths;
  const size_t n = tensors_.size();
  const size_t count = static_cast<size_t>(split_count);
  for (size_t s = 0; s < count; ++s) {
    Metadata metadata;
    if (s == 0) {
      for (const auto& kv : MetadataToWrite()) {
        if (kv.first.rfind("split.", 0) != 0) metadata.push_back(kv);
      }
    } else if (alignment_ != kDefaultAlignment) {
      metadata.emplace_back(kAlignmentKey, Value::Uint32(static_cast<uint32_t>(alignment_)));
    }
    metadata.emplace_back("split.no", Value::Uint16(static_cast<uint16_t>(s)));
    metadata.emplace_back("split.count", Value::Uint16(static_cast<uint16_t>(split_count)));
    metadata.emplace_back("split.tensors.count", Value::Int32(static_cast<int32_t>(n)));
    std::string path = absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, s + 1, split_count);
    COLIBRI_RETURN_IF_ERROR(WriteRange(path, metadata, n * s / count, n * (s + 1) / count));
    paths.push_back(std::move(path));
  }
  return paths;
}

}  // namespace colibri::gguf
