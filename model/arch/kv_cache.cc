#include "model/arch/kv_cache.h"

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"

namespace colibri::arch {
namespace {

// Positions of rows committed beyond those a step writes.
constexpr int kCommitAhead = 64;

}  // namespace

const char* KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF16:
      return "f16";
    case KvType::kQ8_0:
      return "q8_0";
    case KvType::kF32:
      break;
  }
  return "f32";
}

absl::Status KvCache::CheckType(const ModelConfig& c, KvType type) {
  if (type != KvType::kQ8_0) return absl::OkStatus();
  auto check = [](const char* what, int n) {
    if (n % ops::kQK == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("KV type q8_0 stores rows in blocks of ",
                                                   ops::kQK, " elements, and this model's ", what,
                                                   " is ", n, ": use --kv-type f16 or f32"));
  };
  if (c.attention == AttentionKind::kMla) {
    absl::Status status = check("kv_lora_rank", c.kv_lora_rank);
    if (status.ok())
      status = check("latent row (kv_lora_rank + rope dims)", c.kv_lora_rank + c.n_rot);
    return status;
  }
  absl::Status status = check("head dimension", c.head_dim);
  if (status.ok()) status = check("value head dimension", c.head_dim_v);
  return status;
}

size_t KvCache::RowBytes(int64_t n) const {
  switch (type_) {
    case KvType::kF16:
      return static_cast<size_t>(n) * sizeof(uint16_t);
    case KvType::kQ8_0:
      return static_cast<size_t>(n / ops::kQK) * sizeof(ops::BlockQ8_0);
    case KvType::kF32:
      break;
  }
  return static_cast<size_t>(n) * sizeof(float);
}

KvCache::KvCache(const ModelConfig& config, int n_ctx, int n_batch, int n_seq, KvType type)
    : c_(config), type_(type), n_ctx_(n_ctx) {
  const bool mla = c_.attention == AttentionKind::kMla;
  rows_.resize(c_.n_layer);
  offset_.resize(c_.n_layer);
  size_t total_rows = 0;
  for (int il = 0; il < c_.n_layer; ++il) {
    rows_[il] = c_.is_window_layer(il)
                    ? static_cast<int>(std::min<int64_t>(n_ctx, c_.sliding_window + n_batch - 1))
                    : n_ctx;
    has_window_layers_ |= c_.is_window_layer(il);
    offset_[il] = total_rows;
    total_rows += rows_[il];
  }
  k_slot_elems_ = total_rows * (mla ? c_.kv_lora_rank + c_.n_rot : c_.kv_dim());
  v_slot_elems_ = mla ? 0 : total_rows * c_.v_dim();
  n_past_.assign(n_seq, 0);
  committed_.assign(n_seq, 0);
  k_slots_.resize(n_seq);
  v_slots_.resize(n_seq);
}

void KvCache::Reserve(int seq, int positions) {
  if (k_slots_[seq] == nullptr) {
    // Default-initialized: nothing is committed until the madvise below or a write.
    k_slots_[seq].reset(new uint8_t[RowBytes(k_slot_elems_)]);
    if (v_slot_elems_ > 0) v_slots_[seq].reset(new uint8_t[RowBytes(v_slot_elems_)]);
    ++n_slots_;
  }
  // Rows are committed kCommitAhead positions at a time, one madvise per
  // layer and KV head for K and for V, so that decode does not stop for a
  // page fault every few tokens per head (docs/benchmarks.md has the figures).
  if (!commit_ahead_ || positions <= committed_[seq]) return;
  const int target = std::min(n_ctx_, positions + kCommitAhead);
  // Standard attention: each KV head's rows (head_dim / head_dim_v elements);
  // MLA: one run of latent rows.
  const bool mla = c_.attention == AttentionKind::kMla;
  const int runs = mla ? 1 : c_.n_head_kv;
  const size_t k_row = RowBytes(mla ? c_.kv_lora_rank + c_.n_rot : c_.head_dim);
  const size_t v_row = mla ? 0 : RowBytes(c_.head_dim_v);
  for (int il = 0; il < c_.n_layer; ++il) {
    const size_t rows = static_cast<size_t>(rows_[il]);
    const size_t first = std::min(static_cast<size_t>(committed_[seq]), rows);
    const size_t end = std::min(static_cast<size_t>(target), rows);
    if (end <= first) continue;
    for (int h = 0; h < runs; ++h) {
      // Row r of run h: layer il's first row (offset_ rows of every run
      // before it), then h * rows rows of the runs before this one.
      const size_t row = offset_[il] * runs + h * rows + first;
      if (!PopulatePages(k_slots_[seq].get() + row * k_row, (end - first) * k_row) ||
          (v_row > 0 && !PopulatePages(v_slots_[seq].get() + row * v_row, (end - first) * v_row))) {
        commit_ahead_ = false;  // an older kernel: rows are committed as written
        return;
      }
    }
  }
  committed_[seq] = target;
}

void KvCache::Release(int seq) {
  n_past_[seq] = 0;
  committed_[seq] = 0;
  if (k_slots_[seq] == nullptr) return;
  k_slots_[seq].reset();
  v_slots_[seq].reset();
  --n_slots_;
}

int64_t KvCache::bytes_allocated() const {
  return static_cast<int64_t>(n_slots_) *
         static_cast<int64_t>(RowBytes(k_slot_elems_) + RowBytes(v_slot_elems_));
}

void KvCache::Truncate(int seq, int n) {
  n = std::max(0, std::min(n, n_past_[seq]));
  for (int il = 0; il < c_.n_layer; ++il) {
    // Position n - window (the oldest the next token reads) must not have
    // been overwritten by a dropped position.
    if (c_.is_window_layer(il) && n_past_[seq] - 1 >= n - c_.sliding_window + rows_[il]) {
      n = 0;
    }
  }
  n_past_[seq] = n;
}

int KvCache::max_truncate() const {
  int most = n_ctx_;
  for (int il = 0; il < c_.n_layer; ++il) {
    // Truncate keeps the rest when n_past - n <= rows - window.
    if (c_.is_window_layer(il)) most = std::min(most, std::max(0, rows_[il] - c_.sliding_window));
  }
  return most;
}

int64_t KvCache::RowsBytes(int n) const {
  const bool mla = c_.attention == AttentionKind::kMla;
  const int64_t per_row =
      mla ? RowBytes(c_.kv_lora_rank + c_.n_rot) : RowBytes(c_.kv_dim()) + RowBytes(c_.v_dim());
  return static_cast<int64_t>(n) * c_.n_layer * per_row;
}

template <typename Packed>
void KvCache::CopyRows(int seq, int from, int to, Packed* packed) const {
  // Packed is const uint8_t when importing (packed rows into the slot).
  constexpr bool kExport = !std::is_const<Packed>::value;
  const bool mla = c_.attention == AttentionKind::kMla;
  const size_t n = static_cast<size_t>(to - from);
  // A run is one KV head's rows (or the latent rows with MLA), consecutive
  // in the slot and in the packed form alike.
  const int runs = mla ? 1 : c_.n_head_kv;
  const size_t k_row = RowBytes(mla ? c_.kv_lora_rank + c_.n_rot : c_.head_dim);
  const size_t v_row = mla ? 0 : RowBytes(c_.head_dim_v);
  auto copy = [&](uint8_t* slot, size_t row_bytes, size_t first_row) {
    uint8_t* a = slot + (first_row + from) * row_bytes;
    if constexpr (kExport) {
      std::memcpy(packed, a, n * row_bytes);
    } else {
      std::memcpy(a, packed, n * row_bytes);
    }
    packed += n * row_bytes;
  };
  for (int il = 0; il < c_.n_layer; ++il) {
    const size_t rows = static_cast<size_t>(rows_[il]);
    for (int h = 0; h < runs; ++h) copy(k_slots_[seq].get(), k_row, offset_[il] * runs + h * rows);
    if (v_row == 0) continue;
    for (int h = 0; h < runs; ++h) copy(v_slots_[seq].get(), v_row, offset_[il] * runs + h * rows);
  }
}

absl::Status KvCache::ExportRows(int seq, int from, int to, uint8_t* out) const {
  if (has_window_layers_) {
    return absl::FailedPreconditionError("KV cache: rows of sliding-window layers cannot be exported");
  }
  if (from < 0 || from > to || to > n_past_[seq]) {
    return absl::OutOfRangeError(absl::StrCat("KV cache: exporting positions [", from, ", ", to,
                                              ") of sequence ", seq, " holding ", n_past_[seq]));
  }
  if (from < to) CopyRows(seq, from, to, out);
  return absl::OkStatus();
}

absl::Status KvCache::ImportRows(int seq, int from, int to, const uint8_t* in) {
  if (has_window_layers_) {
    return absl::FailedPreconditionError("KV cache: rows of sliding-window layers cannot be imported");
  }
  if (from < 0 || from > to || to > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("KV cache: importing positions [", from, ", ", to,
                                              ") into a context of ", n_ctx_));
  }
  if (from == to) return absl::OkStatus();
  Reserve(seq, to);
  CopyRows(seq, from, to, in);
  return absl::OkStatus();
}

}  // namespace colibri::arch
