// The prefix cache's disk tier (serve --kv-cache-dir): the blocks of
// PrefixCache written to a directory in the background, so that a restarted
// coordinator (after a crash too) finds the prefixes it computed before.
//
// One file per block, DIR/<16 hex digits>.kvb, in the format of
// prefix_disk_record.h: the block's rows under a header naming the model
// (PrefixModelIdentity), the numeric path, the KV type, the rows layout
// version, the block size and the token ids of the prefix up to the end of
// the block. The name is an XXH64 of all of these, so it holds no user text
// and a block's file is found from the tokens alone. A file is written as
// DIR/<name>.kvb.tmp, fsynced and renamed into place, so a crash leaves whole
// files and temporary ones (removed at the next Open).
//
// Open indexes the directory by reading headers only. A file that is
// damaged (truncated, a header checksum mismatch, a size or name that does
// not match its header) is removed; a file of another model, KV type, rows
// layout or block size is left alone and not used. Either is logged, one
// line naming the file and the reason. Load checks the rest of a file (its
// tokens against the ones asked for, the payload's checksum) before
// returning its rows: a file failing that is logged and removed and is a
// miss. No allocation is sized by a header before the header was checked
// against the file's size and the model's block size.
//
// Writes and evictions run on a writer thread fed by a queue bounded in
// bytes: Enqueue never blocks (the caller is the generation loop) and drops
// what does not fit. The files' bytes are kept within capacity_bytes by
// evicting the least recently used first; Enqueue marks the blocks of its
// prefix used deepest first (file times: ties broken by depth), so a block's
// ancestors outlive it, as in PrefixCache. Files of another model do not
// count.
//
// The directory is locked (DIR/LOCK, flock) while the store is open: a
// second process on it fails to Open.
//
// Thread-safety: thread-safe. `log` gets whole lines from the thread calling
// Open and Load, and from the writer thread (write errors).
#ifndef COLIBRI_COORDINATOR_GENERATION_PREFIX_DISK_STORE_H_
#define COLIBRI_COORDINATOR_GENERATION_PREFIX_DISK_STORE_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "coordinator/generation/prefix_cache.h"
#include "coordinator/generation/prefix_disk_record.h"

namespace colibri::coordinator {

class PrefixDiskStore {
 public:
  struct Options {
    // The directory, created (mode 0700) when absent. Required.
    std::string dir;
    // Most bytes of this model's files kept; -1 means min(4 GiB, half the
    // free space of dir's file system at Open). Default: -1.
    int64_t capacity_bytes = -1;
    // Most bytes of rows waiting to be written; an Enqueue beyond is dropped
    // (one alone is always taken). Default: 256 MiB.
    int64_t queue_bytes = int64_t{256} << 20;
    // PrefixModelIdentity of the model. Required.
    std::string model;
    // The KV type of the rows. Default: kF32.
    arch::KvType kv_type = arch::KvType::kF32;
    // Tokens per block (PrefixCache::block_tokens). Default: 16.
    int block_tokens = 16;
    // Bytes of a block's rows (KvCache::RowsBytes(block_tokens)). Required.
    int64_t block_bytes = 0;
    // Where damaged and foreign files, write errors and the index's summary
    // are logged; borrowed. Default: null (not logged).
    std::ostream* log = nullptr;
  };

  struct Stats {
    int64_t bytes = 0;            // of this model's files now
    int64_t files = 0;            // of this model now
    int64_t pending_bytes = 0;    // rows queued or being written
    int64_t written_blocks = 0;   // since Open
    int64_t loaded_blocks = 0;    // since Open
    int64_t evicted_files = 0;    // since Open
    int64_t rejected_files = 0;   // damaged or foreign, since Open
    int64_t dropped_prefixes = 0; // Enqueues dropped (queue full), since Open
  };

  // Locks and indexes options.dir and starts the writer. InvalidArgument for
  // missing options; Unavailable when the directory cannot be made or read;
  // FailedPrecondition when another process holds it.
  static absl::StatusOr<std::unique_ptr<PrefixDiskStore>> Open(const Options& options);
  // Writes what is queued, then stops the writer and unlocks the directory.
  ~PrefixDiskStore();
  PrefixDiskStore(const PrefixDiskStore&) = delete;
  PrefixDiskStore& operator=(const PrefixDiskStore&) = delete;

  int64_t capacity_bytes() const { return capacity_bytes_; }

  // Queues the prefix `tokens` (whole blocks) of `kind` whose block i has
  // the rows blocks[i] (block_bytes each, immutable): the writer writes the
  // blocks not on disk yet and marks them all used. Rows of another KV type
  // than options' are ignored.
  void Enqueue(PrefixCache::RowsKind kind, std::vector<int32_t> tokens,
               std::vector<PrefixCache::Rows> blocks);

  // The rows of blocks first_block, first_block + 1, ... of `tokens` that
  // are on disk for `kind`, stopping before block end_block, before the
  // first block not on disk, and at the first damaged file (logged and
  // removed). Reads the files on the calling thread.
  std::vector<PrefixCache::Rows> Load(PrefixCache::RowsKind kind, absl::Span<const int32_t> tokens,
                                      int first_block, int end_block);

  // Waits until everything queued so far is written.
  void Flush();

  Stats stats() const;

 private:
  struct Pending {
    PrefixCache::RowsKind kind;
    std::vector<int32_t> tokens;
    std::vector<PrefixCache::Rows> blocks;
    std::vector<uint64_t> keys;  // [blocks] their files' keys
    int64_t bytes = 0;           // counted in pending_bytes
  };
  struct Entry {
    int64_t bytes = 0;
    std::list<uint64_t>::iterator lru;  // in lru_
  };

  PrefixDiskStore(const Options& options, int64_t capacity_bytes, int lock_fd);

  // The header kind of `kind`'s records from this store.
  PrefixRecordKind RecordKind(PrefixCache::RowsKind kind) const;
  // The file names' keys of `kind`'s blocks [0, n_blocks) of tokens.
  std::vector<uint64_t> Keys(PrefixCache::RowsKind kind, absl::Span<const int32_t> tokens,
                             int n_blocks) const;
  std::string FileOf(uint64_t key) const;
  // Indexes the directory (Open); removes temporary files.
  absl::Status Scan();
  // Why the file `name` (size bytes) is not one of this store's; sets
  // *remove for damage (vs a foreign file). "" with *key and *n_tokens for a
  // good one.
  std::string CheckFile(const std::string& name, uint64_t size, bool* remove, uint64_t* key,
                        int* n_tokens) const;
  // Reads block `key`'s file and checks it against `want` (header kind and
  // tokens) and its payload checksum; DataLoss naming the fault, NotFound
  // when the file is gone (evicted meanwhile).
  absl::StatusOr<PrefixCache::Rows> ReadBlock(uint64_t key, const PrefixRecordHeader& want) const;
  // Forgets `key` (the caller removes its file, after unlocking): after
  // damage or eviction.
  void Drop(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Log(const std::string& line) const;

  void WriterLoop();
  // Writes the item's blocks not on disk yet, in order (stopping at a
  // failure), marks them used, evicts down to capacity.
  void Write(const Pending& item);
  // Writes one block's file; false (logged) on failure.
  bool WriteBlock(uint64_t key, const PrefixRecordHeader& header,
                  const std::vector<uint8_t>& rows);
  void EvictToCapacity();

  const Options options_;
  const int64_t capacity_bytes_;
  const int lock_fd_;  // DIR/LOCK, flocked

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> index_ ABSL_GUARDED_BY(mu_);
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // the writer holds an item
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_PREFIX_DISK_STORE_H_
