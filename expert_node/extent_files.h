// Expert records in large append-only extent files, read back with one
// aligned read of exactly the record's blocks.
//
// Folder: <data_dir>/extents/, files "<NNNNNN>.ext" (6 decimal digits). A
// record (the expert's value: header + payload, expert_record.h) starts on a
// kDirectIoAlignment boundary and is followed by zeros up to the next one, so
// a read of round_up(length) bytes at its offset never crosses into another
// record and O_DIRECT can read it into an aligned buffer. A file takes records
// until it holds Options::max_file_bytes; then the next file begins.
//
// The extent files hold bytes; RocksDB holds what they mean. A record exists
// only once an ExtentPointer to it is committed in the store's database, and
// Append makes the bytes durable (fdatasync; the folder entry of a new file
// is synced too) before it returns the pointer. A crash at any point thus
// leaves either a committed pointer to durable bytes or unreferenced bytes in
// a file (never read; appending resumes after them).
//
// Damage: ReadMany checks what it can know without the record's contents (the
// file exists, the record lies inside it); the caller verifies the bytes
// (header and payload checksum). Space of records no pointer references any
// more (replaced or deleted experts) is not reclaimed.
//
// Thread-safety: ReadMany may be called concurrently with everything; Append
// must not be called concurrently with another Append (the store's writer
// lock serialises them).
#ifndef COLIBRI_EXPERT_NODE_EXTENT_FILES_H_
#define COLIBRI_EXPERT_NODE_EXTENT_FILES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "expert_node/blob_buffer_pool.h"
#include "expert_node/disk_read_queue.h"

namespace colibri::expert_node {

// Where one record lives. Encoded (kExtentPointerBytes, little-endian):
//   u32 magic "CLXP"  u32 version (1)  u32 file  u32 reserved (0)
//   u64 offset  u64 length  u64 XXH64 (seed 0) of the record's header
struct ExtentPointer {
  uint32_t file = 0;
  uint64_t offset = 0;  // multiple of kDirectIoAlignment
  uint64_t length = 0;  // 1..kMaxExtentRecordBytes
  uint64_t header_xxh64 = 0;
};
inline constexpr uint32_t kExtentPointerMagic = 0x50584C43;  // "CLXP" little-endian
inline constexpr size_t kExtentPointerBytes = 40;
// Largest record accepted (guards allocations against a damaged pointer).
inline constexpr uint64_t kMaxExtentRecordBytes = uint64_t{1} << 32;

std::string EncodeExtentPointer(const ExtentPointer& pointer);
// Whether `value` is an encoded pointer (its size and magic); legacy values
// (a whole record, magic "CLXE") are not.
bool IsExtentPointer(absl::string_view value);
// DataLoss naming the field for a malformed pointer: version, reserved bits,
// an unaligned offset, a length of 0 or above kMaxExtentRecordBytes.
absl::StatusOr<ExtentPointer> DecodeExtentPointer(absl::string_view value);

class ExtentFiles {
 public:
  struct Options {
    // Folder of the extent files; created when missing. Required.
    std::string dir;
    // Open files for reading with O_DIRECT (no page cache); falls back to
    // buffered reads on a file system that refuses O_DIRECT (tmpfs).
    // Default: false.
    bool direct_reads = false;
    // fdatasync every record (and the folder on a new file) before Append
    // returns. Default: true.
    bool sync_writes = true;
    // A file takes no more records once it holds this many bytes.
    // Default: 1 GiB.
    uint64_t max_file_bytes = uint64_t{1} << 30;
    // Bytes of read buffers kept for reuse (BlobBufferPool). Default: 64 MiB.
    uint64_t max_free_buffer_bytes = uint64_t{64} << 20;
  };

  // The record read: `bytes` (exactly the pointer's length) inside an aligned
  // buffer that goes back to the files' pool when this is destroyed.
  struct Record {
    BlobBuffer buffer;
    absl::string_view bytes;
  };

  // Opens the folder (creating it). `queue` is borrowed and must outlive the
  // files. Internal on an I/O error.
  static absl::StatusOr<std::unique_ptr<ExtentFiles>> Open(const Options& options,
                                                           DiskReadQueue* queue);
  ~ExtentFiles();
  ExtentFiles(const ExtentFiles&) = delete;
  ExtentFiles& operator=(const ExtentFiles&) = delete;

  // Writes one record, the concatenation of `parts` (parts[0]: the record's
  // header, whose XXH64 the pointer carries), and returns where it is.
  // InvalidArgument when empty or larger than kMaxExtentRecordBytes; Internal
  // on an I/O error (the record is then not there).
  absl::StatusOr<ExtentPointer> Append(absl::Span<const absl::string_view> parts);

  // Reads every pointer's record, all in flight together. Per pointer:
  // DataLoss when its file is missing or the record does not lie inside it;
  // Internal on an I/O error; Cancelled when `background` (non-null: the reads
  // are background reads it steers, disk_read_queue.h) cancelled them first.
  std::vector<absl::StatusOr<Record>> ReadMany(absl::Span<const ExtentPointer> pointers,
                                               const ReadControl* background = nullptr);

  // Whether reads bypass the page cache (direct_reads and the file system
  // accepted O_DIRECT).
  bool direct() const;
  const std::string& dir() const { return dir_; }
  DiskReadQueue* queue() const { return queue_; }

 private:
  struct ReadFile {
    int fd = -1;
    uint64_t size = 0;  // bytes when opened (or appended since)
  };
  ExtentFiles(const Options& options, DiskReadQueue* queue);
  std::string PathOf(uint32_t file) const;
  // Starts appending to `file` at its end rounded up to the alignment.
  absl::Status OpenForAppend(uint32_t file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // The open read descriptor of `file` (opening it); DataLoss when missing.
  absl::StatusOr<ReadFile> ReadFileOf(uint32_t file);

  const std::string dir_;
  const Options options_;
  DiskReadQueue* const queue_;
  const std::shared_ptr<BlobBufferPool> buffers_;

  absl::Mutex write_mu_;
  int write_fd_ ABSL_GUARDED_BY(write_mu_) = -1;
  uint32_t write_file_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint64_t write_end_ ABSL_GUARDED_BY(write_mu_) = 0;  // aligned

  mutable absl::Mutex read_mu_;
  std::map<uint32_t, ReadFile> read_files_ ABSL_GUARDED_BY(read_mu_);
  bool direct_ ABSL_GUARDED_BY(read_mu_) = false;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_EXTENT_FILES_H_
