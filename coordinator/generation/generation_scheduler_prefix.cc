// GenerationScheduler's prefix reuse: cached KV rows of earlier requests
// imported into a new generation's slot (from RAM, then from the disk tier),
// and a finished generation's rows offered to the cache.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/generation_scheduler_state.h"

namespace colibri::coordinator {

absl::Status GenerationScheduler::OpenPrefixDisk(const Engine& engine) {
  if (!engine.reuse || options_.prefix_cache_disk_bytes == 0) {
    if (options_.log != nullptr) {
      *options_.log << "serve: --kv-cache-dir " << options_.prefix_cache_dir << " unused: "
                    << (engine.reuse ? "--kv-cache-disk is 0" : "prefix reuse is off")
                    << std::endl;
    }
    return absl::OkStatus();
  }
  PrefixDiskStore::Options disk;
  disk.dir = options_.prefix_cache_dir;
  disk.capacity_bytes = options_.prefix_cache_disk_bytes;
  COLIBRI_ASSIGN_OR_RETURN(disk.model, PrefixModelIdentity(model_.file()));
  disk.kv_type = options_.kv_type;
  disk.block_tokens = options_.prefix_block_tokens;
  disk.block_bytes = engine.session->kv_cache().RowsBytes(options_.prefix_block_tokens);
  disk.log = options_.log;
  COLIBRI_ASSIGN_OR_RETURN(prefix_disk_, PrefixDiskStore::Open(disk));
  return absl::OkStatus();
}

PrefixCache::Stats GenerationScheduler::prefix_cache() const {
  return prefix_cache_ != nullptr ? prefix_cache_->stats() : PrefixCache::Stats();
}

void GenerationScheduler::ReusePrefix(Engine& engine, Active& a) {
  if (!engine.reuse || a.options.all_prompt_logits) return;
  arch::KvCache& kv = engine.session->kv_cache();
  // At least the last prompt token is evaluated: its logits give the first
  // generated token.
  const PrefixCache::RowsKind kind{engine.path, kv.type()};
  const int b = prefix_cache_->block_tokens();
  const int most = static_cast<int>(a.prompt.size()) - 1;
  PrefixCache::Match match = prefix_cache_->Lookup(kind, a.prompt, most);
  if (prefix_disk_ != nullptr) {
    // The blocks on disk past those in RAM, then into RAM for later requests.
    const std::vector<PrefixCache::Rows> more =
        prefix_disk_->Load(kind, a.prompt, static_cast<int>(match.blocks.size()), most / b);
    if (!more.empty()) {
      match.blocks.insert(match.blocks.end(), more.begin(), more.end());
      match.tokens = static_cast<int>(match.blocks.size()) * b;
      prefix_cache_
          ->Insert(kind, absl::MakeConstSpan(a.prompt).first(match.tokens), kv.RowsBytes(b),
                   [&](int from, int, uint8_t* out) {
                     const std::vector<uint8_t>& rows = *match.blocks[from / b];
                     std::memcpy(out, rows.data(), rows.size());
                     return absl::OkStatus();
                   })
          .IgnoreError();
    }
  }
  for (size_t i = 0; i < match.blocks.size(); ++i) {
    const int from = static_cast<int>(i) * b;
    const absl::Status imported = kv.ImportRows(a.seq, from, from + b, match.blocks[i]->data());
    if (!imported.ok()) {  // a bug: the blocks of this kind have this session's layout
      if (options_.log != nullptr) {
        *options_.log << "serve: prefix reuse: " << imported << std::endl;
      }
      return;
    }
  }
  kv.set_n_past(a.seq, match.tokens);
  a.prompt_done = match.tokens;
  a.outcome.cached_prompt_tokens = match.tokens;
}

void GenerationScheduler::CachePrefix(Engine& engine, Active& a,
                                      absl::Span<const int32_t> generated) {
  arch::KvCache& kv = engine.session->kv_cache();
  // Position prompt.size() + i holds generated[i] once fed back: every
  // generated token but the last, which is fed only for its logits
  // (final_feed). Rows beyond are drafts that were not accepted.
  const int fed = static_cast<int>(generated.size()) - (a.final_feed.has_value() ? 0 : 1);
  const int held =
      std::min(kv.n_past(a.seq), static_cast<int>(a.prompt.size()) + std::max(fed, 0));
  std::vector<int32_t> tokens = a.prompt;
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  tokens.resize(held);
  const PrefixCache::RowsKind kind{engine.path, kv.type()};
  std::vector<PrefixCache::Rows> chain;
  const absl::Status cached = prefix_cache_->Insert(
      kind, tokens, kv.RowsBytes(prefix_cache_->block_tokens()),
      [&](int from, int to, uint8_t* out) { return kv.ExportRows(a.seq, from, to, out); },
      prefix_disk_ != nullptr ? &chain : nullptr);
  if (!cached.ok() && options_.log != nullptr) {
    *options_.log << "serve: prefix cache: " << cached << std::endl;
  }
  if (!chain.empty()) prefix_disk_->Enqueue(kind, std::move(tokens), std::move(chain));
}

}  // namespace colibri::coordinator
