// Anonymous memory placed for transparent huge pages: a mapping that starts
// on a huge-page boundary, so that the kernel can back it with 2 MiB pages.
// Used for weights a decode step streams (MappedFile::CopyToRam) and for
// expert buffers on nodes (expert_node::BlobBufferPool). PopulatePages
// commits memory ahead of its first write (those buffers, KV cache rows).
#ifndef COLIBRI_COMMON_HUGE_PAGES_H_
#define COLIBRI_COMMON_HUGE_PAGES_H_

#include <cstdint>

namespace colibri {

inline constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// `bytes` rounded up to whole pages of anonymous memory starting at a
// multiple of kHugePageBytes; null (errno set) when the system refuses.
// Readable and writable, advised MADV_HUGEPAGE, not yet touched.
uint8_t* MapHugePages(uint64_t bytes);

// The same range as address space only (PROT_NONE, not committed), for a
// file mapping to be put over with MAP_FIXED.
uint8_t* ReserveHugeAligned(uint64_t bytes);

// Either range goes back with munmap(p, bytes).

// Faults in the pages of [at, at + bytes) for writing, keeping what they
// hold (madvise MADV_POPULATE_WRITE, Linux 5.14): one call instead of a page
// fault per page when the range is first written. The range may start and
// end anywhere; the pages that overlap it are committed. False (errno set)
// where the kernel cannot; the memory is then committed as it is written.
bool PopulatePages(void* at, uint64_t bytes);

}  // namespace colibri

#endif  // COLIBRI_COMMON_HUGE_PAGES_H_
