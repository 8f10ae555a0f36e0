// Session's attention over the KV cache: standard (grouped-query, with
// sliding windows and sinks) and Multi-head Latent Attention (deepseek2).
#include "model/arch/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "model/ops/attend.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/vector_ops.h"

namespace colibri::arch {

void Session::Attention(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim(), kv_dim = c_.kv_dim(), v_dim = c_.v_dim();
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const ops::MatMulOutput qkv[3] = {
      {&L.wq, q_.data(), q_dim}, {&L.wk, k_.data(), kv_dim}, {&L.wv, v_.data(), v_dim}};
  ops::MatMulSharedInput(qkv, 3, xn_.data(), n, options_.path, pool_, &matmul_scratch_);

  const int ring = kv_.rows(il);
  for (int i = 0; i < n; ++i) {
    float* q = q_.data() + i * q_dim;
    float* k = k_.data() + i * kv_dim;
    float* v = v_.data() + i * v_dim;
    if (c_.qkv_bias) {
      ops::Add(q, L.bq, q, q_dim);
      ops::Add(k, L.bk, k, kv_dim);
      ops::Add(v, L.bv, v, v_dim);
    }
    if (c_.qk_norm == QkNorm::kPerHead) {
      for (int h = 0; h < c_.n_head; ++h)
        ops::RmsNorm(q + h * hd, L.q_norm, c_.rms_eps, hd, q + h * hd);
      for (int h = 0; h < c_.n_head_kv; ++h) {
        ops::RmsNorm(k + h * hd, L.k_norm, c_.rms_eps, hd, k + h * hd);
      }
    } else if (c_.qk_norm == QkNorm::kWhole) {
      ops::RmsNorm(q, L.q_norm, c_.rms_eps, q_dim, q);
      ops::RmsNorm(k, L.k_norm, c_.rms_eps, kv_dim, k);
    }
    const int pos = row_pos_[i];
    rope_.Apply(q, c_.n_head, hd, pos);
    rope_.Apply(k, c_.n_head_kv, hd, pos);
    const size_t slot = static_cast<size_t>(pos % ring);
    kv_.WithRows(row_seq_[i], il, [&](auto k_cache, auto v_cache) {
      for (int h = 0; h < c_.n_head_kv; ++h) {
        StoreCacheRow(k + h * hd, hd, k_cache + kv_.KeyHead(il, h) + slot * hd);
        StoreCacheRow(v + h * hdv, hdv, v_cache + kv_.ValueHead(il, h) + slot * hdv);
      }
    });
  }

  // Causal attention, one (head, token) pair per work item.
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.attention_scale();
  const int window = c_.is_window_layer(il) ? c_.sliding_window : 0;
  if (window == 0) {
    // Rows of one sequence in a row (a prompt chunk): blocks of rows per
    // head. Otherwise (decode) blocks of the heads that share a KV head.
    bool distinct = true;
    for (int i = 1; i < n && distinct; ++i) distinct = row_seq_[i] != row_seq_[i - 1];
    if (!distinct) {
      AttentionPrompt(il, n);
      return;
    }
    if (group > 1) {
      AttentionGrouped(il, n);
      return;
    }
  }
  const int64_t items = static_cast<int64_t>(c_.n_head) * n;
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  const int64_t chunk = (items + n_threads - 1) / n_threads;
  auto body = [&](int64_t begin, int64_t end) {
    float* scores = scores_.data() + static_cast<size_t>(begin / chunk) * n_ctx_;
    for (int64_t item = begin; item < end; ++item) {
      const int h = static_cast<int>(item / n);
      const int i = static_cast<int>(item % n);
      const int kvh = h / group;
      const int last = row_pos_[i];
      const int first = window > 0 ? std::max(0, last - window + 1) : 0;
      kv_.WithRows(row_seq_[i], il, [&](auto k_cache, auto v_cache) {
        AttendOne(q_.data() + i * q_dim + h * hd, k_cache + kv_.KeyHead(il, kvh), hd,
                  v_cache + kv_.ValueHead(il, kvh), hdv, first, last, ring, hd, hdv, scale,
                  L.sinks ? L.sinks + h : nullptr, scores,
                  attn_.data() + i * c_.n_head * hdv + h * hdv);
      });
    }
  };
  if (pool_ != nullptr) {
    pool_->ParallelFor(items, chunk, body);
  } else {
    body(0, items);
  }
}

int Session::HeadsPerBlock(int64_t units, int heads) const {
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  int per = std::min(heads, kAttendBlock);
  while (per > 1 && units * ((heads + per - 1) / per) < n_threads) per = (per + 1) / 2;
  return per;
}

template <typename F>
void Session::ForAttendItems(int64_t items, int dim, F&& f) {
  const int n_threads = pool_ ? pool_->num_threads() : 1;
  const size_t per_thread = static_cast<size_t>(kAttendBlock) * (n_ctx_ + dim);
  if (block_scratch_.size() < per_thread * n_threads) {
    block_scratch_.resize(per_thread * n_threads);
  }
  const int64_t chunk = (items + n_threads - 1) / n_threads;
  auto body = [&](int64_t begin, int64_t end) {
    // At most n_threads chunks run: chunk index begin / chunk picks the buffer.
    float* scratch = block_scratch_.data() + static_cast<size_t>(begin / chunk) * per_thread;
    for (int64_t item = begin; item < end; ++item) f(item, scratch);
  };
  if (pool_ != nullptr) {
    pool_->ParallelFor(items, chunk, body);
  } else {
    body(0, items);
  }
}

void Session::AttentionPrompt(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim();
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.attention_scale();
  // Blocks of up to kAttendBlock consecutive rows of one sequence.
  std::vector<int> blocks;  // first row of each block, then n
  for (int i = 0; i < n; ++i) {
    if (blocks.empty() || i - blocks.back() == kAttendBlock || row_seq_[i] != row_seq_[i - 1]) {
      blocks.push_back(i);
    }
  }
  const int64_t n_blocks = static_cast<int64_t>(blocks.size());
  blocks.push_back(n);
  ForAttendItems(c_.n_head * n_blocks, hd, [&](int64_t item, float* scratch) {
    const int h = static_cast<int>(item / n_blocks);
    const int b = static_cast<int>(item % n_blocks);
    const int i0 = blocks[b], rows = blocks[b + 1] - blocks[b];
    const int kvh = h / group;
    const float* qs[kAttendBlock];
    float* outs[kAttendBlock];
    int lasts[kAttendBlock];
    const float* sinks[kAttendBlock];
    for (int t = 0; t < rows; ++t) {
      qs[t] = q_.data() + (i0 + t) * q_dim + h * hd;
      outs[t] = attn_.data() + (i0 + t) * c_.n_head * hdv + h * hdv;
      lasts[t] = row_pos_[i0 + t];
      sinks[t] = L.sinks ? L.sinks + h : nullptr;
    }
    kv_.WithRows(row_seq_[i0], il, [&](auto k_cache, auto v_cache) {
      AttendBlock(qs, rows, k_cache + kv_.KeyHead(il, kvh), hd, v_cache + kv_.ValueHead(il, kvh), hdv,
                  lasts, hd, hdv, scale, sinks, scratch, outs);
    });
  });
}

void Session::AttentionGrouped(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim();
  const int hd = c_.head_dim, hdv = c_.head_dim_v;
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.attention_scale();
  const int64_t units = static_cast<int64_t>(c_.n_head_kv) * n;
  const int per = HeadsPerBlock(units, group);
  const int blocks_per_group = (group + per - 1) / per;
  ForAttendItems(units * blocks_per_group, hd, [&](int64_t item, float* scratch) {
    const int b = static_cast<int>(item % blocks_per_group);
    const int i = static_cast<int>(item / blocks_per_group % n);
    const int kvh = static_cast<int>(item / blocks_per_group / n);
    const int h0 = kvh * group + b * per;
    const int rows = std::min(per, (kvh + 1) * group - h0);
    const float* qs[kAttendBlock];
    float* outs[kAttendBlock];
    int lasts[kAttendBlock];
    const float* sinks[kAttendBlock];
    for (int t = 0; t < rows; ++t) {
      qs[t] = q_.data() + i * q_dim + (h0 + t) * hd;
      outs[t] = attn_.data() + i * c_.n_head * hdv + (h0 + t) * hdv;
      lasts[t] = row_pos_[i];
      sinks[t] = L.sinks ? L.sinks + h0 + t : nullptr;
    }
    kv_.WithRows(row_seq_[i], il, [&](auto k_cache, auto v_cache) {
      AttendBlock(qs, rows, k_cache + kv_.KeyHead(il, kvh), hd, v_cache + kv_.ValueHead(il, kvh), hdv,
                  lasts, hd, hdv, scale, sinks, scratch, outs);
    });
  });
}

template <typename Rows>
void Session::AttendBlock(const float* const* q, int rows, Rows keys, int64_t key_stride,
                          Rows values, int64_t value_stride, const int* lasts, int dim, int out_dim,
                          float scale, const float* const* sinks, float* scratch,
                          float* const* out) {
  int n_keys = 0;
  for (int t = 0; t < rows; ++t) n_keys = std::max(n_keys, lasts[t] + 1);
  float* qbuf = scratch;
  float* dots = scratch + static_cast<size_t>(rows) * dim;  // [rows][n_keys]
  // A q8_0 cache holds rotated rows (see KvType): the queries go in rotated
  // to match and the weighted sums come back rotated.
  constexpr bool kRotated = std::is_same_v<Rows, ops::Q8_0Rows>;
  for (int t = 0; t < rows; ++t) {
    if constexpr (kRotated) {
      ops::RotateQ8_0Query(q[t], dim, qbuf + t * dim);
    } else {
      std::memcpy(qbuf + t * dim, q[t], dim * sizeof(float));
    }
  }
  // dots[t][j] = q_t · key j, the canonical float dot of ops::Dot, each key
  // row read once for the block.
  ops::AttendDots(qbuf, dim, rows, keys, key_stride, n_keys, dim, dots, n_keys);
  // Per query, AttendOne's softmax and weighted sum, operation for operation.
  const float* probs[kAttendBlock];
  int counts[kAttendBlock];
  for (int t = 0; t < rows; ++t) {
    float* scores = dots + static_cast<size_t>(t) * n_keys;
    const int n = lasts[t] + 1;
    ops::SoftmaxInPlace(scores, n, scale, sinks != nullptr ? sinks[t] : nullptr);
    std::fill(out[t], out[t] + out_dim, 0.0f);
    probs[t] = scores;
    counts[t] = n;
  }
  ops::AttendValues(probs, counts, rows, values, value_stride, out_dim, out);
  if constexpr (kRotated) {
    for (int t = 0; t < rows; ++t) ops::UnrotateQ8_0Output(out[t], out_dim, out[t]);
  }
}

template <typename Rows>
void Session::AttendOne(const float* q, Rows keys, int64_t key_stride, Rows values,
                        int64_t value_stride, int first, int last, int ring, int dim, int out_dim,
                        float scale, const float* sink, float* scores, float* out) {
  const int n_keys = last - first + 1;
  // A q8_0 cache holds rotated rows (see KvType): the query goes in rotated
  // to match and the weighted sum comes back rotated.
  constexpr bool kRotated = std::is_same_v<Rows, ops::Q8_0Rows>;
  if constexpr (kRotated) {
    thread_local std::vector<float> rotated;
    rotated.resize(dim);
    ops::RotateQ8_0Query(q, dim, rotated.data());
    q = rotated.data();
  }
  // The keys as runs of consecutive ring rows (two when the window wraps).
  for (int j = 0; j < n_keys;) {
    const int row = (first + j) % ring;
    const int run = std::min(n_keys - j, ring - row);
    ops::AttendDots(q, dim, 1, keys + static_cast<size_t>(row) * key_stride, key_stride, run, dim,
                    scores + j, run);
    j += run;
  }
  ops::SoftmaxInPlace(scores, n_keys, scale, sink);
  std::fill(out, out + out_dim, 0.0f);
  for (int j = 0; j < n_keys;) {
    const int row = (first + j) % ring;
    const int run = std::min(n_keys - j, ring - row);
    const float* p = scores + j;
    ops::AttendValues(&p, &run, 1, values + static_cast<size_t>(row) * value_stride, value_stride,
                      out_dim, &out);
    j += run;
  }
  if constexpr (kRotated) ops::UnrotateQ8_0Output(out, out_dim, out);
}

void Session::AttentionMla(int il, int n) {
  const LayerWeights& L = model_.layer(il);
  const int q_dim = c_.q_dim(), hd = c_.head_dim, hdv = c_.head_dim_v;
  const int rank = c_.kv_lora_rank, nope = c_.qk_nope(), row = rank + c_.n_rot;
  const int n_head = c_.n_head;
  const ops::NumericPath path = options_.path;
  if (c_.q_lora_rank > 0) {
    const int ql = c_.q_lora_rank;
    ops::MatMul(L.wq_a, xn_.data(), n, q_a_.data(), ql, path, pool_, &matmul_scratch_);
    for (int i = 0; i < n; ++i) {
      ops::RmsNorm(q_a_.data() + i * ql, L.q_a_norm, c_.rms_eps, ql, q_a_.data() + i * ql);
    }
    ops::MatMul(L.wq_b, q_a_.data(), n, q_.data(), q_dim, path, pool_, &matmul_scratch_);
  } else {
    ops::MatMul(L.wq, xn_.data(), n, q_.data(), q_dim, path, pool_, &matmul_scratch_);
  }
  ops::MatMul(L.wkv_a, xn_.data(), n, kv_a_.data(), row, path, pool_, &matmul_scratch_);

  for (int i = 0; i < n; ++i) {
    const int pos = row_pos_[i];
    float* a = kv_a_.data() + i * row;
    ops::RmsNorm(a, L.kv_a_norm, c_.rms_eps, rank, a);
    rope_.Apply(a + rank, 1, 0, pos);
    kv_.WithLatentRows(row_seq_[i], il, [&](auto cache) {
      StoreCacheRow(a, row, cache + static_cast<size_t>(pos) * row);
    });
    rope_.Apply(q_.data() + i * q_dim + nope, n_head, hd, pos);
  }

  // Absorbed q: per head [Kb[h] q_nope | q_pe], dotted with the cache rows.
  for (int h = 0; h < n_head; ++h) {
    for (int i = 0; i < n; ++i) {
      const float* q = q_.data() + i * q_dim + h * hd;
      std::memcpy(head_in_.data() + i * nope, q, nope * sizeof(float));
      std::memcpy(q_abs_.data() + (static_cast<size_t>(i) * n_head + h) * row + rank, q + nope,
                  c_.n_rot * sizeof(float));
    }
    ops::MatMul(L.wk_b[h], head_in_.data(), n, head_out_.data(), rank, path, pool_,
                &matmul_scratch_);
    for (int i = 0; i < n; ++i) {
      std::memcpy(q_abs_.data() + (static_cast<size_t>(i) * n_head + h) * row,
                  head_out_.data() + i * rank, rank * sizeof(float));
    }
  }

  // Every head reads the same latent rows: blocks of up to kAttendBlock
  // heads of a token go through one AttendBlock, so each cached row is read
  // once per block rather than once per head (bitwise AttendOne's). Blocks
  // are halved while there are fewer of them than threads.
  const float scale = c_.attention_scale();
  const int per = HeadsPerBlock(n, n_head);
  const int blocks = (n_head + per - 1) / per;
  ForAttendItems(static_cast<int64_t>(n) * blocks, row, [&](int64_t item, float* scratch) {
    const int i = static_cast<int>(item / blocks);
    const int h0 = static_cast<int>(item % blocks) * per;
    const int rows = std::min(per, n_head - h0);
    const float* qs[kAttendBlock];
    float* outs[kAttendBlock];
    int lasts[kAttendBlock];
    for (int t = 0; t < rows; ++t) {
      const size_t at = static_cast<size_t>(i) * n_head + h0 + t;
      qs[t] = q_abs_.data() + at * row;
      outs[t] = latent_.data() + at * rank;
      lasts[t] = row_pos_[i];
    }
    kv_.WithLatentRows(row_seq_[i], il, [&](auto cache) {
      AttendBlock(qs, rows, cache, row, cache, row, lasts, row, rank, scale, nullptr, scratch,
                  outs);
    });
  });

  // Back from the latent: o[h] = Vb[h] · latent[h].
  for (int h = 0; h < n_head; ++h) {
    for (int i = 0; i < n; ++i) {
      std::memcpy(head_in_.data() + i * rank,
                  latent_.data() + (static_cast<size_t>(i) * n_head + h) * rank,
                  rank * sizeof(float));
    }
    ops::MatMul(L.wv_b[h], head_in_.data(), n, head_out_.data(), hdv, path, pool_,
                &matmul_scratch_);
    for (int i = 0; i < n; ++i) {
      std::memcpy(attn_.data() + static_cast<size_t>(i) * n_head * hdv + h * hdv,
                  head_out_.data() + i * hdv, hdv * sizeof(float));
    }
  }
}

}  // namespace colibri::arch
