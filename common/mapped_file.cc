#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace colibri {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  // Only regular files: a FIFO would block open() until a writer comes, a
  // device could block reads. Checked before opening and again on the
  // descriptor (the path may change in between), which is opened
  // non-blocking so that even then open() returns at once.
  struct stat before;
  if (::stat(path.c_str(), &before) == 0 && !S_ISREG(before.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InternalError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(err)));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::WillNeed(uint64_t offset, uint64_t length) const {
  if (data_ == nullptr || offset >= size_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const uint64_t end = std::min(size_, offset + length);
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_WILLNEED);
}

void MappedFile::Populate() const {
  if (data_ == nullptr) return;
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14
#endif
  // Other errors than EINVAL (kernels before 5.14), such as an I/O error or a
  // file cut short under us, are left to the reads that need the pages.
  if (::madvise(const_cast<uint8_t*>(data_), size_, MADV_POPULATE_READ) != 0 && errno != EINVAL) {
    return;
  }
  // One read per page even after MADV_POPULATE_READ: under a hypervisor that
  // shadows or lazily backs the guest's page tables, the first access to each
  // page still traps to the host (about 2 us a page on the VMs this was
  // measured on: 1 s for a 1.8 GB model, then 11 ms for the same loop). On
  // bare metal the loop costs a few ms. Paying it here keeps it out of the
  // first prompt.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  volatile uint8_t sink = 0;
  for (uint64_t i = 0; i < size_; i += page) sink = sink + data_[i];
  (void)sink;
}

}  // namespace colibri
