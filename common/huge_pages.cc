#include "common/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

namespace colibri {
namespace {

uint8_t* MapAligned(uint64_t size, int prot, int flags) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t bytes = (size + page - 1) / page * page;
  // Over-allocate by one huge page, then unmap what lies outside the
  // aligned range.
  void* p =
      ::mmap(nullptr, bytes + kHugePageBytes, prot, flags | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  uint8_t* const raw = static_cast<uint8_t*>(p);
  uint8_t* const end = raw + bytes + kHugePageBytes;
  uint8_t* const at = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(raw) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
  if (at > raw) ::munmap(raw, static_cast<size_t>(at - raw));
  if (end > at + bytes) ::munmap(at + bytes, static_cast<size_t>(end - (at + bytes)));
  return at;
}

}  // namespace

uint8_t* MapHugePages(uint64_t bytes) {
  uint8_t* const at = MapAligned(bytes, PROT_READ | PROT_WRITE, 0);
  // Without transparent huge pages (or with them off) this is a hint only.
  if (at != nullptr) ::madvise(at, bytes, MADV_HUGEPAGE);
  return at;
}

uint8_t* ReserveHugeAligned(uint64_t bytes) { return MapAligned(bytes, PROT_NONE, MAP_NORESERVE); }

bool PopulatePages(void* at, uint64_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14
#endif
  if (bytes == 0) return true;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(at) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(at) + bytes + page - 1) / page * page;
  return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

}  // namespace colibri
