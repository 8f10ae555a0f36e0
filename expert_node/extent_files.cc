#include "expert_node/extent_files.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "xxhash.h"

namespace colibri::expert_node {
namespace {

constexpr uint32_t kPointerVersion = 1;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLE(absl::string_view bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(bytes[at + i])} << (8 * i);
  return v;
}

uint64_t RoundUp(uint64_t n) {
  return (n + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}

absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

// Writes all of `bytes` at `offset`.
absl::Status WriteAll(int fd, const std::string& path, const char* bytes, uint64_t n,
                      uint64_t offset) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, bytes, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoError("writing", path, w < 0 ? errno : EIO);
    bytes += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

absl::Status SyncFolder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("opening folder", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoError("syncing folder", dir, err);
}

}  // namespace

std::string EncodeExtentPointer(const ExtentPointer& pointer) {
  std::string out;
  out.reserve(kExtentPointerBytes);
  PutU32(&out, kExtentPointerMagic);
  PutU32(&out, kPointerVersion);
  PutU32(&out, pointer.file);
  PutU32(&out, 0);
  PutU64(&out, pointer.offset);
  PutU64(&out, pointer.length);
  PutU64(&out, pointer.header_xxh64);
  return out;
}

bool IsExtentPointer(absl::string_view value) {
  return value.size() == kExtentPointerBytes && GetLE(value, 0, 4) == kExtentPointerMagic;
}

absl::StatusOr<ExtentPointer> DecodeExtentPointer(absl::string_view value) {
  if (!IsExtentPointer(value)) {
    return absl::DataLossError(absl::StrCat("extent pointer: ", value.size(),
                                            " bytes without the pointer magic"));
  }
  if (GetLE(value, 4, 4) != kPointerVersion) {
    return absl::DataLossError(
        absl::StrCat("extent pointer: version ", GetLE(value, 4, 4), " is not ", kPointerVersion));
  }
  if (GetLE(value, 12, 4) != 0) return absl::DataLossError("extent pointer: reserved bits set");
  ExtentPointer p;
  p.file = static_cast<uint32_t>(GetLE(value, 8, 4));
  p.offset = GetLE(value, 16, 8);
  p.length = GetLE(value, 24, 8);
  p.header_xxh64 = GetLE(value, 32, 8);
  if (p.offset % kDirectIoAlignment != 0) {
    return absl::DataLossError(absl::StrCat("extent pointer: offset ", p.offset, " of file ",
                                            p.file, " is not a multiple of ", kDirectIoAlignment));
  }
  if (p.length == 0 || p.length > kMaxExtentRecordBytes) {
    return absl::DataLossError(absl::StrCat("extent pointer: length ", p.length, " of file ",
                                            p.file, " is not in [1, ", kMaxExtentRecordBytes,
                                            "]"));
  }
  if (p.offset > (uint64_t{1} << 50)) {
    return absl::DataLossError(
        absl::StrCat("extent pointer: offset ", p.offset, " of file ", p.file, " is absurd"));
  }
  return p;
}

ExtentFiles::ExtentFiles(const Options& options, DiskReadQueue* queue)
    : dir_(options.dir),
      options_(options),
      queue_(queue),
      buffers_(BlobBufferPool::Create({options.max_free_buffer_bytes})) {}

ExtentFiles::~ExtentFiles() {
  {
    absl::MutexLock lock(&write_mu_);
    if (write_fd_ >= 0) ::close(write_fd_);
  }
  absl::MutexLock lock(&read_mu_);
  for (auto& [file, f] : read_files_) ::close(f.fd);
}

absl::StatusOr<std::unique_ptr<ExtentFiles>> ExtentFiles::Open(const Options& options,
                                                               DiskReadQueue* queue) {
  if (options.dir.empty()) return absl::InvalidArgumentError("extent files: no folder");
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("creating ", options.dir, ": ", ec.message()));
  }
  std::unique_ptr<ExtentFiles> files(new ExtentFiles(options, queue));
  {
    absl::MutexLock lock(&files->read_mu_);
    files->direct_ = options.direct_reads;
  }
  // Appending resumes in the newest file (its unreferenced tail after a crash
  // is skipped: OpenForAppend starts at its aligned end).
  uint32_t newest = 0;
  for (const auto& entry : std::filesystem::directory_iterator(options.dir, ec)) {
    const std::string name = entry.path().filename().string();
    uint32_t number = 0;
    if (name.size() == 10 && absl::EndsWith(name, ".ext") &&
        absl::SimpleAtoi(name.substr(0, 6), &number)) {
      newest = std::max(newest, number);
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", options.dir, ": ", ec.message()));
  absl::MutexLock lock(&files->write_mu_);
  COLIBRI_RETURN_IF_ERROR(files->OpenForAppend(newest));
  return files;
}

std::string ExtentFiles::PathOf(uint32_t file) const {
  return absl::StrFormat("%s/%06u.ext", dir_, file);
}

absl::Status ExtentFiles::OpenForAppend(uint32_t file) {
  const std::string path = PathOf(file);
  const bool existed = std::filesystem::exists(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("opening", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("examining", path, err);
  }
  if (!existed && options_.sync_writes) {
    // The new file's folder entry must be durable before a record in it is.
    absl::Status synced = SyncFolder(dir_);
    if (!synced.ok()) {
      ::close(fd);
      return synced;
    }
  }
  if (write_fd_ >= 0) ::close(write_fd_);
  write_fd_ = fd;
  write_file_ = file;
  write_end_ = RoundUp(static_cast<uint64_t>(st.st_size));
  return absl::OkStatus();
}

absl::StatusOr<ExtentPointer> ExtentFiles::Append(absl::Span<const absl::string_view> parts) {
  uint64_t length = 0;
  for (absl::string_view p : parts) length += p.size();
  if (length == 0 || length > kMaxExtentRecordBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("extent record of ", length, " bytes is not in [1, ", kMaxExtentRecordBytes,
                     "]"));
  }
  absl::MutexLock lock(&write_mu_);
  if (write_end_ > 0 && write_end_ + length > options_.max_file_bytes) {
    COLIBRI_RETURN_IF_ERROR(OpenForAppend(write_file_ + 1));
  }
  // One write of the record and its padding: the file's size stays aligned.
  std::string record;
  record.reserve(RoundUp(length));
  for (absl::string_view p : parts) record.append(p.data(), p.size());
  record.resize(RoundUp(length), '\0');
  const std::string path = PathOf(write_file_);
  COLIBRI_RETURN_IF_ERROR(WriteAll(write_fd_, path, record.data(), record.size(), write_end_));
  if (options_.sync_writes && ::fdatasync(write_fd_) != 0) {
    return ErrnoError("syncing", path, errno);
  }
  ExtentPointer pointer;
  pointer.file = write_file_;
  pointer.offset = write_end_;
  pointer.length = length;
  pointer.header_xxh64 = XXH64(parts[0].data(), parts[0].size(), 0);
  write_end_ += record.size();
  {
    absl::MutexLock read_lock(&read_mu_);
    auto it = read_files_.find(write_file_);
    if (it != read_files_.end()) it->second.size = std::max(it->second.size, write_end_);
  }
  return pointer;
}

absl::StatusOr<ExtentFiles::ReadFile> ExtentFiles::ReadFileOf(uint32_t file) {
  absl::MutexLock lock(&read_mu_);
  auto it = read_files_.find(file);
  if (it != read_files_.end()) return it->second;
  const std::string path = PathOf(file);
  int fd = -1;
  int err = 0;
  if (direct_) {
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    err = fd < 0 ? errno : 0;
    if (fd < 0 && err == EINVAL) direct_ = false;  // the file system refuses O_DIRECT
  }
  if (!direct_) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    err = fd < 0 ? errno : 0;
  }
  if (fd < 0 && err == ENOENT) {
    return absl::DataLossError(absl::StrCat("extent file ", path, " is missing"));
  }
  if (fd < 0) return ErrnoError("opening", path, err);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("examining", path, err);
  }
  ReadFile f{fd, static_cast<uint64_t>(st.st_size)};
  read_files_.emplace(file, f);
  return f;
}

std::vector<absl::StatusOr<ExtentFiles::Record>> ExtentFiles::ReadMany(
    absl::Span<const ExtentPointer> pointers, const ReadControl* background) {
  std::vector<absl::StatusOr<Record>> out;
  out.reserve(pointers.size());
  std::vector<DiskReadQueue::Request> requests;
  std::vector<size_t> request_of;  // index into `out` of each request
  for (const ExtentPointer& p : pointers) {
    absl::StatusOr<ReadFile> f = ReadFileOf(p.file);
    if (!f.ok()) {
      out.push_back(f.status());
      continue;
    }
    if (p.offset > f->size || p.length > f->size - p.offset) {
      out.push_back(absl::DataLossError(
          absl::StrCat("extent record at ", p.offset, " (", p.length, " bytes) lies beyond the end of ",
                       PathOf(p.file), " (", f->size, " bytes)")));
      continue;
    }
    const uint64_t span = RoundUp(p.length);
    Record record;
    // Small buffers would come from aligned_alloc at 64 bytes; mapped ones are
    // page aligned, as O_DIRECT needs.
    record.buffer = buffers_->Take(std::max(span, BlobBufferPool::kMapThreshold));
    DiskReadQueue::Request r;
    r.fd = f->fd;
    r.offset = p.offset;
    r.length = span;
    r.dest = record.buffer.data();
    r.background = background;
    requests.push_back(r);
    request_of.push_back(out.size());
    record.bytes = absl::string_view(reinterpret_cast<const char*>(record.buffer.data()), p.length);
    out.push_back(std::move(record));
  }
  std::vector<absl::StatusOr<uint64_t>> done = queue_->ReadMany(requests);
  for (size_t i = 0; i < done.size(); ++i) {
    const ExtentPointer& p = pointers[request_of[i]];
    if (!done[i].ok()) {
      out[request_of[i]] = absl::Status(done[i].status().code(),
                                        absl::StrCat(PathOf(p.file), ": ", done[i].status().message()));
    } else if (*done[i] < p.length) {
      out[request_of[i]] = absl::DataLossError(
          absl::StrCat("extent record at ", p.offset, " of ", PathOf(p.file), ": read ", *done[i],
                       " of its ", p.length, " bytes (the file ends)"));
    }
  }
  return out;
}

bool ExtentFiles::direct() const {
  absl::MutexLock lock(&read_mu_);
  return direct_;
}

}  // namespace colibri::expert_node
