// Reuse of computed KV rows across requests: a cache of the rows finished
// generations computed (prompt and generated tokens), keyed by token prefix,
// so that a request starting with a cached prefix copies its rows instead of
// evaluating it again. The GenerationScheduler owns one, shared by every
// generation (HTTP, gRPC, every numeric path).
//
// The prefix is cut in blocks of block_tokens tokens, the unit of lookup,
// insertion and eviction: a tree whose node at depth d holds block d's
// tokens and the rows of its positions (arch::KvCache::ExportRows' packed
// form), under a root per RowsKind (numeric path and KV type: rows computed
// otherwise are never matched). A node is reachable only through its
// ancestors, so a match is the exact token prefix, never a hash's guess.
//
// Eviction: least recently used block first while the blocks hold more than
// capacity_bytes. Lookup and Insert mark every block of the prefix used,
// deepest first, so a block is always more recent than its descendants and
// the least recent block is a leaf; evicting a block drops its descendants
// too.
//
// A block's rows are immutable once inserted and shared: a Match holds them
// while its caller copies them, evicted or not, and so does the disk tier
// (prefix_disk_store.h) while it writes them.
//
// Thread-safety: thread-safe; Insert calls its export function under the
// cache's lock (it must not call back into the cache).
#ifndef COLIBRI_COORDINATOR_GENERATION_PREFIX_CACHE_H_
#define COLIBRI_COORDINATOR_GENERATION_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "model/arch/kv_cache.h"
#include "model/ops/matmul.h"

namespace colibri::coordinator {

class PrefixCache {
 public:
  struct Options {
    // Tokens per block (>= 1). Default: 16.
    int block_tokens = 16;
    // Most bytes of rows the blocks hold (a block larger than this is never
    // cached); 0 caches nothing. Default: 0.
    int64_t capacity_bytes = 0;
  };

  // What a block's rows were computed with; rows of different kinds differ.
  struct RowsKind {
    ops::NumericPath path = ops::NumericPath::kFast;
    arch::KvType kv_type = arch::KvType::kF32;
  };

  // One block's rows, shared (valid while held, even once evicted).
  using Rows = std::shared_ptr<const std::vector<uint8_t>>;

  // The longest cached prefix found: `tokens` (a multiple of block_tokens)
  // and the rows of each of its blocks, in order.
  struct Match {
    int tokens = 0;
    std::vector<Rows> blocks;
  };

  struct Stats {
    int64_t bytes = 0;           // rows held now
    int64_t blocks = 0;          // blocks held now
    int64_t evicted_blocks = 0;  // since creation
  };

  explicit PrefixCache(const Options& options);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  int block_tokens() const { return options_.block_tokens; }
  int64_t capacity_bytes() const { return options_.capacity_bytes; }

  // The longest prefix of `tokens` of whole blocks, at most max_tokens
  // tokens, cached for `kind`; marks its blocks used.
  Match Lookup(RowsKind kind, absl::Span<const int32_t> tokens, int max_tokens);

  // Fills a new block's rows: the packed rows of positions [from, to),
  // block_bytes bytes, into out.
  using ExportFn = absl::FunctionRef<absl::Status(int from, int to, uint8_t* out)>;
  // Caches the whole blocks of `tokens` not cached yet for `kind` (their
  // rows from export_rows, each block_bytes bytes), marks them all used,
  // then evicts down to capacity. Returns export_rows' first error (the
  // blocks before it stay cached). With `chain`, sets it to the rows of
  // every block of the prefix cached before the eviction (for the disk
  // tier; empty when nothing is cached).
  absl::Status Insert(RowsKind kind, absl::Span<const int32_t> tokens, int64_t block_bytes,
                      ExportFn export_rows, std::vector<Rows>* chain = nullptr);

  Stats stats() const;

 private:
  struct Node {
    Node* parent = nullptr;
    std::vector<int32_t> tokens;  // [block_tokens], empty at a root
    Rows rows;                    // null at a root
    std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
    std::list<Node*>::iterator lru;  // in lru_ (not for roots)
  };

  Node* Root(RowsKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks chain (root side first) used, deepest first.
  void Touch(absl::Span<Node* const> chain) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `node` (not a root) and its descendants.
  void Evict(Node* node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the accounting and LRU entries of node and its descendants.
  void Forget(Node* node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  // Per RowsKind (path, KV type), a root without tokens or rows.
  std::map<std::pair<int, int>, std::unique_ptr<Node>> roots_ ABSL_GUARDED_BY(mu_);
  std::list<Node*> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_PREFIX_CACHE_H_
