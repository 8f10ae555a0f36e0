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
namespace {

uint64_t PageSize() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// RoundUp(size, page) bytes of anonymous memory starting at a multiple of
// kHugePageBytes: address space only, to put a file mapping over with
// MAP_FIXED, or (writable) committed memory for a copy.
absl::StatusOr<uint8_t*> MapAligned(uint64_t size, bool writable) {
  const uint64_t bytes = RoundUp(size, PageSize());
  const uint64_t slack = MappedFile::kHugePageBytes;
  void* p = writable ? ::mmap(nullptr, bytes + slack, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                     : ::mmap(nullptr, bytes + slack, PROT_NONE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("no ", writable ? "memory" : "address space",
                                                     " for ", bytes,
                                                     " bytes: ", std::strerror(errno)));
  }
  uint8_t* const raw = static_cast<uint8_t*>(p);
  uint8_t* const at = reinterpret_cast<uint8_t*>(
      RoundUp(reinterpret_cast<uintptr_t>(raw), MappedFile::kHugePageBytes));
  if (at > raw) ::munmap(raw, static_cast<size_t>(at - raw));
  uint8_t* const tail = at + bytes;
  if (raw + bytes + slack > tail) ::munmap(tail, static_cast<size_t>(raw + bytes + slack - tail));
  return at;
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
    absl::StatusOr<uint8_t*> at = MapAligned(size, /*writable=*/false);
    if (!at.ok()) {
      ::close(fd);
      return absl::Status(at.status().code(), absl::StrCat(path, ": ", at.status().message()));
    }
    void* p = ::mmap(*at, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::munmap(*at, RoundUp(size, PageSize()));
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
  absl::StatusOr<uint8_t*> fresh = MapAligned(span, /*writable=*/true);
  if (!fresh.ok()) {
    return absl::Status(fresh.status().code(), absl::StrCat(path_, ": ", fresh.status().message()));
  }
  uint8_t* const ram = *fresh;
  // Without transparent huge pages (or with them off) this is a hint only:
  // the copy then still saves the page-cache lookups of a shared mapping.
  ::madvise(ram, span, MADV_HUGEPAGE);
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
  copied_.emplace_back(begin, end);
  // One read per page from this process, as Populate does: under a hypervisor
  // that shadows the guest's page tables the first user access to each page
  // traps to the host, and the pread above wrote the pages through the
  // kernel's mapping, not this one. Without it the first prompt after load
  // ran 10-20% slower than from the populated file mapping.
  volatile uint8_t sink = 0;
  for (uint64_t i = begin; i < end; i += PageSize()) sink = sink + data_[i];
  (void)sink;
  return absl::OkStatus();
}

void MappedFile::DropPages(uint64_t offset, uint64_t length) const {
  if (data_ == nullptr || offset >= size_) return;
  const uint64_t page = PageSize();
  // Whole pages inside the range only: the edges may hold bytes in use.
  uint64_t begin = RoundUp(offset, page);
  const uint64_t end = std::min(offset + length, size_) / page * page;
  absl::MutexLock lock(&mu_);
  // The file-backed stretches between the copied chunks, in offset order.
  std::vector<std::pair<uint64_t, uint64_t>> kept = copied_;
  std::sort(kept.begin(), kept.end());
  for (const auto& [kept_begin, kept_end] : kept) {
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
