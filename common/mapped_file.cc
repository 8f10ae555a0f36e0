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
#include "common/huge_pages.h"

namespace colibri {
namespace {

uint64_t PageSize() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// One read per page of [begin, end) from this process. Under a hypervisor
// that shadows or lazily backs the guest's page tables, the first access to
// each page traps to the host, even after the kernel filled the page (on the
// development VMs a second for a 1.8 GB model; docs/benchmarks.md). On bare
// metal the loop costs a few ms. Paying it at load keeps it out of the first
// prompt.
void TouchPages(const uint8_t* data, uint64_t begin, uint64_t end) {
  const uint64_t page = PageSize();
  volatile uint8_t sink = 0;
  for (uint64_t i = begin; i < end; i += page) sink = sink + data[i];
  (void)sink;
}

}  // namespace

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
    uint8_t* const at = ReserveHugeAligned(size);
    if (at == nullptr) {
      const int err = errno;
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": no address space for ", size, " bytes: ", std::strerror(err)));
    }
    void* p = ::mmap(at, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::munmap(at, size);
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(err)));
    }
    data = static_cast<const uint8_t*>(p);
  }
  // The descriptor stays open for CopyToRam, which reads with pread so that an
  // I/O error is a status rather than a SIGBUS.
  return std::unique_ptr<MappedFile>(new MappedFile(path, fd, data, size));
}

MappedFile::~MappedFile() {
  // One munmap covers the file's mapping and the ranges CopyToRam moved in.
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  ::close(fd_);
}

absl::Status MappedFile::CopyToRam(uint64_t offset, uint64_t length) const {
  if (data_ == nullptr || length == 0 || offset >= size_) return absl::OkStatus();
  const uint64_t begin = offset / kHugePageBytes * kHugePageBytes;
  const uint64_t end =
      std::min(RoundUp(offset + length, kHugePageBytes), RoundUp(size_, PageSize()));
  const uint64_t span = end - begin;
  absl::MutexLock lock(&mu_);  // no DropPages of this range meanwhile
  uint8_t* const ram = MapHugePages(span);
  if (ram == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path_, ": no memory for ", span, " bytes: ", std::strerror(errno)));
  }
  const uint64_t want = std::min(span, size_ - begin);  // past the end stays zero
  uint64_t done = 0;
  while (done < want) {
    const ssize_t got = ::pread(fd_, ram + done, std::min<uint64_t>(want - done, 1u << 30),
                                static_cast<off_t>(begin + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = got < 0 ? errno : 0;
      ::munmap(ram, span);
      return absl::DataLossError(absl::StrCat(
          path_, ": reading bytes ", begin + done, "..", begin + want, ": ",
          err != 0 ? std::strerror(err) : "the file is shorter than when it was opened"));
    }
    done += static_cast<uint64_t>(got);
  }
  // Moves the copy's pages over the file's in one step: readers see the old
  // bytes or the same new ones, never a hole.
  if (::mprotect(ram, span, PROT_READ) != 0 ||
      ::mremap(ram, span, span, MREMAP_MAYMOVE | MREMAP_FIXED,
               const_cast<uint8_t*>(data_) + begin) == MAP_FAILED) {
    const int err = errno;
    ::munmap(ram, span);
    return absl::InternalError(absl::StrCat(path_, ": mremap: ", std::strerror(err)));
  }
  copied_.insert(std::upper_bound(copied_.begin(), copied_.end(), std::make_pair(begin, end)),
                 std::make_pair(begin, end));
  // pread wrote the pages through the kernel's mapping, not this one: without
  // the touch the first prompt after load pays this process's first access to
  // every page.
  TouchPages(data_, begin, end);
  return absl::OkStatus();
}

void MappedFile::DropPages(uint64_t offset, uint64_t length) const {
  if (data_ == nullptr || offset >= size_) return;
  const uint64_t page = PageSize();
  // Whole pages inside the range only: the edges may hold bytes in use.
  uint64_t begin = RoundUp(offset, page);
  const uint64_t end = std::min(offset + length, size_) / page * page;
  absl::MutexLock lock(&mu_);
  // The file-backed stretches between the copied chunks.
  for (const auto& [kept_begin, kept_end] : copied_) {
    if (kept_end <= begin) continue;
    if (kept_begin >= end) break;
    if (kept_begin > begin) {
      ::madvise(const_cast<uint8_t*>(data_) + begin, kept_begin - begin, MADV_DONTNEED);
    }
    begin = std::max(begin, kept_end);
  }
  if (begin < end) ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
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
  // One read per page even after MADV_POPULATE_READ (see TouchPages).
  TouchPages(data_, 0, size_);
}

}  // namespace colibri
