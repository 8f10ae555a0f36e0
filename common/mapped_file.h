// A read-only memory mapping of a whole file, parts of which can be moved into
// RAM (CopyToRam).
//
// Thread-safety: any number of threads may read data() and call the methods.
#ifndef COLIBRI_COMMON_MAPPED_FILE_H_
#define COLIBRI_COMMON_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/huge_pages.h"

namespace colibri {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound if it does not exist, InvalidArgument if it is
  // not a regular file (checked before opening; never blocks on a FIFO or a
  // device), Internal for other OS errors. An empty file maps to size() == 0
  // and data() == nullptr.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Advises the kernel that [offset, offset + length) will be read soon.
  void WillNeed(uint64_t offset, uint64_t length) const;

  // Maps every page of the file into this process now (reading from disk
  // what the page cache does not hold), so that later reads take no page
  // faults: MADV_POPULATE_READ, then one read per page (which also takes the
  // first-touch trap some hypervisors add, and is the only way on kernels
  // before 5.14).
  // Blocks until done. For a file that is read whole soon anyway (a model
  // whose experts all run here); never for one larger than memory.
  void Populate() const;

  // Replaces the mapping of the kHugePageBytes-aligned chunks that cover
  // [offset, offset + length) by a private copy of the same bytes in
  // anonymous memory, read-only and advised into transparent huge pages. data()
  // stays where it is and reads the same bytes; what changes is the cost of
  // reading them: a decode step streams its weights once per token, and on
  // 4 KiB page-cache pages that stream misses the TLB (costlier under a
  // hypervisor); the copy on huge pages avoids those misses
  // (docs/kernels.md#resident-weights). Each page of the copy is
  // read once before returning (see Populate). The copy is not reclaimable
  // the way the page cache is, so only for bytes that are read on every step
  // and fit in memory. ResourceExhausted or DataLoss (a read error, a file
  // shortened since Open) leave the mapping as it was. Threads reading the
  // range meanwhile see the same bytes: the pages are swapped under the
  // kernel's lock on the address space.
  absl::Status CopyToRam(uint64_t offset, uint64_t length) const;

  // Drops this process's pages of the file in the whole pages inside
  // [offset, offset + length) (madvise MADV_DONTNEED), so that they leave its
  // resident memory; a later read faults them back in from the file. Chunks
  // CopyToRam moved are kept: dropping them would lose their bytes.
  void DropPages(uint64_t offset, uint64_t length) const;

  // The mapping starts at a multiple of this, so that a copied chunk can sit on
  // huge pages.
  static constexpr uint64_t kHugePageBytes = colibri::kHugePageBytes;

 private:
  MappedFile(std::string path, int fd, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), fd_(fd), data_(data), size_(size) {}

  const std::string path_;
  const int fd_;
  const uint8_t* const data_;
  const uint64_t size_;
  // The [begin, end) byte ranges CopyToRam moved, whole chunks, in offset
  // order.
  mutable absl::Mutex mu_;
  mutable std::vector<std::pair<uint64_t, uint64_t>> copied_ ABSL_GUARDED_BY(mu_);
};

}  // namespace colibri

#endif  // COLIBRI_COMMON_MAPPED_FILE_H_
