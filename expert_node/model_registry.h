// The models a node holds experts of, by fingerprint, with their shapes: an
// in-memory copy of the store's model records (expert_record.h, "m/" keys),
// read once at start and written through on every change.
//
// A request naming a model the node does not hold fails here (NotFound); the
// shapes bound what ingest, import, prefetch hints and ComputeLayer accept.
//
// Thread-safety: every method is thread-safe. Find and the range checks read
// memory only; Register may write one small store record (never while
// holding the lock the readers take).
#ifndef COLIBRI_EXPERT_NODE_MODEL_REGISTRY_H_
#define COLIBRI_EXPERT_NODE_MODEL_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "expert_node/expert_record.h"
#include "expert_node/expert_store.h"

namespace colibri::expert_node {

class ModelRegistry {
 public:
  // Reads the model records of `store` (borrowed; must outlive the
  // registry). Store errors pass through.
  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Load(ExpertStore* store);
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // The model's record; NotFound (the fingerprint escaped) when the node
  // holds none.
  absl::StatusOr<ModelInfo> Find(const std::string& fingerprint) const;

  // True when the node holds a model of this fingerprint and (layer, expert)
  // is inside its shape as far as the shape is known.
  bool Covers(const ExpertId& id) const;

  // Records (or completes) a model's shape durably. Zero fields of `shape`
  // mean unknown and never overwrite a known value. InvalidArgument when it
  // contradicts the known shape; store errors pass through.
  absl::Status Register(const std::string& fingerprint, const ModelInfo& shape);

  // ComputeLayer's request cap: the largest over the registered models of
  // max_batch_tokens hidden rows of n_embd floats, each token routed to at
  // most every expert once, prefetch hints for at most every expert of the
  // model, plus 64 KiB; 64 KiB while no model is registered.
  uint64_t ComputeRequestLimit(int64_t max_batch_tokens) const;

 private:
  explicit ModelRegistry(ExpertStore* store) : store_(store) {}

  ExpertStore* const store_;
  // Serialises record writes (held across one small store write, never by a
  // reader).
  absl::Mutex write_mu_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, ModelInfo> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_MODEL_REGISTRY_H_
