#include "coordinator/cluster/expert_checksums.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/cache_dir.h"
#include "common/mapped_file.h"
#include "coordinator/cluster/cluster_setup.h"

namespace colibri::coordinator {
namespace {

// File layout, little-endian (the machines Colibri runs on):
//   "CLXXH64\1" | u32 identity bytes | identity | u32 n |
//   n x (u32 layer, u32 expert, u64 hash) | u64 XXH64 (seed 0) of all before.
constexpr char kMagic[8] = {'C', 'L', 'X', 'X', 'H', '6', '4', '\1'};
constexpr size_t kEntryBytes = 16;
// More entries than any model has experts: a count beyond is damage.
constexpr uint32_t kMaxEntries = 1u << 24;

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Reads a T at *pos of data (advancing it); false when it does not fit.
template <typename T>
bool Take(absl::string_view data, size_t* pos, T* v) {
  if (data.size() - *pos < sizeof(T)) return false;
  std::memcpy(v, data.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

}  // namespace

ExpertChecksums::ExpertChecksums(std::string dir, const arch::Model* model, std::string fingerprint)
    : dir_(std::move(dir)),
      model_(model),
      fingerprint_(std::move(fingerprint)),
      path_(dir_.empty() ? "" : absl::StrCat(dir_, "/experts-", fingerprint_, ".xxh64")),
      identity_(Identity()) {
  Load();
}

std::string ExpertChecksums::Identity() const {
  std::string id = fingerprint_;
  for (int i = 0; const MappedFile* m = model_->file().mapping(i); ++i) {
    struct stat st;
    if (::stat(m->path().c_str(), &st) != 0) return "";  // no identity: never matches
    absl::StrAppend(&id, "|", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ":",
                    st.st_ino, ":", st.st_dev);
  }
  return id;
}

void ExpertChecksums::Load() {
  if (path_.empty() || identity_.empty()) return;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < sizeof(kMagic) + sizeof(uint64_t) ||
      std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return;
  }
  const size_t body = data.size() - sizeof(uint64_t);
  uint64_t sum = 0;
  std::memcpy(&sum, data.data() + body, sizeof(sum));
  if (XXH64(data.data(), body, 0) != sum) return;
  const absl::string_view content(data.data(), body);
  size_t pos = sizeof(kMagic);
  uint32_t id_bytes = 0;
  if (!Take(content, &pos, &id_bytes) || content.size() - pos < id_bytes) return;
  if (content.compare(pos, id_bytes, identity_) != 0 || id_bytes != identity_.size()) return;
  pos += id_bytes;
  uint32_t n = 0;
  if (!Take(content, &pos, &n) || n > kMaxEntries || content.size() - pos != n * kEntryBytes) {
    return;
  }
  const auto& experts = model_->experts();
  absl::flat_hash_map<std::pair<int, int>, uint64_t> hashes;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t layer = 0, expert = 0;
    uint64_t hash = 0;
    Take(content, &pos, &layer);
    Take(content, &pos, &expert);
    Take(content, &pos, &hash);
    if (layer >= experts.size() || expert >= experts[layer].size()) return;
    hashes[{static_cast<int>(layer), static_cast<int>(expert)}] = hash;
  }
  absl::MutexLock lock(&mu_);
  hashes_ = std::move(hashes);
}

uint64_t ExpertChecksums::Get(int layer, int expert) {
  {
    absl::MutexLock lock(&mu_);
    auto it = hashes_.find({layer, expert});
    if (it != hashes_.end()) {
      ++hits_;
      return it->second;
    }
  }
  const uint64_t hash = ExpertChecksum(model_->experts()[layer][expert]);
  absl::MutexLock lock(&mu_);
  hashes_[{layer, expert}] = hash;
  ++computed_;
  dirty_ = true;
  return hash;
}

absl::Status ExpertChecksums::Save() {
  std::string out(kMagic, sizeof(kMagic));
  {
    absl::MutexLock lock(&mu_);
    if (!dirty_ || path_.empty() || identity_.empty()) return absl::OkStatus();
    Append(&out, static_cast<uint32_t>(identity_.size()));
    out += identity_;
    Append(&out, static_cast<uint32_t>(hashes_.size()));
    for (const auto& [key, hash] : hashes_) {
      Append(&out, static_cast<uint32_t>(key.first));
      Append(&out, static_cast<uint32_t>(key.second));
      Append(&out, hash);
    }
    dirty_ = false;
  }
  Append(&out, static_cast<uint64_t>(XXH64(out.data(), out.size(), 0)));

  if (!MakeCacheDirs(dir_)) {
    return absl::UnavailableError(absl::StrCat("cannot create the directory ", dir_));
  }
  return WriteCacheFile(path_, out);
}

int64_t ExpertChecksums::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

int64_t ExpertChecksums::computed() const {
  absl::MutexLock lock(&mu_);
  return computed_;
}

}  // namespace colibri::coordinator
