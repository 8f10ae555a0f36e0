#include "coordinator/generation/prefix_cache.h"

#include <algorithm>

namespace colibri::coordinator {

PrefixCache::PrefixCache(const Options& options) : options_(options) {}

PrefixCache::Node* PrefixCache::Root(RowsKind kind) {
  std::unique_ptr<Node>& root =
      roots_[{static_cast<int>(kind.path), static_cast<int>(kind.kv_type)}];
  if (root == nullptr) root = std::make_unique<Node>();
  return root.get();
}

void PrefixCache::Touch(absl::Span<Node* const> chain) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    lru_.splice(lru_.begin(), lru_, (*it)->lru);
  }
}

PrefixCache::Match PrefixCache::Lookup(RowsKind kind, absl::Span<const int32_t> tokens,
                                       int max_tokens) {
  Match match;
  const int b = options_.block_tokens;
  const int n_blocks = std::min(static_cast<int>(tokens.size()), max_tokens) / b;
  absl::MutexLock lock(&mu_);
  std::vector<Node*> chain;
  Node* node = Root(kind);
  std::vector<int32_t> key;
  for (int i = 0; i < n_blocks; ++i) {
    key.assign(tokens.begin() + i * b, tokens.begin() + (i + 1) * b);
    auto child = node->children.find(key);
    if (child == node->children.end()) break;
    node = child->second.get();
    chain.push_back(node);
    match.blocks.push_back(node->rows);
  }
  Touch(chain);
  match.tokens = static_cast<int>(chain.size()) * b;
  return match;
}

absl::Status PrefixCache::Insert(RowsKind kind, absl::Span<const int32_t> tokens,
                                 int64_t block_bytes, ExportFn export_rows,
                                 std::vector<Rows>* chain_rows) {
  if (chain_rows != nullptr) chain_rows->clear();
  if (options_.capacity_bytes <= 0 || block_bytes > options_.capacity_bytes) {
    return absl::OkStatus();
  }
  const int b = options_.block_tokens;
  const int n_blocks = static_cast<int>(tokens.size()) / b;
  absl::MutexLock lock(&mu_);
  std::vector<Node*> chain;
  Node* node = Root(kind);
  absl::Status status;
  for (int i = 0; i < n_blocks; ++i) {
    std::vector<int32_t> key(tokens.begin() + i * b, tokens.begin() + (i + 1) * b);
    std::unique_ptr<Node>& child = node->children[key];
    if (child == nullptr) {
      auto rows = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(block_bytes));
      status = export_rows(i * b, (i + 1) * b, rows->data());
      if (!status.ok()) {
        node->children.erase(key);
        break;
      }
      child = std::make_unique<Node>();
      child->parent = node;
      child->tokens = std::move(key);
      child->rows = std::move(rows);
      child->lru = lru_.insert(lru_.begin(), child.get());
      stats_.bytes += block_bytes;
      ++stats_.blocks;
    }
    node = child.get();
    chain.push_back(node);
  }
  Touch(chain);
  if (chain_rows != nullptr) {
    for (Node* n : chain) chain_rows->push_back(n->rows);
  }
  while (stats_.bytes > options_.capacity_bytes && !lru_.empty()) Evict(lru_.back());
  return status;
}

void PrefixCache::Forget(Node* node) {
  for (auto& [key, child] : node->children) Forget(child.get());
  lru_.erase(node->lru);
  stats_.bytes -= static_cast<int64_t>(node->rows->size());
  --stats_.blocks;
  ++stats_.evicted_blocks;
}

void PrefixCache::Evict(Node* node) {
  Forget(node);
  const std::vector<int32_t> key = node->tokens;  // erase destroys node and its descendants
  node->parent->children.erase(key);
}

PrefixCache::Stats PrefixCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace colibri::coordinator
