// The file format of the prefix cache's disk tier (prefix_disk_store.h): one
// record per block, the rows of one block of a token prefix with a header
// saying what they belong to.
//
// Layout, little-endian (the machines Colibri runs on):
//   offset 0    "CLKVBLK\1" (the last byte is the record format version)
//          8    u32 rows layout version (arch::KvCache::kRowsLayoutVersion)
//          12   u32 numeric path (ops::NumericPath)
//          16   u32 KV type (arch::KvType)
//          20   u32 block tokens
//          24   u32 n_tokens: the prefix's tokens, up to the end of this block
//          28   u32 0
//          32   u64 payload bytes
//          40   char[64] model identity, zero-padded (PrefixModelIdentity)
//          104  i32 tokens [n_tokens]
//               u64 XXH64 (seed 0) of every byte above
//               payload: the block's rows, KvCache::ExportRows' packed form
//               u64 XXH64 (seed 0) of the payload
// The header (everything before the payload) can be checked without reading
// the payload, so a directory is indexed by reading headers only.
//
// Thread-safety: pure functions.
#ifndef COLIBRI_COORDINATOR_GENERATION_PREFIX_DISK_RECORD_H_
#define COLIBRI_COORDINATOR_GENERATION_PREFIX_DISK_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/gguf/gguf_file.h"

namespace colibri::coordinator {

// What a record's rows were computed by and for.
struct PrefixRecordKind {
  std::string model;  // PrefixModelIdentity, at most kMaxModelIdentity chars
  int path = 0;       // ops::NumericPath
  int kv_type = 0;    // arch::KvType
  int rows_layout_version = 0;
  int block_tokens = 0;
};

struct PrefixRecordHeader {
  PrefixRecordKind kind;
  std::vector<int32_t> tokens;  // [n_tokens] the prefix up to the end of the block
  uint64_t payload_bytes = 0;
};

constexpr size_t kMaxModelIdentity = 64;
// Bytes of the fixed part of a header (before the tokens).
constexpr size_t kPrefixRecordFixedBytes = 104;

// The identity of a loaded model that record headers carry: its structural
// fingerprint (gguf::ModelFingerprint: metadata and tensor table) and an
// XXH64 of the first 4 KiB of every tensor's data (so that two fine-tunes of
// one shape differ), 48 hex digits. Errors as ModelFingerprint's.
absl::StatusOr<std::string> PrefixModelIdentity(const gguf::GgufFile& file);

// Bytes of a header with n tokens, checksum included.
uint64_t PrefixRecordHeaderBytes(uint64_t n_tokens);
// Bytes of a whole record.
uint64_t PrefixRecordBytes(uint64_t n_tokens, uint64_t payload_bytes);

// The header's bytes, its checksum included; the payload and its checksum
// (PrefixPayloadChecksum) follow it in the file. Requires kind.model of at
// most kMaxModelIdentity chars.
std::string EncodePrefixRecordHeader(const PrefixRecordHeader& header);
uint64_t PrefixPayloadChecksum(absl::Span<const uint8_t> payload);

// The tokens a header of `fixed` (its first kPrefixRecordFixedBytes bytes)
// claims, once checked against the size of the file it comes from (so that a
// damaged count never sizes an allocation): DataLoss naming the fault when
// `fixed` is short, not a record, or the file is not as long as the header
// says; FailedPrecondition for a record of another format version (a
// foreign record, not a damaged one).
absl::StatusOr<uint32_t> PrefixRecordTokenCount(absl::string_view fixed, uint64_t file_size);

// Decodes a whole header (PrefixRecordHeaderBytes(n) bytes, n from
// PrefixRecordTokenCount) and checks its checksum: DataLoss naming the fault.
absl::StatusOr<PrefixRecordHeader> DecodePrefixRecordHeader(absl::string_view bytes);

// Why a record of `got` does not belong to a reader of `want` ("" when it
// does): another model, KV type, rows layout or block size. The numeric path
// is not compared: one reader holds the records of both.
std::string PrefixRecordKindMismatch(const PrefixRecordKind& got, const PrefixRecordKind& want);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_PREFIX_DISK_RECORD_H_
