// Recycled buffers for expert blobs.
//
// Decode on a node whose RAM tier holds a fraction of its experts evicts and
// loads experts constantly, all of one size per model. Allocating each load's
// buffer from malloc makes glibc keep the freed megabytes in its heaps and
// arenas (its mmap threshold grows to the expert size after the first free),
// so the process's resident memory grows far beyond the RAM tier's budget;
// mapping each buffer fresh instead costs a page fault per page on every load.
// The pool does neither: a freed buffer goes to a small free list and the next
// Take of the same size gets it back, pages already resident. Buffers of at
// least kMapThreshold bytes are their own anonymous mappings, so a buffer the
// free list has no room for really returns to the system (munmap).
//
// Bound: the free list holds at most Options::max_free_bytes (free_bytes()
// never exceeds it, at any instant). A returned buffer that does not fit
// pushes out the oldest free buffers, or is released itself when larger than
// the bound. Memory the pool keeps is thus: buffers in use (owned by blobs,
// which the RAM tier counts) + at most max_free_bytes.
//
// Thread-safety: all methods may be called concurrently. A BlobBuffer keeps
// its pool alive (shared ownership) and may be destroyed on any thread.
#ifndef COLIBRI_EXPERT_NODE_BLOB_BUFFER_POOL_H_
#define COLIBRI_EXPERT_NODE_BLOB_BUFFER_POOL_H_

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "common/huge_pages.h"

namespace colibri::expert_node {

class BlobBufferPool;

// One 64-byte aligned (page aligned when mapped) buffer of size() bytes; its
// contents are unspecified when taken (a reused buffer holds old bytes).
// Returned to its pool, or freed when it has none, on destruction. Movable.
class BlobBuffer {
 public:
  BlobBuffer() = default;
  BlobBuffer(BlobBuffer&& other) noexcept;
  BlobBuffer& operator=(BlobBuffer&& other) noexcept;
  BlobBuffer(const BlobBuffer&) = delete;
  BlobBuffer& operator=(const BlobBuffer&) = delete;
  ~BlobBuffer();

  // A buffer of `bytes` bytes owned by nobody's pool (freed on destruction).
  static BlobBuffer Unpooled(uint64_t bytes);

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  friend class BlobBufferPool;
  void Reset();

  std::shared_ptr<BlobBufferPool> pool_;  // null: unpooled
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

class BlobBufferPool : public std::enable_shared_from_this<BlobBufferPool> {
 public:
  struct Options {
    // Bytes of freed buffers kept for reuse. Steady-state decode needs about
    // one expert per concurrent load (I/O threads + compute threads) to
    // allocate nothing; 0 disables reuse. Default: 32 MiB.
    uint64_t max_free_bytes = uint64_t{32} << 20;
  };

  // Cumulative since construction, except free_buffers / free_bytes (now)
  // and peak_free_bytes (maximum so far, <= max_free_bytes).
  struct Counters {
    uint64_t allocations = 0;  // Takes that allocated a new buffer
    uint64_t reuses = 0;       // Takes served from the free list
    uint64_t releases = 0;     // buffers given back to the system
    uint64_t free_buffers = 0;
    uint64_t free_bytes = 0;
    uint64_t peak_free_bytes = 0;
  };

  // Buffers at least this large are anonymous mappings; smaller ones come
  // from aligned_alloc.
  static constexpr uint64_t kMapThreshold = uint64_t{256} << 10;
  // Buffers at least this large start on a huge-page boundary and are advised
  // into transparent huge pages (a Qwen3-30B-A3B Q4_K expert, ~3 MB, then
  // takes one huge page and 4 KiB pages for the rest), for fewer TLB misses
  // when compute streams them, as with the coordinator's weights
  // (MappedFile::CopyToRam). On one node of the 8-layer Qwen3-30B-A3B shape
  // the node's compute time moved within the noise (medians 0.89 against
  // 0.90 s per 129 tokens, 5 interleaved runs).
  static constexpr uint64_t kHugePageBytes = colibri::kHugePageBytes;

  static std::shared_ptr<BlobBufferPool> Create(const Options& options);
  ~BlobBufferPool();
  BlobBufferPool(const BlobBufferPool&) = delete;
  BlobBufferPool& operator=(const BlobBufferPool&) = delete;

  // A buffer of exactly `bytes` bytes (> 0): a free one of that size if any,
  // else a new allocation. Aborts when the system is out of memory, as
  // operator new would.
  BlobBuffer Take(uint64_t bytes);

  uint64_t max_free_bytes() const { return options_.max_free_bytes; }
  Counters counters() const;

 private:
  friend class BlobBuffer;
  struct Free {
    uint8_t* data;
    uint64_t size;
  };
  explicit BlobBufferPool(const Options& options) : options_(options) {}
  // Takes back a buffer of this pool (BlobBuffer's destructor).
  void Return(uint8_t* data, uint64_t size);

  const Options options_;

  mutable absl::Mutex mu_;
  std::deque<Free> free_ ABSL_GUARDED_BY(mu_);  // back: most recently returned
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_BLOB_BUFFER_POOL_H_
