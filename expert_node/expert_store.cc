#include "expert_node/expert_store.h"

#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "expert_node/event_log.h"
#include "expert_node/recovery_log.h"
#include "xxhash.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/write_batch.h"

namespace colibri::expert_node {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return absl::UnavailableError(message);
  if (s.IsIOError() && absl::StrContains(s.ToString(), "lock")) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

rocksdb::Slice ToSlice(absl::Span<const uint8_t> s) {
  return rocksdb::Slice(reinterpret_cast<const char*>(s.data()), s.size());
}

absl::string_view View(const rocksdb::Slice& s) { return absl::string_view(s.data(), s.size()); }

absl::Span<const uint8_t> ToSpan(const char* p, size_t n) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(p), n);
}

// The parts of a stored value whose size matches its decoded header.
struct StoredPayload {
  absl::Span<const uint8_t> gate, up, down, biases;
};
StoredPayload SplitPayload(absl::string_view value, const ExpertLayout& layout) {
  const char* p = value.data() + layout.header_bytes();
  StoredPayload out;
  out.gate = ToSpan(p, layout.gate.bytes);
  out.up = ToSpan(p + layout.gate.bytes, layout.up.bytes);
  out.down = ToSpan(p + layout.gate.bytes + layout.up.bytes, layout.down.bytes);
  out.biases = ToSpan(p + layout.matrix_bytes(), layout.bias_bytes());
  return out;
}

// An iterator over the keys starting with `prefix` alone. The upper bound
// matters: without it, positioning past the last matching key would load the
// next key's value, which may be an expert in a blob file (a read, and a
// damaged blob would fail a scan that never needed it).
class PrefixScan {
 public:
  PrefixScan(rocksdb::DB* db, absl::string_view prefix)
      : prefix_(prefix), limit_(prefix), limit_slice_() {
    // Every prefix here ends in '/', so bumping the last byte stays ASCII.
    limit_.back() = static_cast<char>(limit_.back() + 1);
    limit_slice_ = rocksdb::Slice(limit_);
    rocksdb::ReadOptions options;
    options.iterate_upper_bound = &limit_slice_;
    it_.reset(db->NewIterator(options));
    it_->Seek(prefix_);
  }
  bool Valid() const { return it_->Valid() && it_->key().starts_with(prefix_); }
  void Next() { it_->Next(); }
  rocksdb::Slice key() const { return it_->key(); }
  rocksdb::Slice value() const { return it_->value(); }
  rocksdb::Status status() const { return it_->status(); }

 private:
  const std::string prefix_;
  std::string limit_;
  rocksdb::Slice limit_slice_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

rocksdb::Options DbOptions(uint64_t min_blob_size, bool direct_reads) {
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.enable_blob_files = true;
  db_options.min_blob_size = min_blob_size;
  db_options.enable_blob_garbage_collection = true;
  // Quantized weights do not compress; do not spend CPU trying.
  db_options.blob_compression_type = rocksdb::kNoCompression;
  db_options.use_direct_reads = direct_reads;
  return db_options;
}

std::string ExtentFolder(const std::string& data_dir) { return data_dir + "/extents"; }

// A stored value read back: `bytes` (header + payload) owned by `pinned` (a
// legacy value) or `record` (an extent record).
struct StoredValue {
  rocksdb::PinnableSlice pinned;
  ExtentFiles::Record record;
  absl::string_view bytes;
};

// Reads the values of `ids`, extent records all in flight together. Per id:
// NotFound when absent; DataLoss when RocksDB's checksums, the pointer, the
// extent file or the record's header checksum say it is damaged (the payload
// is the caller's to verify); other errors pass through. `background`:
// as ExpertStore::Get's.
std::vector<absl::StatusOr<StoredValue>> ReadValues(rocksdb::DB* db, ExtentFiles* extents,
                                                    absl::Span<const ExpertId> ids,
                                                    const ReadControl* background) {
  std::vector<absl::StatusOr<StoredValue>> out;
  out.reserve(ids.size());
  std::vector<ExtentPointer> pointers;
  std::vector<size_t> pointer_of;  // index into `out` of each pointer
  for (const ExpertId& id : ids) {
    StoredValue value;
    const rocksdb::Status s =
        db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), ExpertValueKey(id), &value.pinned);
    if (s.IsNotFound()) {
      out.push_back(absl::NotFoundError(absl::StrCat("node does not hold ", ToString(id))));
      continue;
    }
    if (s.IsCorruption()) {
      // RocksDB's own checksum (blob record, block) caught the damage.
      out.push_back(absl::DataLossError(absl::StrCat(ToString(id), ": ", s.ToString())));
      continue;
    }
    if (!s.ok()) {
      out.push_back(FromRocks(s, absl::StrCat("reading ", ToString(id))));
      continue;
    }
    if (!IsExtentPointer(View(value.pinned))) {
      value.bytes = View(value.pinned);
      out.push_back(std::move(value));
      continue;
    }
    absl::StatusOr<ExtentPointer> pointer = DecodeExtentPointer(View(value.pinned));
    if (!pointer.ok()) {
      out.push_back(absl::DataLossError(absl::StrCat(ToString(id), ": ", pointer.status().message())));
      continue;
    }
    pointers.push_back(*pointer);
    pointer_of.push_back(out.size());
    out.push_back(StoredValue{});
  }
  if (pointers.empty()) return out;
  std::vector<absl::StatusOr<ExtentFiles::Record>> records =
      extents->ReadMany(pointers, background);
  for (size_t i = 0; i < records.size(); ++i) {
    const ExpertId& id = ids[pointer_of[i]];
    absl::StatusOr<StoredValue>& value = out[pointer_of[i]];
    if (!records[i].ok()) {
      value = absl::Status(records[i].status().code(),
                           absl::StrCat(ToString(id), ": ", records[i].status().message()));
      continue;
    }
    const absl::string_view bytes = records[i]->bytes;
    absl::StatusOr<ExpertLayout> layout = DecodeHeader(bytes, id.layer, id.expert);
    if (!layout.ok()) {
      value = absl::DataLossError(absl::StrCat(ToString(id), ": extent record: ",
                                               layout.status().message()));
      continue;
    }
    if (XXH64(bytes.data(), layout->header_bytes(), 0) != pointers[i].header_xxh64) {
      value = absl::DataLossError(
          absl::StrCat(ToString(id), ": extent record's header does not match its pointer"));
      continue;
    }
    value->record = std::move(*records[i]);
    value->bytes = bytes;
  }
  return out;
}

absl::Status DamagedStoreError(const std::string& data_dir, const absl::Status& why) {
  return absl::DataLossError(absl::StrCat(
      "expert store ", data_dir, " is damaged: ", why.message(),
      ". Ways forward: --repair (RocksDB salvages what it can read, then every expert is "
      "verified) or --reset-store (the store is moved aside, never deleted, and the node starts "
      "empty; the coordinator re-sends its experts)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::Open(const Options& options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("expert store: no data dir");
  rocksdb::Options db_options = DbOptions(options.min_blob_size, options.direct_reads);
  // What a recovery drops (a damaged write-ahead log) is said on the node's log.
  db_options.info_log = MakeRecoveryReportingLogger(options.data_dir, db_options);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.data_dir, &raw);
  absl::Status opened = FromRocks(s, absl::StrCat("opening expert store ", options.data_dir));
  if (s.IsCorruption()) return DamagedStoreError(options.data_dir, opened);
  std::unique_ptr<rocksdb::DB> db(raw);
  COLIBRI_RETURN_IF_ERROR(opened);
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<DiskReadQueue> queue,
                           DiskReadQueue::Create(options.read_queue));
  ExtentFiles::Options extent_options;
  extent_options.dir = ExtentFolder(options.data_dir);
  extent_options.direct_reads = options.direct_reads;
  extent_options.sync_writes = options.sync_writes;
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<ExtentFiles> extents,
                           ExtentFiles::Open(extent_options, queue.get()));
  std::unique_ptr<ExpertStore> store(
      new ExpertStore(std::move(db), options, std::move(queue), std::move(extents)));
  absl::Status counted = store->RebuildCounters();
  if (absl::IsDataLoss(counted)) return DamagedStoreError(options.data_dir, counted);
  COLIBRI_RETURN_IF_ERROR(counted);
  return store;
}

absl::Status ExpertStore::Repair(const std::string& data_dir) {
  rocksdb::Options db_options = DbOptions(4096, false);
  db_options.create_if_missing = false;
  const rocksdb::Status s = rocksdb::RepairDB(data_dir, db_options);
  return FromRocks(s, absl::StrCat("repairing expert store ", data_dir));
}

absl::StatusOr<std::string> ExpertStore::ResetStore(const std::string& data_dir) {
  const std::string aside = absl::StrCat(
      data_dir, ".damaged-", absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone()));
  std::error_code ec;
  if (std::filesystem::exists(aside, ec)) {
    return absl::AlreadyExistsError(absl::StrCat("cannot move ", data_dir, " aside: ", aside,
                                                 " exists (try again in a second)"));
  }
  std::filesystem::rename(data_dir, aside, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot move ", data_dir, " to ", aside, ": ", ec.message()));
  }
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", data_dir, ": ", ec.message()));
  }
  // The node keeps its identity (placement, the coordinator's view of it).
  if (std::filesystem::is_regular_file(aside + "/NODE_ID", ec)) {
    std::filesystem::copy_file(aside + "/NODE_ID", data_dir + "/NODE_ID", ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot copy ", aside, "/NODE_ID to ", data_dir, ": ", ec.message()));
    }
  }
  return aside;
}

absl::StatusOr<int64_t> ExpertStore::VerifyAll() {
  std::vector<ExpertId> ids;
  {
    PrefixScan it(db_.get(), IndexKeyPrefix(""));
    for (; it.Valid(); it.Next()) {
      absl::StatusOr<ExpertId> id = ParseExpertKey(View(it.key()));
      if (id.ok()) ids.push_back(std::move(*id));
    }
    COLIBRI_RETURN_IF_ERROR(FromRocks(it.status(), "scanning expert index"));
  }
  int64_t dropped = 0;
  for (const ExpertId& id : ids) {
    absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = Get(id);
    if (absl::IsDataLoss(blob.status())) {
      ++dropped;  // Get dropped and counted it
    } else if (absl::IsNotFound(blob.status())) {
      DropDamaged(id, absl::DataLossError(absl::StrCat(ToString(id), ": value missing")));
      ++dropped;
    } else if (!blob.ok()) {
      return blob.status();
    }
  }
  return dropped;
}

ExpertStore::ExpertStore(std::unique_ptr<rocksdb::DB> db, const Options& options,
                         std::unique_ptr<DiskReadQueue> read_queue,
                         std::unique_ptr<ExtentFiles> extents)
    : data_dir_(options.data_dir),
      sync_writes_(options.sync_writes),
      extent_writes_(options.extent_files),
      buffer_pool_(options.buffer_pool),
      db_(std::move(db)),
      read_queue_(std::move(read_queue)),
      extents_(std::move(extents)) {}

ExpertStore::~ExpertStore() {
  if (db_ != nullptr) db_->Close().PermitUncheckedError();
}

absl::Status ExpertStore::RebuildCounters() {
  absl::MutexLock lock(&write_mu_);
  experts_stored_ = 0;
  payload_bytes_ = 0;
  PrefixScan it(db_.get(), IndexKeyPrefix(""));
  for (; it.Valid(); it.Next()) {
    absl::StatusOr<ExpertId> id = ParseExpertKey(View(it.key()));
    if (!id.ok()) continue;
    absl::StatusOr<ExpertLayout> layout = DecodeHeader(View(it.value()), id->layer, id->expert);
    if (!layout.ok()) continue;
    ++experts_stored_;
    payload_bytes_ += layout->payload_bytes();
  }
  return FromRocks(it.status(), "scanning expert index");
}

absl::Status ExpertStore::PutModel(const std::string& fingerprint, const ModelInfo& info) {
  COLIBRI_RETURN_IF_ERROR(ValidateFingerprint(fingerprint));
  rocksdb::WriteOptions wo;
  wo.sync = sync_writes_;
  return FromRocks(db_->Put(wo, ModelKey(fingerprint), EncodeModelInfo(info)),
                   "writing model record");
}

absl::StatusOr<std::map<std::string, ModelInfo>> ExpertStore::ListModels() const {
  std::map<std::string, ModelInfo> models;
  PrefixScan it(db_.get(), kModelKeyPrefix);
  for (; it.Valid(); it.Next()) {
    absl::StatusOr<ModelInfo> info = DecodeModelInfo(View(it.value()));
    if (!info.ok()) continue;
    models[std::string(View(it.key()).substr(kModelKeyPrefix.size()))] = *info;
  }
  COLIBRI_RETURN_IF_ERROR(FromRocks(it.status(), "scanning model records"));
  return models;
}

absl::Status ExpertStore::Put(const ExpertId& id, const ExpertLayout& layout,
                              absl::Span<const uint8_t> gate, absl::Span<const uint8_t> up,
                              absl::Span<const uint8_t> down, absl::Span<const uint8_t> biases) {
  COLIBRI_RETURN_IF_ERROR(ValidateFingerprint(id.fingerprint));
  if (id.layer < 0 || id.expert < 0 || id.layer > 99999 || id.expert > 99999) {
    return absl::InvalidArgumentError(absl::StrCat(ToString(id), ": index out of range"));
  }
  COLIBRI_RETURN_IF_ERROR(ValidateLayout(layout, ToString(id)));
  if (gate.size() != layout.gate.bytes || up.size() != layout.up.bytes ||
      down.size() != layout.down.bytes || biases.size() != layout.bias_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(ToString(id), ": byte sizes do not match"));
  }
  const std::string header = EncodeHeader(id.layer, id.expert, layout);
  const std::string index_key = ExpertIndexKey(id);
  const std::string value_key = ExpertValueKey(id);

  absl::MutexLock lock(&write_mu_);
  COLIBRI_RETURN_IF_ERROR(CheckLayerLayout(id, layout));
  std::string old_header;
  rocksdb::Status old = db_->Get(rocksdb::ReadOptions(), index_key, &old_header);
  if (old.ok()) {
    COLIBRI_ASSIGN_OR_RETURN(const bool same, SameAsStored(id, header, gate, up, down, biases));
    if (same) return absl::OkStatus();  // already stored: nothing to write
  }
  rocksdb::WriteBatch batch;
  if (extent_writes_) {
    // The record is durable in its file before the pointer to it is written.
    const absl::string_view parts[] = {header, View(ToSlice(gate)), View(ToSlice(up)),
                                       View(ToSlice(down)), View(ToSlice(biases))};
    COLIBRI_ASSIGN_OR_RETURN(const ExtentPointer pointer, extents_->Append(parts));
    COLIBRI_RETURN_IF_ERROR(
        FromRocks(batch.Put(value_key, EncodeExtentPointer(pointer)), "batch"));
  } else {
    const rocksdb::Slice parts[] = {rocksdb::Slice(header), ToSlice(gate), ToSlice(up),
                                    ToSlice(down), ToSlice(biases)};
    const rocksdb::Slice key_slice(value_key);
    COLIBRI_RETURN_IF_ERROR(FromRocks(
        batch.Put(rocksdb::SliceParts(&key_slice, 1), rocksdb::SliceParts(parts, 5)), "batch"));
  }
  COLIBRI_RETURN_IF_ERROR(FromRocks(batch.Put(index_key, header), "batch"));
  rocksdb::WriteOptions wo;
  wo.sync = sync_writes_;
  COLIBRI_RETURN_IF_ERROR(
      FromRocks(db_->Write(wo, &batch), absl::StrCat("storing ", ToString(id))));
  if (old.ok()) {
    absl::StatusOr<ExpertLayout> old_layout = DecodeHeader(old_header, id.layer, id.expert);
    if (old_layout.ok()) {
      --experts_stored_;
      payload_bytes_ -= old_layout->payload_bytes();
    }
  }
  ++experts_stored_;
  payload_bytes_ += layout.payload_bytes();
  for (const auto& [observer_id, observer] : write_observers_) observer(id);
  return absl::OkStatus();
}

int ExpertStore::AddWriteObserver(std::function<void(const ExpertId&)> observer) {
  absl::MutexLock lock(&write_mu_);
  const int id = next_observer_id_++;
  write_observers_.emplace(id, std::move(observer));
  return id;
}

void ExpertStore::RemoveWriteObserver(int id) {
  absl::MutexLock lock(&write_mu_);
  write_observers_.erase(id);
}

absl::StatusOr<std::unique_ptr<ExpertBlob>> ExpertStore::Get(const ExpertId& id,
                                                             const ReadControl* background) {
  return std::move(GetMany(absl::MakeConstSpan(&id, 1), background)[0]);
}

std::vector<absl::StatusOr<std::unique_ptr<ExpertBlob>>> ExpertStore::GetMany(
    absl::Span<const ExpertId> ids, const ReadControl* background) {
  std::vector<absl::StatusOr<StoredValue>> values =
      ReadValues(db_.get(), extents_.get(), ids, background);
  std::vector<absl::StatusOr<std::unique_ptr<ExpertBlob>>> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (values[i].ok()) {
      out.push_back(VerifiedBlob(ids[i], values[i]->bytes));
      continue;
    }
    if (absl::IsDataLoss(values[i].status())) DropDamaged(ids[i], values[i].status());
    out.push_back(values[i].status());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ExpertBlob>> ExpertStore::VerifiedBlob(const ExpertId& id,
                                                                      absl::string_view bytes) {
  absl::StatusOr<ExpertLayout> layout = DecodeHeader(bytes, id.layer, id.expert);
  if (!layout.ok()) {
    DropDamaged(id, layout.status());
    return absl::DataLossError(absl::StrCat(ToString(id), ": ", layout.status().message()));
  }
  const uint64_t expected = layout->header_bytes() + layout->payload_bytes();
  if (bytes.size() != expected) {
    absl::Status bad = absl::DataLossError(absl::StrCat(
        ToString(id), ": stored value has ", bytes.size(), " bytes, header says ", expected));
    DropDamaged(id, bad);
    return bad;
  }
  const StoredPayload stored = SplitPayload(bytes, *layout);
  if (PayloadChecksum(stored.gate, stored.up, stored.down, stored.biases) != layout->xxh64) {
    absl::Status bad = absl::DataLossError(absl::StrCat(ToString(id), ": checksum mismatch"));
    DropDamaged(id, bad);
    return bad;
  }
  return ExpertBlob::Copy(*layout, stored.gate, stored.up, stored.down, buffer_pool_.get(),
                          stored.biases);
}

absl::Status ExpertStore::CheckLayerLayout(const ExpertId& id, const ExpertLayout& layout) {
  // All experts of a layer are slices of the same GGUF tensors: one type and
  // one shape per matrix. The first expert stored in a layer fixes them.
  const std::string prefix =
      absl::StrCat(IndexKeyPrefix(id.fingerprint), absl::StrFormat("%05d/", id.layer));
  for (PrefixScan it(db_.get(), prefix); it.Valid(); it.Next()) {
    absl::StatusOr<ExpertId> other = ParseExpertKey(View(it.key()));
    if (!other.ok() || other->expert == id.expert) continue;
    absl::StatusOr<ExpertLayout> known =
        DecodeHeader(View(it.value()), other->layer, other->expert);
    if (!known.ok()) continue;
    const TensorLayout* mine[3] = {&layout.gate, &layout.up, &layout.down};
    const TensorLayout* theirs[3] = {&known->gate, &known->up, &known->down};
    const char* names[3] = {"gate", "up", "down"};
    for (int m = 0; m < 3; ++m) {
      if (mine[m]->type != theirs[m]->type || mine[m]->rows != theirs[m]->rows ||
          mine[m]->cols != theirs[m]->cols) {
        return absl::FailedPreconditionError(absl::StrCat(
            ToString(id), ": ", names[m], " is type ", static_cast<int>(mine[m]->type), " [",
            mine[m]->rows, " x ", mine[m]->cols, "], the layer's stored experts are type ",
            static_cast<int>(theirs[m]->type), " [", theirs[m]->rows, " x ", theirs[m]->cols, "]"));
      }
    }
    if (layout.gate_bias != known->gate_bias || layout.up_bias != known->up_bias ||
        layout.down_bias != known->down_bias || layout.activation != known->activation ||
        layout.alpha != known->alpha || layout.limit != known->limit) {
      return absl::FailedPreconditionError(absl::StrCat(
          ToString(id), ": biases or activation differ from the layer's stored experts'"));
    }
    return absl::OkStatus();  // one sibling is enough: they were checked alike
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ExpertStore::SameAsStored(const ExpertId& id, absl::string_view header,
                                               absl::Span<const uint8_t> gate,
                                               absl::Span<const uint8_t> up,
                                               absl::Span<const uint8_t> down,
                                               absl::Span<const uint8_t> biases) {
  absl::StatusOr<StoredValue> value =
      std::move(ReadValues(db_.get(), extents_.get(), absl::MakeConstSpan(&id, 1), nullptr)[0]);
  absl::Status damage;
  if (absl::IsDataLoss(value.status()) || absl::IsNotFound(value.status())) {
    damage = value.status();
  } else if (!value.ok()) {
    return value.status();
  } else {
    const absl::string_view stored = value->bytes;
    absl::StatusOr<ExpertLayout> layout = DecodeHeader(stored, id.layer, id.expert);
    if (!layout.ok()) {
      damage = layout.status();
    } else if (stored.size() != layout->header_bytes() + layout->payload_bytes()) {
      damage = absl::DataLossError(absl::StrCat(ToString(id), ": stored value has the wrong size"));
    } else {
      const StoredPayload s = SplitPayload(stored, *layout);
      if (PayloadChecksum(s.gate, s.up, s.down, s.biases) != layout->xxh64) {
        damage = absl::DataLossError(absl::StrCat(ToString(id), ": checksum mismatch"));
      } else {
        const bool same = stored.substr(0, layout->header_bytes()) == header &&
                          s.gate == gate && s.up == up && s.down == down && s.biases == biases;
        if (same) return true;
        return absl::AlreadyExistsError(
            absl::StrCat(ToString(id), " is already stored with other bytes (stored xxh64 ",
                         absl::StrFormat("%016x", layout->xxh64),
                         "); a stored expert is immutable: the offered one is refused"));
      }
    }
  }
  // The stored copy is damaged (and so never served): the new one replaces it.
  checksum_failures_.fetch_add(1);
  LogEvent(absl::StrCat("corrupt expert replaced: ", damage.message()));
  return false;
}

void ExpertStore::DropDamaged(const ExpertId& id, const absl::Status& why) {
  checksum_failures_.fetch_add(1);
  LogEvent(absl::StrCat("corrupt expert dropped: ", why.message()));
  absl::Status s = Delete(id);
  if (!s.ok()) LogEvent(absl::StrCat("could not drop ", ToString(id), ": ", s.message()));
}

absl::StatusOr<bool> ExpertStore::Contains(const ExpertId& id) const {
  std::string header;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ExpertIndexKey(id), &header);
  if (s.IsNotFound()) return false;
  COLIBRI_RETURN_IF_ERROR(FromRocks(s, absl::StrCat("looking up ", ToString(id))));
  return true;
}

absl::StatusOr<uint64_t> ExpertStore::RamBytes(const ExpertId& id) const {
  std::string header;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ExpertIndexKey(id), &header);
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat("node does not hold ", ToString(id)));
  COLIBRI_RETURN_IF_ERROR(FromRocks(s, absl::StrCat("looking up ", ToString(id))));
  COLIBRI_ASSIGN_OR_RETURN(const ExpertLayout layout, DecodeHeader(header, id.layer, id.expert));
  return ExpertBlob::SizeFor(layout);
}

absl::Status ExpertStore::PutUsageRecords(
    const std::vector<std::pair<ExpertId, std::string>>& records) {
  rocksdb::WriteBatch batch;
  for (const auto& [id, value] : records) {
    COLIBRI_RETURN_IF_ERROR(FromRocks(batch.Put(UsageKey(id), value), "batch"));
  }
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "writing usage counts");
}

absl::StatusOr<std::vector<std::pair<ExpertId, std::string>>> ExpertStore::ListUsageRecords()
    const {
  std::vector<std::pair<ExpertId, std::string>> out;
  PrefixScan it(db_.get(), kUsageKeyPrefix);
  for (; it.Valid(); it.Next()) {
    absl::StatusOr<ExpertId> id = ParseExpertKey(View(it.key()));
    if (!id.ok()) continue;
    out.emplace_back(std::move(*id), std::string(View(it.value())));
  }
  COLIBRI_RETURN_IF_ERROR(FromRocks(it.status(), "scanning usage counts"));
  return out;
}

absl::Status ExpertStore::Delete(const ExpertId& id) {
  const std::string index_key = ExpertIndexKey(id);
  absl::MutexLock lock(&write_mu_);
  std::string old_header;
  rocksdb::Status old = db_->Get(rocksdb::ReadOptions(), index_key, &old_header);
  rocksdb::WriteBatch batch;
  COLIBRI_RETURN_IF_ERROR(FromRocks(batch.Delete(ExpertValueKey(id)), "batch"));
  COLIBRI_RETURN_IF_ERROR(FromRocks(batch.Delete(index_key), "batch"));
  rocksdb::WriteOptions wo;
  wo.sync = sync_writes_;
  COLIBRI_RETURN_IF_ERROR(
      FromRocks(db_->Write(wo, &batch), absl::StrCat("deleting ", ToString(id))));
  if (old.ok()) {
    absl::StatusOr<ExpertLayout> old_layout = DecodeHeader(old_header, id.layer, id.expert);
    if (old_layout.ok()) {
      --experts_stored_;
      payload_bytes_ -= old_layout->payload_bytes();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, ExpertStore::Inventory>> ExpertStore::List(
    const std::string& fingerprint) const {
  std::map<std::string, Inventory> out;
  PrefixScan it(db_.get(), IndexKeyPrefix(fingerprint));
  for (; it.Valid(); it.Next()) {
    absl::StatusOr<ExpertId> id = ParseExpertKey(View(it.key()));
    if (!id.ok()) continue;
    out[id->fingerprint][id->layer].push_back(id->expert);
  }
  COLIBRI_RETURN_IF_ERROR(FromRocks(it.status(), "scanning expert index"));
  return out;
}

absl::StatusOr<std::map<std::string, ExpertStore::HashedInventory>> ExpertStore::ListHashed(
    const std::string& fingerprint) const {
  std::map<std::string, HashedInventory> out;
  PrefixScan it(db_.get(), IndexKeyPrefix(fingerprint));
  for (; it.Valid(); it.Next()) {
    absl::StatusOr<ExpertId> id = ParseExpertKey(View(it.key()));
    if (!id.ok()) continue;
    absl::StatusOr<ExpertLayout> layout = DecodeHeader(View(it.value()), id->layer, id->expert);
    if (!layout.ok()) continue;
    out[id->fingerprint][id->layer].push_back(HashedExpert{id->expert, layout->xxh64});
  }
  COLIBRI_RETURN_IF_ERROR(FromRocks(it.status(), "scanning expert index"));
  return out;
}

uint64_t ExpertStore::experts_stored() const {
  absl::MutexLock lock(&write_mu_);
  return experts_stored_;
}

uint64_t ExpertStore::payload_bytes_stored() const {
  absl::MutexLock lock(&write_mu_);
  return payload_bytes_;
}

absl::Status ExpertStore::PutRawValueForTesting(const ExpertId& id, const std::string& value) {
  rocksdb::WriteOptions wo;
  wo.sync = sync_writes_;
  return FromRocks(db_->Put(wo, ExpertValueKey(id), value), "raw put");
}

}  // namespace colibri::expert_node
