// A read-only memory mapping of a whole file.
//
// Thread-safety: immutable after Open; any number of threads may read data().
#ifndef COLIBRI_COMMON_MAPPED_FILE_H_
#define COLIBRI_COMMON_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

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

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  const std::string path_;
  const uint8_t* const data_;
  const uint64_t size_;
};

}  // namespace colibri

#endif  // COLIBRI_COMMON_MAPPED_FILE_H_
