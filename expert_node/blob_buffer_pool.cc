#include "expert_node/blob_buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "common/huge_pages.h"

namespace colibri::expert_node {
namespace {

constexpr uint64_t kAlign = 64;

// An anonymous mapping of `bytes` on transparent huge pages, populated; null
// when out of memory.
void* MapHuge(uint64_t bytes) {
  uint8_t* const at = MapHugePages(bytes);
  if (at == nullptr) return nullptr;
  if (!PopulatePages(at, bytes)) {
    // Older kernels: one write per page.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    for (uint64_t i = 0; i < bytes; i += page) at[i] = 0;
  }
  return at;
}

uint8_t* Allocate(uint64_t bytes) {
  void* p = nullptr;
  if (bytes >= BlobBufferPool::kHugePageBytes) {
    p = MapHuge(bytes);
  } else if (bytes >= BlobBufferPool::kMapThreshold) {
    // MAP_POPULATE faults the pages in with one call rather than one fault
    // per page while the loader copies into them.
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1,
             0);
    if (p == MAP_FAILED) p = nullptr;
  } else {
    p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  }
  if (p == nullptr) {
    std::fprintf(stderr, "colibri: out of memory allocating a %llu-byte expert buffer\n",
                 static_cast<unsigned long long>(bytes));
    std::abort();
  }
  return static_cast<uint8_t*>(p);
}

void Release(uint8_t* data, uint64_t bytes) {
  if (bytes >= BlobBufferPool::kMapThreshold) {
    munmap(data, bytes);
  } else {
    std::free(data);
  }
}

}  // namespace

BlobBuffer::BlobBuffer(BlobBuffer&& other) noexcept { *this = std::move(other); }

BlobBuffer& BlobBuffer::operator=(BlobBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

BlobBuffer::~BlobBuffer() { Reset(); }

BlobBuffer BlobBuffer::Unpooled(uint64_t bytes) {
  BlobBuffer buffer;
  buffer.data_ = Allocate(bytes);
  buffer.size_ = bytes;
  return buffer;
}

void BlobBuffer::Reset() {
  if (data_ != nullptr) {
    if (pool_ != nullptr) {
      pool_->Return(data_, size_);
    } else {
      Release(data_, size_);
    }
  }
  pool_.reset();
  data_ = nullptr;
  size_ = 0;
}

std::shared_ptr<BlobBufferPool> BlobBufferPool::Create(const Options& options) {
  return std::shared_ptr<BlobBufferPool>(new BlobBufferPool(options));
}

BlobBufferPool::~BlobBufferPool() {
  absl::MutexLock lock(&mu_);
  for (const Free& f : free_) Release(f.data, f.size);
}

BlobBuffer BlobBufferPool::Take(uint64_t bytes) {
  BlobBuffer buffer;
  buffer.pool_ = shared_from_this();
  buffer.size_ = bytes;
  {
    absl::MutexLock lock(&mu_);
    // Most recent first: its pages are the likeliest to be warm.
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
      if (it->size != bytes) continue;
      buffer.data_ = it->data;
      free_.erase(std::next(it).base());
      --counters_.free_buffers;
      counters_.free_bytes -= bytes;
      ++counters_.reuses;
      return buffer;
    }
    ++counters_.allocations;
  }
  buffer.data_ = Allocate(bytes);
  return buffer;
}

void BlobBufferPool::Return(uint8_t* data, uint64_t size) {
  std::vector<Free> released;
  {
    absl::MutexLock lock(&mu_);
    if (size > options_.max_free_bytes) {
      released.push_back({data, size});
    } else {
      while (counters_.free_bytes + size > options_.max_free_bytes) {
        released.push_back(free_.front());
        counters_.free_bytes -= free_.front().size;
        --counters_.free_buffers;
        free_.pop_front();
      }
      free_.push_back({data, size});
      ++counters_.free_buffers;
      counters_.free_bytes += size;
      counters_.peak_free_bytes = std::max(counters_.peak_free_bytes, counters_.free_bytes);
    }
    counters_.releases += released.size();
  }
  for (const Free& f : released) Release(f.data, f.size);
}

BlobBufferPool::Counters BlobBufferPool::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace colibri::expert_node
