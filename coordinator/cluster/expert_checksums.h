// The content hashes of a model's routed experts (ExpertChecksum), kept in a
// file between coordinator starts.
//
// At start-up the coordinator checks every expert a node already holds
// against the model's bytes by their hash (cluster_setup.h). Hashing reads
// every routed expert of the GGUF: all of a large model, from disk, at every
// start (on the 8-layer Qwen3-30B-A3B shape, 2.7 GB, about a third of a
// start's CPU time), although the coordinator otherwise keeps only the dense
// part. With this cache a start hashes only what the previous ones did not.
//
// The file, DIR/experts-FINGERPRINT.xxh64, belongs to one model file: it
// records the fingerprint and each GGUF split's size, modification time,
// inode and device, and is ignored (every hash computed again, then the file
// rewritten) when any of them differs. A file that is missing, truncated or
// damaged (it ends with an XXH64 of its contents) is ignored the same way, so
// the cache can only save work, never change a verdict. It is written to a
// temporary file and renamed into place.
//
// Thread-safety: Get from any number of threads (EnsureExperts works on the
// nodes in parallel); Save from one.
#ifndef COLIBRI_COORDINATOR_CLUSTER_EXPERT_CHECKSUMS_H_
#define COLIBRI_COORDINATOR_CLUSTER_EXPERT_CHECKSUMS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "model/arch/model.h"

namespace colibri::coordinator {

class ExpertChecksums {
 public:
  // Reads dir's file for `model` (borrowed; must outlive this) when it
  // matches the model file. dir: the coordinator's cache directory
  // (ClusterCommandOptions::cache_dir); empty: no file, every hash is computed.
  ExpertChecksums(std::string dir, const arch::Model* model, std::string fingerprint);

  // ExpertChecksum of the model's expert (layer, expert): from the file when
  // it has it, else computed and remembered. Requires a valid index.
  uint64_t Get(int layer, int expert);

  // Writes the file when hashes were computed since it was read. An error
  // names the path; nothing depends on the file, so callers log it and go on.
  absl::Status Save();

  // This object's path ("" without a directory), and how many Get calls the
  // file answered / hashing answered.
  const std::string& path() const { return path_; }
  int64_t hits() const;
  int64_t computed() const;

 private:
  // The model file's identity as recorded in the file.
  std::string Identity() const;
  // Reads path_ into hashes_ when it is whole and its identity is identity_.
  void Load();

  const std::string dir_;
  const arch::Model* const model_;
  const std::string fingerprint_;
  const std::string path_;
  const std::string identity_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<int, int>, uint64_t> hashes_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t computed_ ABSL_GUARDED_BY(mu_) = 0;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_EXPERT_CHECKSUMS_H_
