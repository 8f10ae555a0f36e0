#include "coordinator/generation/prefix_disk_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cache_dir.h"
#include "coordinator/api/model_summary.h"

namespace colibri::coordinator {
namespace {

constexpr char kSuffix[] = ".kvb";
constexpr char kTmpSuffix[] = ".kvb.tmp";
constexpr size_t kKeyDigits = 16;
constexpr int64_t kDefaultMaxCapacity = int64_t{4} << 30;

// An open file descriptor, closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now; false (errno set) when close fails.
  bool Close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

// Reads exactly n bytes at offset; false on an error or a short file.
bool ReadAt(int fd, uint64_t offset, void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

bool WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

// True for "<16 lowercase hex digits>.kvb", with the digits' value in *key.
bool ParseName(const std::string& name, uint64_t* key) {
  if (name.size() != kKeyDigits + sizeof(kSuffix) - 1 || !absl::EndsWith(name, kSuffix)) {
    return false;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < kKeyDigits; ++i) {
    const char c = name[i];
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
    v = (v << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  *key = v;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefixDiskStore>> PrefixDiskStore::Open(const Options& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("--kv-cache-dir: no directory");
  if (options.model.empty() || options.model.size() > kMaxModelIdentity ||
      options.block_tokens < 1 || options.block_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-dir ", options.dir, ": no model identity or block size"));
  }
  if (!MakeCacheDirs(options.dir)) {
    return absl::UnavailableError(
        absl::StrCat("--kv-cache-dir ", options.dir, ": cannot create the directory"));
  }
  const std::string lock_path = options.dir + "/LOCK";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("--kv-cache-dir: cannot open ", lock_path, ": ", std::strerror(errno)));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "--kv-cache-dir ", options.dir, " is in use by another serve (", lock_path,
        " is locked: ", std::strerror(err), ")"));
  }
  int64_t capacity = options.capacity_bytes;
  if (capacity < 0) {
    struct statvfs fs;
    const int64_t free_bytes =
        ::statvfs(options.dir.c_str(), &fs) == 0
            ? static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize)
            : 0;
    capacity = std::min(kDefaultMaxCapacity, free_bytes / 2);
  }
  std::unique_ptr<PrefixDiskStore> store(new PrefixDiskStore(options, capacity, lock_fd));
  if (absl::Status scanned = store->Scan(); !scanned.ok()) return scanned;
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  return store;
}

PrefixDiskStore::PrefixDiskStore(const Options& options, int64_t capacity_bytes, int lock_fd)
    : options_(options), capacity_bytes_(capacity_bytes), lock_fd_(lock_fd) {}

PrefixDiskStore::~PrefixDiskStore() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  if (writer_.joinable()) writer_.join();
  ::close(lock_fd_);  // releases the flock
}

PrefixRecordKind PrefixDiskStore::RecordKind(PrefixCache::RowsKind kind) const {
  PrefixRecordKind k;
  k.model = options_.model;
  k.path = static_cast<int>(kind.path);
  k.kv_type = static_cast<int>(kind.kv_type);
  k.rows_layout_version = arch::KvCache::kRowsLayoutVersion;
  k.block_tokens = options_.block_tokens;
  return k;
}

std::vector<uint64_t> PrefixDiskStore::Keys(PrefixCache::RowsKind kind,
                                            absl::Span<const int32_t> tokens, int n_blocks) const {
  const PrefixRecordKind k = RecordKind(kind);
  const uint32_t fields[] = {static_cast<uint32_t>(k.model.size()), static_cast<uint32_t>(k.path),
                             static_cast<uint32_t>(k.kv_type),
                             static_cast<uint32_t>(k.rows_layout_version),
                             static_cast<uint32_t>(k.block_tokens)};
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  XXH64_update(state, fields, sizeof(fields));
  XXH64_update(state, k.model.data(), k.model.size());
  std::vector<uint64_t> keys(n_blocks);
  const size_t b = static_cast<size_t>(options_.block_tokens);
  for (int i = 0; i < n_blocks; ++i) {
    XXH64_update(state, tokens.data() + i * b, b * sizeof(int32_t));
    keys[i] = XXH64_digest(state);
  }
  XXH64_freeState(state);
  return keys;
}

std::string PrefixDiskStore::FileOf(uint64_t key) const {
  return absl::StrFormat("%s/%016x%s", options_.dir, key, kSuffix);
}

void PrefixDiskStore::Log(const std::string& line) const {
  if (options_.log != nullptr) *options_.log << (line + "\n") << std::flush;
}

std::string PrefixDiskStore::CheckFile(const std::string& name, uint64_t size, bool* remove,
                                       uint64_t* key, int* n_tokens) const {
  *remove = true;
  Fd fd(::open((options_.dir + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    *remove = false;
    return absl::StrCat("cannot open: ", std::strerror(errno));
  }
  std::string header(kPrefixRecordFixedBytes, '\0');
  if (!ReadAt(fd.get(), 0, header.data(), std::min<uint64_t>(size, header.size()))) {
    return "cannot read its header";
  }
  const absl::StatusOr<uint32_t> n = PrefixRecordTokenCount(header, size);
  if (!n.ok()) {
    *remove = absl::IsDataLoss(n.status());
    return std::string(n.status().message());
  }
  header.resize(PrefixRecordHeaderBytes(*n));  // bounded by the file's size
  if (!ReadAt(fd.get(), 0, header.data(), header.size())) return "cannot read its header";
  const absl::StatusOr<PrefixRecordHeader> h = DecodePrefixRecordHeader(header);
  if (!h.ok()) return std::string(h.status().message());
  const PrefixCache::RowsKind kind{static_cast<ops::NumericPath>(h->kind.path), options_.kv_type};
  const std::string foreign = PrefixRecordKindMismatch(h->kind, RecordKind(kind));
  if (!foreign.empty()) {
    *remove = false;
    return foreign;
  }
  const int b = options_.block_tokens;
  if (h->kind.path != static_cast<int>(ops::NumericPath::kExact) &&
      h->kind.path != static_cast<int>(ops::NumericPath::kFast)) {
    return absl::StrCat("numeric path ", h->kind.path, " is not one");
  }
  if (h->tokens.empty() || h->tokens.size() % b != 0) {
    return absl::StrCat(h->tokens.size(), " tokens are not whole blocks of ", b);
  }
  if (h->payload_bytes != static_cast<uint64_t>(options_.block_bytes)) {
    return absl::StrCat(h->payload_bytes, " bytes of rows, a block of this model has ",
                        options_.block_bytes);
  }
  *key = Keys(kind, h->tokens, static_cast<int>(h->tokens.size()) / b).back();
  if (FileOf(*key) != options_.dir + "/" + name) {
    return "its name does not match its header (another prefix's file, or a wrong token count)";
  }
  *n_tokens = static_cast<int>(h->tokens.size());
  return "";
}

absl::Status PrefixDiskStore::Scan() {
  DIR* dir = ::opendir(options_.dir.c_str());
  if (dir == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("--kv-cache-dir ", options_.dir, ": ", std::strerror(errno)));
  }
  struct Found {
    int64_t mtime_ns;
    int n_tokens;
    uint64_t key;
    int64_t bytes;
  };
  std::vector<Found> found;
  int64_t rejected = 0;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    const std::string path = options_.dir + "/" + name;
    if (absl::EndsWith(name, kTmpSuffix)) {  // a write a crash cut short
      ::unlink(path.c_str());
      continue;
    }
    uint64_t key = 0;
    struct stat st;
    if (!ParseName(name, &key) || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    bool remove = false;
    int n_tokens = 0;
    const std::string why = CheckFile(name, static_cast<uint64_t>(st.st_size), &remove, &key,
                                      &n_tokens);
    if (!why.empty()) {
      ++rejected;
      Log(absl::StrCat("serve: --kv-cache-dir: ", path, ": ", why,
                       remove ? "; removed" : "; not used"));
      if (remove) ::unlink(path.c_str());
      continue;
    }
    found.push_back({static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                     n_tokens, key, static_cast<int64_t>(st.st_size)});
  }
  ::closedir(dir);
  // Oldest first; of one time (the clock's grain), the deepest block first.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::make_tuple(a.mtime_ns, -a.n_tokens, a.key) <
           std::make_tuple(b.mtime_ns, -b.n_tokens, b.key);
  });
  {
    absl::MutexLock lock(&mu_);
    for (const Found& f : found) {
      lru_.push_front(f.key);
      index_[f.key] = Entry{f.bytes, lru_.begin()};
      stats_.bytes += f.bytes;
      ++stats_.files;
    }
    stats_.rejected_files = rejected;
  }
  EvictToCapacity();
  const Stats s = stats();
  Log(absl::StrCat("serve: --kv-cache-dir ", options_.dir, ": ", s.files, " blocks of this model (",
                   FormatBytes(static_cast<uint64_t>(s.bytes)), "), up to ",
                   FormatBytes(static_cast<uint64_t>(capacity_bytes_)), " kept (--kv-cache-disk)"));
  return absl::OkStatus();
}

void PrefixDiskStore::Drop(uint64_t key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  lru_.erase(it->second.lru);
  stats_.bytes -= it->second.bytes;
  --stats_.files;
  index_.erase(it);
}

void PrefixDiskStore::Enqueue(PrefixCache::RowsKind kind, std::vector<int32_t> tokens,
                              std::vector<PrefixCache::Rows> blocks) {
  const int n = static_cast<int>(blocks.size());
  if (kind.kv_type != options_.kv_type || n == 0 ||
      tokens.size() < static_cast<size_t>(n) * options_.block_tokens) {
    return;
  }
  tokens.resize(static_cast<size_t>(n) * options_.block_tokens);
  Pending item;
  item.kind = kind;
  item.keys = Keys(kind, tokens, n);
  item.tokens = std::move(tokens);
  item.blocks = std::move(blocks);
  absl::MutexLock lock(&mu_);
  for (uint64_t key : item.keys) {
    if (!index_.contains(key)) item.bytes += options_.block_bytes;
  }
  if ((!queue_.empty() || writing_) &&
      stats_.pending_bytes + item.bytes > options_.queue_bytes) {
    ++stats_.dropped_prefixes;
    return;
  }
  stats_.pending_bytes += item.bytes;
  queue_.push_back(std::move(item));
}

std::vector<PrefixCache::Rows> PrefixDiskStore::Load(PrefixCache::RowsKind kind,
                                                     absl::Span<const int32_t> tokens,
                                                     int first_block, int end_block) {
  std::vector<PrefixCache::Rows> rows;
  const int b = options_.block_tokens;
  end_block = std::min(end_block, static_cast<int>(tokens.size()) / b);
  if (kind.kv_type != options_.kv_type || first_block < 0 || first_block >= end_block) return rows;
  const std::vector<uint64_t> keys = Keys(kind, tokens, end_block);
  PrefixRecordHeader want;
  want.kind = RecordKind(kind);
  want.payload_bytes = static_cast<uint64_t>(options_.block_bytes);
  for (int i = first_block; i < end_block; ++i) {
    {
      absl::MutexLock lock(&mu_);
      if (!index_.contains(keys[i])) break;
    }
    want.tokens.assign(tokens.begin(), tokens.begin() + (i + 1) * b);
    absl::StatusOr<PrefixCache::Rows> block = ReadBlock(keys[i], want);
    if (!block.ok()) {
      const bool damaged = !absl::IsNotFound(block.status());  // else evicted meanwhile
      if (damaged) {
        Log(absl::StrCat("serve: --kv-cache-dir: ", FileOf(keys[i]), ": ",
                         block.status().message(), "; removed"));
      }
      {
        absl::MutexLock lock(&mu_);
        Drop(keys[i]);
        if (damaged) ++stats_.rejected_files;
      }
      if (damaged) ::unlink(FileOf(keys[i]).c_str());
      break;
    }
    rows.push_back(*std::move(block));
  }
  absl::MutexLock lock(&mu_);
  stats_.loaded_blocks += static_cast<int64_t>(rows.size());
  return rows;
}

absl::StatusOr<PrefixCache::Rows> PrefixDiskStore::ReadBlock(uint64_t key,
                                                             const PrefixRecordHeader& want) const {
  const std::string path = FileOf(key);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(path);
    return absl::DataLossError(absl::StrCat("cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  const uint64_t expected = PrefixRecordBytes(want.tokens.size(), want.payload_bytes);
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != expected) {
    return absl::DataLossError(absl::StrCat(st.st_size, " bytes, a block of ", want.tokens.size(),
                                            " tokens takes ", expected, " (truncated?)"));
  }
  // Every size below is the caller's (the model's), checked against the file.
  std::string header(PrefixRecordHeaderBytes(want.tokens.size()), '\0');
  if (!ReadAt(fd.get(), 0, header.data(), header.size())) {
    return absl::DataLossError("cannot read its header");
  }
  absl::StatusOr<PrefixRecordHeader> got = DecodePrefixRecordHeader(header);
  if (!got.ok()) return got.status();
  const std::string mismatch = PrefixRecordKindMismatch(got->kind, want.kind);
  if (!mismatch.empty()) return absl::DataLossError(mismatch);
  if (got->kind.path != want.kind.path || got->tokens != want.tokens ||
      got->payload_bytes != want.payload_bytes) {
    return absl::DataLossError("its header is not the prefix's (numeric path or tokens differ)");
  }
  auto rows = std::make_shared<std::vector<uint8_t>>(want.payload_bytes);
  uint64_t sum = 0;
  if (!ReadAt(fd.get(), header.size(), rows->data(), rows->size()) ||
      !ReadAt(fd.get(), header.size() + rows->size(), &sum, sizeof(sum))) {
    return absl::DataLossError("cannot read its rows");
  }
  if (PrefixPayloadChecksum(*rows) != sum) return absl::DataLossError("rows checksum mismatch");
  return PrefixCache::Rows(std::move(rows));
}

void PrefixDiskStore::Flush() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !writing_; };
  mu_.Await(absl::Condition(&idle));
}

PrefixDiskStore::Stats PrefixDiskStore::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void PrefixDiskStore::WriterLoop() {
  for (;;) {
    Pending item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return closing_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // closing, everything written
      item = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    Write(item);
    absl::MutexLock lock(&mu_);
    writing_ = false;
    stats_.pending_bytes -= item.bytes;
  }
}

void PrefixDiskStore::Write(const Pending& item) {
  const int b = options_.block_tokens;
  PrefixRecordHeader header;
  header.kind = RecordKind(item.kind);
  header.payload_bytes = static_cast<uint64_t>(options_.block_bytes);
  const int n = static_cast<int>(item.keys.size());
  int written = 0;
  for (; written < n; ++written) {
    const uint64_t key = item.keys[written];
    {
      absl::MutexLock lock(&mu_);
      if (index_.contains(key)) continue;
    }
    // A block without its file: the ones after it could not be found from
    // the first token either.
    if (item.blocks[written]->size() != header.payload_bytes) break;
    header.tokens.assign(item.tokens.begin(), item.tokens.begin() + (written + 1) * b);
    if (!WriteBlock(key, header, *item.blocks[written])) break;
    absl::MutexLock lock(&mu_);
    const auto bytes = static_cast<int64_t>(PrefixRecordBytes(header.tokens.size(),
                                                              header.payload_bytes));
    lru_.push_front(key);
    index_[key] = Entry{bytes, lru_.begin()};
    stats_.bytes += bytes;
    ++stats_.files;
    ++stats_.written_blocks;
  }
  // Used, deepest first: each block more recent than its descendants.
  const timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  for (int i = written - 1; i >= 0; --i) {
    {
      absl::MutexLock lock(&mu_);
      auto it = index_.find(item.keys[i]);
      if (it == index_.end()) continue;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
    }
    ::utimensat(AT_FDCWD, FileOf(item.keys[i]).c_str(), now, 0);
  }
  // The renames survive a power cut too.
  Fd dir(::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());
  EvictToCapacity();
}

bool PrefixDiskStore::WriteBlock(uint64_t key, const PrefixRecordHeader& header,
                                 const std::vector<uint8_t>& rows) {
  const std::string path = FileOf(key);
  const std::string tmp = path + ".tmp";
  const std::string head = EncodePrefixRecordHeader(header);
  const uint64_t sum = PrefixPayloadChecksum(rows);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  const bool ok = fd.get() >= 0 && WriteAll(fd.get(), head.data(), head.size()) &&
                  WriteAll(fd.get(), rows.data(), rows.size()) &&
                  WriteAll(fd.get(), &sum, sizeof(sum)) && ::fsync(fd.get()) == 0 && fd.Close() &&
                  ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    Log(absl::StrCat("serve: --kv-cache-dir: cannot write ", tmp, ": ", std::strerror(errno)));
    ::unlink(tmp.c_str());
  }
  return ok;
}

void PrefixDiskStore::EvictToCapacity() {
  std::vector<uint64_t> victims;
  {
    absl::MutexLock lock(&mu_);
    while (stats_.bytes > capacity_bytes_ && !lru_.empty()) {
      victims.push_back(lru_.back());
      Drop(lru_.back());
      ++stats_.evicted_files;
    }
  }
  for (uint64_t key : victims) ::unlink(FileOf(key).c_str());
}

}  // namespace colibri::coordinator
