#include "coordinator/generation/prefix_disk_record.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/arch/kv_cache.h"
#include "model/gguf/gguf_fingerprint.h"

namespace colibri::coordinator {
namespace {

constexpr char kMagic[8] = {'C', 'L', 'K', 'V', 'B', 'L', 'K', '\1'};
constexpr size_t kModelOffset = 40;
// Bytes of each tensor's data the model identity hashes.
constexpr uint64_t kSampleBytes = 4096;

template <typename T>
void Put(std::string* out, size_t at, T v) {
  std::memcpy(out->data() + at, &v, sizeof(v));
}

template <typename T>
T Get(absl::string_view in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(v));
  return v;
}

std::string KvName(int type) {
  for (arch::KvType t : {arch::KvType::kF32, arch::KvType::kF16, arch::KvType::kQ8_0}) {
    if (type == static_cast<int>(t)) return arch::KvTypeName(t);
  }
  return absl::StrCat("type ", type);
}

}  // namespace

absl::StatusOr<std::string> PrefixModelIdentity(const gguf::GgufFile& file) {
  COLIBRI_ASSIGN_OR_RETURN(std::string id, gguf::ModelFingerprint(file));
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.data != nullptr) XXH64_update(state, t.data, std::min<uint64_t>(t.n_bytes, kSampleBytes));
  }
  absl::StrAppend(&id, absl::StrFormat("%016x", XXH64_digest(state)));
  XXH64_freeState(state);
  return id;
}

uint64_t PrefixRecordHeaderBytes(uint64_t n_tokens) {
  return kPrefixRecordFixedBytes + n_tokens * sizeof(int32_t) + sizeof(uint64_t);
}

uint64_t PrefixRecordBytes(uint64_t n_tokens, uint64_t payload_bytes) {
  return PrefixRecordHeaderBytes(n_tokens) + payload_bytes + sizeof(uint64_t);
}

std::string EncodePrefixRecordHeader(const PrefixRecordHeader& header) {
  const PrefixRecordKind& k = header.kind;
  std::string out(PrefixRecordHeaderBytes(header.tokens.size()), '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, 8, k.rows_layout_version);
  Put<uint32_t>(&out, 12, k.path);
  Put<uint32_t>(&out, 16, k.kv_type);
  Put<uint32_t>(&out, 20, k.block_tokens);
  Put<uint32_t>(&out, 24, static_cast<uint32_t>(header.tokens.size()));
  Put<uint64_t>(&out, 32, header.payload_bytes);
  std::memcpy(out.data() + kModelOffset, k.model.data(),
              std::min(k.model.size(), kMaxModelIdentity));
  std::memcpy(out.data() + kPrefixRecordFixedBytes, header.tokens.data(),
              header.tokens.size() * sizeof(int32_t));
  const size_t body = out.size() - sizeof(uint64_t);
  Put<uint64_t>(&out, body, XXH64(out.data(), body, 0));
  return out;
}

uint64_t PrefixPayloadChecksum(absl::Span<const uint8_t> payload) {
  return XXH64(payload.data(), payload.size(), 0);
}

absl::StatusOr<uint32_t> PrefixRecordTokenCount(absl::string_view fixed, uint64_t file_size) {
  if (fixed.size() < kPrefixRecordFixedBytes || file_size < kPrefixRecordFixedBytes) {
    return absl::DataLossError(
        absl::StrCat("truncated: ", file_size, " bytes, shorter than a record header"));
  }
  if (std::memcmp(fixed.data(), kMagic, sizeof(kMagic) - 1) != 0) {
    return absl::DataLossError("not a KV block record (bad magic)");
  }
  if (fixed[sizeof(kMagic) - 1] != kMagic[sizeof(kMagic) - 1]) {
    return absl::FailedPreconditionError(
        absl::StrCat("record format version ", static_cast<int>(fixed[sizeof(kMagic) - 1]),
                     ", this build reads ", static_cast<int>(kMagic[sizeof(kMagic) - 1])));
  }
  const uint32_t n_tokens = Get<uint32_t>(fixed, 24);
  const uint64_t payload_bytes = Get<uint64_t>(fixed, 32);
  // Both are bounded by the file's size before they are added up.
  if (n_tokens > file_size / sizeof(int32_t) || payload_bytes > file_size ||
      PrefixRecordBytes(n_tokens, payload_bytes) != file_size) {
    return absl::DataLossError(absl::StrCat("the header claims ", n_tokens, " tokens and ",
                                            payload_bytes, " bytes of rows, the file has ",
                                            file_size, " bytes (truncated?)"));
  }
  return n_tokens;
}

absl::StatusOr<PrefixRecordHeader> DecodePrefixRecordHeader(absl::string_view bytes) {
  if (bytes.size() < PrefixRecordHeaderBytes(0)) {
    return absl::DataLossError("truncated: shorter than a record header");
  }
  const size_t body = bytes.size() - sizeof(uint64_t);
  if (XXH64(bytes.data(), body, 0) != Get<uint64_t>(bytes, body)) {
    return absl::DataLossError("header checksum mismatch");
  }
  const uint32_t n_tokens = Get<uint32_t>(bytes, 24);
  if (PrefixRecordHeaderBytes(n_tokens) != bytes.size()) {
    return absl::DataLossError(absl::StrCat("the header claims ", n_tokens, " tokens in ",
                                            bytes.size(), " bytes of header"));
  }
  PrefixRecordHeader h;
  h.kind.rows_layout_version = static_cast<int>(Get<uint32_t>(bytes, 8));
  h.kind.path = static_cast<int>(Get<uint32_t>(bytes, 12));
  h.kind.kv_type = static_cast<int>(Get<uint32_t>(bytes, 16));
  h.kind.block_tokens = static_cast<int>(Get<uint32_t>(bytes, 20));
  h.payload_bytes = Get<uint64_t>(bytes, 32);
  const absl::string_view model = bytes.substr(kModelOffset, kMaxModelIdentity);
  h.kind.model = std::string(model.substr(0, model.find('\0')));
  h.tokens.resize(n_tokens);
  std::memcpy(h.tokens.data(), bytes.data() + kPrefixRecordFixedBytes,
              n_tokens * sizeof(int32_t));
  return h;
}

std::string PrefixRecordKindMismatch(const PrefixRecordKind& got, const PrefixRecordKind& want) {
  if (got.model != want.model) {
    return absl::StrCat("another model (", absl::CHexEscape(got.model), ", this one is ",
                        want.model, ")");
  }
  if (got.kv_type != want.kv_type) {
    return absl::StrCat("another KV type (", KvName(got.kv_type), ", this one is ",
                        KvName(want.kv_type), ")");
  }
  if (got.rows_layout_version != want.rows_layout_version) {
    return absl::StrCat("another rows layout version (", got.rows_layout_version,
                        ", this build writes ", want.rows_layout_version, ")");
  }
  if (got.block_tokens != want.block_tokens) {
    return absl::StrCat("another block size (", got.block_tokens, " tokens, this one is ",
                        want.block_tokens, ")");
  }
  return "";
}

}  // namespace colibri::coordinator
