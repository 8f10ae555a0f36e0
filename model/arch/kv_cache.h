// The KV cache of a batched session: one slot per sequence, each holding the
// keys and values of every layer for up to n_ctx positions, and the number
// of positions each sequence holds.
//
// Layout of a slot: for standard attention, keys
// [n_layer][n_head_kv][rows(il)][head_dim] and values
// [n_layer][n_head_kv][rows(il)][head_dim_v], each KV head's rows consecutive
// (attention over a long cache streams one head's rows at a time); for
// Multi-head Latent Attention (deepseek2) one latent cache
// [n_layer][rows(il)][kv_lora_rank + n_rot] (the normed latent and the roped
// shared k_pe) and no values. rows(il) is n_ctx, or for a sliding-window layer
// min(n_ctx, window + n_batch - 1) used as a ring: position p is row
// p % rows(il). Elements are float, IEEE halves with KvType::kF16, or q8_0
// blocks along each row with KvType::kQ8_0 (a row of head_dim elements is
// head_dim / 32 blocks; offsets below still count elements).
//
// A slot is allocated when its sequence first reserves positions and left
// uninitialized (the system commits its pages only as rows are written, or
// ahead of the writes where the kernel can: Reserve); Release gives its memory
// back. Rows hold what they were last written: a position is read only after
// it was written, and positions past a truncation keep their stale rows.
//
// Thread-safety: none; owned by one Session. Rows of distinct sequences, and
// distinct rows of one, may be written from the session's pool threads at
// once.
#ifndef COLIBRI_MODEL_ARCH_KV_CACHE_H_
#define COLIBRI_MODEL_ARCH_KV_CACHE_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "model/arch/model_config.h"
#include "model/ops/attend.h"
#include "model/ops/quantize.h"

namespace colibri::arch {

// Element type of the KV cache. kF16 stores keys and values as IEEE half
// floats: half the cache memory and half the bytes attention reads per token,
// for keys and values rounded to 11 significant bits (the attention products
// then run exactly as on float rows holding those values, see
// ops::AttendDots). For Multi-head Latent Attention (deepseek2) the one
// latent cache (the normed latent and the roped k_pe) is stored so.
// kQ8_0 stores each row (one token's key or value of one KV head, or one
// latent) as q8_0 blocks of 32 elements (ops::Q8_0Rows): 34 bytes per 32
// elements, 0.27 of f32's. Each block is first rotated (ops::RotateQ8_0Row:
// signs and a 32-point Hadamard transform, which spreads an outlier channel
// over its block) and then rounded to 8 bits per block's largest element; the
// attention products read the blocks directly (ops::AttendDots) and equal the
// float products over the dequantized rotated rows, with the query rotated
// to match and the weighted sum of values rotated back (Session's attention).
// Every row length must be a multiple of 32 (KvCache::CheckType).
enum class KvType { kF32, kF16, kQ8_0 };
const char* KvTypeName(KvType type);

// A cache row from n floats: copied, or rounded to halves.
inline void StoreCacheRow(const float* src, int n, float* dst) {
  std::memcpy(dst, src, n * sizeof(float));
}
inline void StoreCacheRow(const float* src, int n, uint16_t* dst) {
  for (int e = 0; e < n; ++e) dst[e] = ops::Fp32ToFp16(src[e]);
}
// ... or rotated and quantized to q8_0 blocks (n a multiple of 32; see
// ops::RotateQ8_0Row).
inline void StoreCacheRow(const float* src, int n, ops::Q8_0Rows dst) {
  for (int b = 0; b < n; b += ops::kQK) {
    float rotated[ops::kQK];
    ops::RotateQ8_0Row(src + b, ops::kQK, rotated);
    ops::StoreQ8_0Row(rotated, ops::kQK, dst + b);
  }
}

class KvCache {
 public:
  // config is copied. n_ctx >= 1 positions per sequence; n_batch >= 1, the
  // most positions one forward writes (a ring keeps that many beyond the
  // window); n_seq >= 1 slots.
  KvCache(const ModelConfig& config, int n_ctx, int n_batch, int n_seq, KvType type);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Whether a cache of `type` can hold the model's rows: InvalidArgument
  // naming the dimension for kQ8_0 when a head dimension (or MLA's latent
  // row or rank) is not a multiple of 32 (rows are not padded). OK otherwise.
  // A cache must not be built for a type this refuses.
  static absl::Status CheckType(const ModelConfig& config, KvType type);

  KvType type() const { return type_; }
  int n_ctx() const { return n_ctx_; }
  int n_seq() const { return static_cast<int>(n_past_.size()); }

  // Positions sequence `seq` (in [0, n_seq)) holds.
  int n_past(int seq) const { return n_past_[seq]; }
  // Sets the positions `seq` holds to n (in [0, n_ctx]): after a forward
  // wrote the rows of positions n_past .. n - 1, or back to where a failed
  // one started.
  void set_n_past(int seq, int n) { n_past_[seq] = n; }
  // Forgets every position of `seq` (its slot is reused from position 0).
  void Reset(int seq) { n_past_[seq] = 0; }
  // Drops positions >= n (n <= n_past) of `seq`. A sliding-window layer's
  // ring may already have overwritten a position the next token reads:
  // Truncate then drops everything (n_past becomes 0) rather than keep a
  // damaged cache.
  void Truncate(int seq, int n);
  // Most positions Truncate can always drop from the end and keep the rest:
  // n_ctx without sliding-window layers, else the ring's slack beyond the
  // window (at most n_batch - 1), possibly 0.
  int max_truncate() const;

  // Allocates `seq`'s slot if it has none, and commits its rows of positions
  // below `positions` (and some more ahead) in every layer.
  void Reserve(int seq, int positions);
  // Forgets every position of `seq` and frees its slot; the next Reserve
  // allocates it again.
  void Release(int seq);
  // Bytes of slots allocated (an upper bound of what they commit).
  int64_t bytes_allocated() const;
  // Positions of `seq` whose rows are committed in every layer ahead of
  // their first write (0 where the kernel cannot: before Linux 5.14).
  int positions_committed(int seq) const { return committed_[seq]; }

  // Copies of a sequence's rows, for reuse by another sequence (a prefix
  // cache). The rows of positions [from, to) are packed, per layer, as keys
  // [n_head_kv][to - from][head_dim] then values [n_head_kv][to - from]
  // [head_dim_v] (MLA: latents [to - from][kv_lora_rank + n_rot]), elements
  // of type(), independent of n_ctx; kRowsLayoutVersion names this layout
  // (2: q8_0 rows hold rotated blocks, see KvType).
  // Only without sliding-window layers (a ring does not keep old positions).
  static constexpr int kRowsLayoutVersion = 2;
  bool has_window_layers() const { return has_window_layers_; }
  // Bytes ExportRows writes for n positions.
  int64_t RowsBytes(int n) const;
  // Writes the rows of `seq`'s positions [from, to) to out (RowsBytes(to -
  // from) bytes). FailedPrecondition with sliding-window layers; OutOfRange
  // unless 0 <= from <= to <= n_past(seq).
  absl::Status ExportRows(int seq, int from, int to, uint8_t* out) const;
  // Writes rows ExportRows wrote (RowsBytes(to - from) bytes, from a cache
  // of the same model and type; its n_ctx may differ) as `seq`'s positions
  // [from, to), reserving them; n_past is unchanged (set_n_past after). FailedPrecondition with sliding-window
  // layers; OutOfRange unless 0 <= from <= to <= n_ctx.
  absl::Status ImportRows(int seq, int from, int to, const uint8_t* in);

  // Rows of layer il: n_ctx, or the ring's size (see above).
  int rows(int il) const { return rows_[il]; }
  // Offsets of KV head h's first row in layer il's keys / values (elements).
  int64_t KeyHead(int il, int h) const {
    return static_cast<int64_t>(h) * rows_[il] * c_.head_dim;
  }
  int64_t ValueHead(int il, int h) const {
    return static_cast<int64_t>(h) * rows_[il] * c_.head_dim_v;
  }
  // Calls f(keys, values) with layer il's keys and values in `seq`'s slot
  // (standard attention; reserved), as float*, as uint16_t* (halves) or as
  // ops::Q8_0Rows; each is indexed by element (keys + KeyHead(il, h) + r *
  // head_dim is row r of KV head h).
  template <typename F>
  void WithRows(int seq, int il, F&& f) const {
    if (type_ == KvType::kQ8_0) {
      f(Q8Rows(k_slots_[seq].get(), il, c_.kv_dim()), Q8Rows(v_slots_[seq].get(), il, c_.v_dim()));
    } else if (type_ == KvType::kF16) {
      f(KeyRows<uint16_t>(seq, il, c_.kv_dim()), ValueRows<uint16_t>(seq, il));
    } else {
      f(KeyRows<float>(seq, il, c_.kv_dim()), ValueRows<float>(seq, il));
    }
  }
  // Calls f(latent) with layer il's latent rows in `seq`'s slot (MLA;
  // reserved), kv_lora_rank + n_rot elements a row, as float*, uint16_t* or
  // ops::Q8_0Rows.
  template <typename F>
  void WithLatentRows(int seq, int il, F&& f) const {
    const int row = c_.kv_lora_rank + c_.n_rot;
    if (type_ == KvType::kQ8_0) {
      f(Q8Rows(k_slots_[seq].get(), il, row));
    } else if (type_ == KvType::kF16) {
      f(KeyRows<uint16_t>(seq, il, row));
    } else {
      f(KeyRows<float>(seq, il, row));
    }
  }

 private:
  // Copies the rows of positions [from, to) of `seq` between its slot and
  // the packed form (see ExportRows): out of the slot for uint8_t, into it
  // (reserved) for const uint8_t.
  template <typename Packed>
  void CopyRows(int seq, int from, int to, Packed* packed) const;
  template <typename T>
  T* KeyRows(int seq, int il, int row_elems) const {
    return reinterpret_cast<T*>(k_slots_[seq].get()) + offset_[il] * row_elems;
  }
  template <typename T>
  T* ValueRows(int seq, int il) const {
    return reinterpret_cast<T*>(v_slots_[seq].get()) + offset_[il] * c_.v_dim();
  }
  ops::Q8_0Rows Q8Rows(uint8_t* slot, int il, int row_elems) const {
    return ops::Q8_0Rows{reinterpret_cast<ops::BlockQ8_0*>(slot)} +
           static_cast<int64_t>(offset_[il]) * row_elems;
  }
  // Bytes of a row of n elements (n a multiple of 32 with kQ8_0).
  size_t RowBytes(int64_t n) const;

  const ModelConfig c_;  // a copy: a caller's temporary may not outlive the cache
  const KvType type_;
  const int n_ctx_;
  std::vector<int> rows_;       // [n_layer]
  std::vector<size_t> offset_;  // [n_layer] first row of each layer in a slot
  size_t k_slot_elems_ = 0;     // elements of one slot's keys (or latents)
  size_t v_slot_elems_ = 0;     // and values (0 with MLA)
  std::vector<int> n_past_;     // [n_seq]
  // [n_seq] slots, null until reserved.
  std::vector<std::unique_ptr<uint8_t[]>> k_slots_;
  std::vector<std::unique_ptr<uint8_t[]>> v_slots_;
  int n_slots_ = 0;            // slots allocated
  std::vector<int> committed_;  // [n_seq] positions committed, 0 without a slot
  bool commit_ahead_ = true;   // false once the kernel refused (PopulatePages)
  bool has_window_layers_ = false;
};

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_KV_CACHE_H_
