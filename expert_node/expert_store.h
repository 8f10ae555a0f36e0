// The expert node's disk tier: experts stored durably, indexed by RocksDB.
//
// Layout of the database: see expert_record.h (keys, value header). An
// expert's value (header + payload) is stored in one of two ways, and both
// are read, so stores written before extent files open and serve unchanged:
//   extent   (Options::extent_files) the value is a record in an extent file
//            (extent_files.h) and the value key holds an ExtentPointer to it,
//            so that a read is one aligned read of exactly the expert's bytes
//            (O_DIRECT with Options::direct_reads), many in flight at once
//            through the store's DiskReadQueue (io_uring when available).
//   legacy   the value key holds the value itself; values larger than
//            Options::min_blob_size go to RocksDB blob files.
// Either way the LSM tree holds only keys and small entries; inventory scans
// read those alone.
//
// Durability: Put and PutModel return OK only after the write is in the synced
// WAL (WriteOptions::sync), and an extent record is synced to its file before
// the pointer to it is written, so an acknowledged expert survives a crash
// (kill -9 or power loss) at any point.
// Integrity: Get verifies the payload checksum (and, for an extent record,
// the pointer's header checksum and that the record lies inside its file). A
// value that fails (or whose header or pointer is damaged) is deleted, counted
// in checksum_failures(), and reported as DataLoss; from then on the expert is
// missing (Inventory omits it) until it is ingested again.
//
// Thread-safety: all methods may be called concurrently.
#ifndef COLIBRI_EXPERT_NODE_EXPERT_STORE_H_
#define COLIBRI_EXPERT_NODE_EXPERT_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "expert_node/disk_read_queue.h"
#include "expert_node/expert_record.h"
#include "expert_node/extent_files.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace colibri::expert_node {

class ExpertStore {
 public:
  struct Options {
    // Folder of the RocksDB database; created when missing. Required.
    std::string data_dir;
    // Values at least this large go to blob files. Default: 4096.
    uint64_t min_blob_size = 4096;
    // Sync the WAL before acknowledging writes. Default: true. (Tests of
    // speed may turn it off; durability then ends at the OS page cache.)
    bool sync_writes = true;
    // Read extent files with O_DIRECT and SST and blob files with RocksDB's
    // use_direct_reads, bypassing the OS page cache, so every RAM-tier miss
    // really reads the device (honest cold-cache measurements) and no copy
    // goes through the page cache. RocksDB's own block cache still holds
    // index blocks. Cost: see README.md. Default: false.
    bool direct_reads = false;
    // Store new experts' values in extent files; false: in RocksDB (legacy
    // layout). Both layouts are read either way. Default: true.
    bool extent_files = true;
    // How extent records are read: engine (io_uring when available, else
    // pread threads) and depth. Default: DiskReadQueue::Options' defaults.
    DiskReadQueue::Options read_queue;
    // Where Get takes its blobs' buffers (and where they go back when the
    // blobs are destroyed), so that evict-and-load churn reuses buffers
    // instead of allocating. Default: null (each blob allocates its own).
    std::shared_ptr<BlobBufferPool> buffer_pool;
  };

  // Experts of one model held durably, by layer (ascending), experts ascending.
  using Inventory = std::map<int32_t, std::vector<int32_t>>;

  // Opens (or creates) the database. DataLoss when it is damaged (a bad SST,
  // MANIFEST, CURRENT, WAL...): the message names what RocksDB found and the
  // ways forward (Repair, ResetStore); Unavailable when another process holds
  // it; Internal for other I/O errors.
  static absl::StatusOr<std::unique_ptr<ExpertStore>> Open(const Options& options);

  // Ways forward for a damaged store (the node's --repair / --reset-store).
  // Repair runs RocksDB's RepairDB on data_dir (salvaging every readable
  // record; what it cannot read is lost); open it afterwards and call
  // VerifyAll so that no index entry outlives its value.
  static absl::Status Repair(const std::string& data_dir);
  // Moves data_dir aside to "<data_dir>.damaged-<UTC time>" (never deletes
  // anything) and recreates data_dir empty, keeping its NODE_ID file so the
  // node keeps its identity. Returns where the old store went.
  static absl::StatusOr<std::string> ResetStore(const std::string& data_dir);

  // Reads and verifies every stored expert (a full read of the store); drops
  // (and counts in checksum_failures) the damaged ones and index entries
  // whose value is missing. Returns how many were dropped.
  absl::StatusOr<int64_t> VerifyAll();
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  // Stores the model record of `fingerprint` (replacing any previous one).
  absl::Status PutModel(const std::string& fingerprint, const ModelInfo& info);
  // Every model record: fingerprint -> info. Malformed records are skipped.
  absl::StatusOr<std::map<std::string, ModelInfo>> ListModels() const;

  // Stores an expert durably. `layout` must be valid (ValidateLayout) with the
  // spans' sizes (biases: the payload's bias part, layout.bias_bytes() bytes,
  // empty for an expert without biases) and layout.xxh64 set to
  // PayloadChecksum(gate, up, down, biases); InvalidArgument otherwise. Stored experts are
  // immutable: storing the same bytes again is OK and writes nothing; other bytes for a stored
  // expert are AlreadyExists (the stored ones stay), unless the stored copy is damaged (counted in
  // checksum_failures and replaced). Every expert of a layer must have the types and shapes of the
  // layer's experts already stored (FailedPrecondition otherwise).
  absl::Status Put(const ExpertId& id, const ExpertLayout& layout, absl::Span<const uint8_t> gate,
                   absl::Span<const uint8_t> up, absl::Span<const uint8_t> down,
                   absl::Span<const uint8_t> biases = {});

  // Reads and verifies an expert into an owned aligned buffer (from
  // Options::buffer_pool when set). NotFound when absent; DataLoss (after
  // deleting it) when damaged. `background` (non-null): the extent read is a
  // background read it steers (disk_read_queue.h), Cancelled when cancelled
  // before it started; null: a demand read.
  absl::StatusOr<std::unique_ptr<ExpertBlob>> Get(const ExpertId& id,
                                                  const ReadControl* background = nullptr);
  // Get of every id, their extent reads in flight together; one result per
  // id, in order.
  std::vector<absl::StatusOr<std::unique_ptr<ExpertBlob>>> GetMany(
      absl::Span<const ExpertId> ids, const ReadControl* background = nullptr);

  // True when the expert has an index entry (no value read).
  absl::StatusOr<bool> Contains(const ExpertId& id) const;
  // The bytes Get's blob would hold in RAM (ExpertBlob::SizeFor), from the
  // index entry alone. NotFound when absent; DataLoss when the entry is damaged.
  absl::StatusOr<uint64_t> RamBytes(const ExpertId& id) const;
  absl::Status Delete(const ExpertId& id);

  // Index entries of `fingerprint`, or of every model when empty: fp -> layers.
  absl::StatusOr<std::map<std::string, Inventory>> List(const std::string& fingerprint) const;

  // One stored expert and its content hash: the XXH64 (seed 0) of its
  // gate|up|down bytes, from its index entry (no value read).
  struct HashedExpert {
    int32_t expert = 0;
    uint64_t xxh64 = 0;
  };
  // By layer (ascending), experts ascending.
  using HashedInventory = std::map<int32_t, std::vector<HashedExpert>>;
  // Like List, with each expert's content hash; index entries whose header
  // does not decode are left out (the expert counts as missing).
  absl::StatusOr<std::map<std::string, HashedInventory>> ListHashed(
      const std::string& fingerprint) const;

  // Usage records (usage_counts.h encodes the values): written in one batch
  // without syncing the WAL (advisory data: a crash may lose the last batch).
  absl::Status PutUsageRecords(const std::vector<std::pair<ExpertId, std::string>>& records);
  // Every usage record; records under malformed keys are skipped.
  absl::StatusOr<std::vector<std::pair<ExpertId, std::string>>> ListUsageRecords() const;

  uint64_t experts_stored() const;
  uint64_t payload_bytes_stored() const;

  // Calls `observer` with the expert after every Put that wrote one, on the
  // writer's thread, until RemoveWriteObserver(the returned id) returns. An
  // observer must be quick and must not call the store (it runs under the
  // store's writer lock): the RAM warm-up uses one to learn what to load.
  int AddWriteObserver(std::function<void(const ExpertId&)> observer);
  void RemoveWriteObserver(int id);
  uint64_t checksum_failures() const { return checksum_failures_.load(); }
  const std::string& data_dir() const { return data_dir_; }
  // Options::buffer_pool (may be null).
  BlobBufferPool* buffer_pool() const { return buffer_pool_.get(); }
  // The engine reading extent records (io_uring or threads).
  DiskReadQueue::Engine read_engine() const { return read_queue_->engine(); }
  // Whether extent reads bypass the page cache (direct_reads, and the file
  // system accepts O_DIRECT).
  bool direct_extent_reads() const { return extents_->direct(); }

  // Writes `value` under the raw key of `id`'s value (a legacy value or an
  // encoded ExtentPointer), bypassing every check: for tests that simulate
  // damaged disks.
  absl::Status PutRawValueForTesting(const ExpertId& id, const std::string& value);

 private:
  ExpertStore(std::unique_ptr<rocksdb::DB> db, const Options& options,
              std::unique_ptr<DiskReadQueue> read_queue, std::unique_ptr<ExtentFiles> extents);
  absl::Status RebuildCounters();
  // FailedPrecondition when another stored expert of id's layer has another
  // type or shape than `layout`.
  absl::Status CheckLayerLayout(const ExpertId& id, const ExpertLayout& layout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Whether id's stored value is exactly `header` + the payload: true; false
  // when the stored value is damaged (counted; the caller replaces it);
  // AlreadyExists when it is intact and different.
  absl::StatusOr<bool> SameAsStored(const ExpertId& id, absl::string_view header,
                                    absl::Span<const uint8_t> gate, absl::Span<const uint8_t> up,
                                    absl::Span<const uint8_t> down,
                                    absl::Span<const uint8_t> biases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Deletes both keys of a damaged expert and counts it.
  void DropDamaged(const ExpertId& id, const absl::Status& why);
  // The checked blob of id's stored value `bytes` (header + payload);
  // DataLoss (after dropping the expert) when they fail a check.
  absl::StatusOr<std::unique_ptr<ExpertBlob>> VerifiedBlob(const ExpertId& id,
                                                          absl::string_view bytes);

  const std::string data_dir_;
  const bool sync_writes_;
  const bool extent_writes_;
  const std::shared_ptr<BlobBufferPool> buffer_pool_;
  std::unique_ptr<rocksdb::DB> db_;
  // Declared after db_ and in this order: extents_ borrows read_queue_.
  std::unique_ptr<DiskReadQueue> read_queue_;
  std::unique_ptr<ExtentFiles> extents_;

  // Serialises writers so the counters below follow the index exactly.
  mutable absl::Mutex write_mu_;
  uint64_t experts_stored_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint64_t payload_bytes_ ABSL_GUARDED_BY(write_mu_) = 0;
  std::map<int, std::function<void(const ExpertId&)>> write_observers_ ABSL_GUARDED_BY(write_mu_);
  int next_observer_id_ ABSL_GUARDED_BY(write_mu_) = 0;
  std::atomic<uint64_t> checksum_failures_{0};
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_EXPERT_STORE_H_
