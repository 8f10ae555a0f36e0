#include "model/ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "model/ops/activation_quant.h"
#include "model/ops/kernel_calibration.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops {
namespace {

using internal::ActivationLayout;
using internal::KernelSet;

// Rows a thread takes at least; smaller matrices run on the calling thread.
constexpr int64_t kMinRowsPerPart = 16;
static_assert(kMinRowsPerPart % kInterleaveRows == 0,
              "parts must start on a group of interleaved rows");
// Row ranges per thread: more ranges than threads let a thread that is not
// slowed down by another process on its core take over the slow one's share.
constexpr int64_t kPartsPerThread = 4;
// Weight bytes (times tokens) a part covers at least: every part starts a
// new stream whose first bytes arrive at the memory's latency, not its
// bandwidth, so a one-token expert matrix (under 1 MiB for Qwen3-30B-A3B)
// runs as one part (docs/benchmarks.md).
constexpr int64_t kMinPartWork = 512 << 10;
// Multiply-adds below which threading costs more than it saves.
constexpr int64_t kMinParallelMacs = 1 << 18;
// Weight bytes of a row block, kept in L2 while every token tile passes over it.
constexpr uint64_t kRowBlockBytes = 96 << 10;
constexpr int64_t kMaxRowBlock = 64;

std::atomic<const KernelSet*>& ActiveSlot() {
  static std::atomic<const KernelSet*> active{&internal::CalibratedKernels()};
  return active;
}

const KernelSet& Active() { return *ActiveSlot().load(std::memory_order_relaxed); }

uint8_t* Align64(uint8_t* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<uint8_t*>((v + 63) & ~uintptr_t{63});
}

// Rows a row block holds a multiple of when it can: the one-token tiles take
// 8 (AVX2) or 4 (AVX-512) rows at a time and hand a block's remaining rows to
// the per-row kernels. Blocks of 58 rows (the 96 KiB of a 2048-column Q6_K
// output head) would send 2 rows in 58 there.
constexpr int64_t kRowBlockMultiple = 8;

int64_t RowBlock(uint64_t bytes_per_row) {
  const int64_t rb = static_cast<int64_t>(kRowBlockBytes / std::max<uint64_t>(1, bytes_per_row));
  if (rb >= kRowBlockMultiple) {
    return std::min<int64_t>(rb / kRowBlockMultiple * kRowBlockMultiple, kMaxRowBlock);
  }
  return std::max<int64_t>(rb, 1);
}

// Rows below which quantizing activations on the calling thread beats a hand-off.
constexpr int64_t kMinParallelQuantRows = 32;

// One input of a quantization job: n rows, row t at x + t * x_stride, into
// out + t * layout.row_bytes.
struct QuantInput {
  ActivationLayout layout;
  const float* x;
  int64_t x_stride;
  int64_t n;
  uint8_t* out;
};

// Quantizes the rows of `count` inputs, input(i) describing input i, as one
// job: every row on its own, so splitting the rows over the pool (when they
// are many) changes no byte. first_row holds the inputs' row offsets when
// count > 1 (may be null for one input).
template <typename Input>
void QuantizeInputs(int64_t count, Input input, ThreadPool* pool,
                    std::vector<int64_t>* first_row) {
  int64_t one[2] = {0, 0};
  int64_t* first = one;
  if (count > 1) {
    first_row->resize(static_cast<size_t>(count) + 1);
    first = first_row->data();
  }
  first[0] = 0;
  for (int64_t i = 0; i < count; ++i) first[i + 1] = first[i] + input(i).n;
  const int64_t total = first[count];
  if (total == 0) return;
  auto body = [&](int64_t begin, int64_t end) {
    int64_t i = std::upper_bound(first, first + count + 1, begin) - first - 1;
    QuantInput in = input(i);
    for (int64_t r = begin; r < end; ++r) {
      while (r >= first[i + 1]) in = input(++i);
      const int64_t t = r - first[i];
      internal::QuantizeActivationRow(in.layout, in.x + t * in.x_stride,
                                      in.out + t * in.layout.row_bytes);
    }
  };
  if (pool == nullptr || pool->num_threads() < 2 || total < kMinParallelQuantRows) {
    body(0, total);
  } else {
    pool->ParallelFor(total, kMinParallelQuantRows / 2, body);
  }
}

// Everything one call needs, shared read-only by the parts.
struct Job {
  const KernelSet* kernels;
  const WeightMatrix* w;
  const float* x;
  int64_t n_tokens;
  float* y;
  int64_t y_stride;
  internal::QuantTileFn quant_tile;  // null: float path
  ActivationLayout layout;
  const uint8_t* act;
};

// Rows [rs, rs + nr) of w in GGUF order: at w's bytes when they are, else
// copied into *buf with their groups put back into row order (a kernel set
// without tiles for w's layout, or the exact path). A group comes back whole
// (DeinterleaveGroup writes its 8 rows), so *buf holds every row from the
// start of the group holding rs to the end of the group holding the range's
// last row, or to rs + nr when the range runs into the rows after the last
// group.
const uint8_t* RowsInGgufOrder(const WeightMatrix& w, int64_t rs, int64_t nr,
                               std::vector<uint8_t>* buf) {
  const int64_t full = w.rows / kInterleaveRows * kInterleaveRows;
  if (w.layout == WeightLayout::kRows || rs >= full) return w.data + rs * w.row_bytes;
  const int64_t first = rs / kInterleaveRows * kInterleaveRows;
  const int64_t end = rs + nr;
  const int64_t groups_end =
      std::min(full, (end + kInterleaveRows - 1) / kInterleaveRows * kInterleaveRows);
  buf->resize(static_cast<size_t>(std::max(groups_end, end) - first) * w.row_bytes);
  for (int64_t g = first; g < groups_end; g += kInterleaveRows) {
    DeinterleaveGroup(w.type, w.data + g * w.row_bytes, w.row_bytes,
                      buf->data() + (g - first) * w.row_bytes);
  }
  if (end > full) {
    // The rows after the last group, in GGUF order already.
    std::memcpy(buf->data() + (full - first) * w.row_bytes, w.data + full * w.row_bytes,
                static_cast<size_t>(end - full) * w.row_bytes);
  }
  return buf->data() + (rs - first) * w.row_bytes;
}

// Scratch for RowsInGgufOrder, per thread (the parts of a job run on any).
std::vector<uint8_t>& ReorderBuffer() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

void RunQuantRows(const Job& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  int64_t rb = RowBlock(w.row_bytes);
  if (w.layout == WeightLayout::kInterleaved8) rb = std::max<int64_t>(rb, kInterleaveRows);
  // Interleaved groups go to the set's tile for them when it has one; the
  // row blocks then start at multiples of 8 (parts and RowBlock keep them so).
  const internal::QuantTileFn interleaved =
      w.layout == WeightLayout::kInterleaved8
          ? job.kernels->interleaved_tile[internal::Slot(w.type)]
          : nullptr;
  const int64_t full = w.rows / kInterleaveRows * kInterleaveRows;
  for (int64_t rs = r0; rs < r1; rs += rb) {
    const int64_t nr = std::min(rb, r1 - rs);
    const int64_t grouped =
        interleaved != nullptr ? std::max<int64_t>(0, std::min(nr, full - rs)) : 0;
    // The rows the interleaved tile does not take (none in a decode product
    // of whole groups: no buffer lookup then).
    const uint8_t* rows =
        grouped < nr ? RowsInGgufOrder(w, rs + grouped, nr - grouped, &ReorderBuffer()) : nullptr;
    for (int64_t t0 = 0; t0 < job.n_tokens; t0 += internal::kMaxTokenTile) {
      const int64_t nt = std::min<int64_t>(internal::kMaxTokenTile, job.n_tokens - t0);
      const uint8_t* act = job.act + t0 * job.layout.row_bytes;
      float* y = job.y + t0 * job.y_stride + rs;
      if (grouped > 0) {
        interleaved(w.data + rs * w.row_bytes, w.row_bytes, grouped, act, job.layout, nt, y,
                    job.y_stride);
      }
      if (grouped < nr) {
        job.quant_tile(rows, w.row_bytes, nr - grouped, act, job.layout, nt, y + grouped,
                       job.y_stride);
      }
    }
  }
}

void RunFloatRows(const Job& job, int64_t r0, int64_t r1, float* buf) {
  const WeightMatrix& w = *job.w;
  const int64_t cols = w.cols;
  const bool direct = w.type == TensorType::kF32;
  // rb rows are dequantized into buf at a time. Interleaved rows are put
  // back in GGUF order whole groups at a time (fetch rows, a multiple of 8),
  // so that a group is put back once even where rb is not a multiple of 8
  // (fewer than 8 rows of more than 3072 columns fill a block).
  const int64_t rb = RowBlock(static_cast<uint64_t>(cols) * sizeof(float));
  const int64_t fetch = w.layout == WeightLayout::kInterleaved8
                            ? (rb + kInterleaveRows - 1) / kInterleaveRows * kInterleaveRows
                            : rb;
  const internal::DequantFn dequant = job.kernels->dequant[internal::Slot(w.type)];
  for (int64_t fs = r0; fs < r1; fs += fetch) {
    const int64_t fe = std::min(fetch, r1 - fs) + fs;
    const uint8_t* fetched = direct ? nullptr : RowsInGgufOrder(w, fs, fe - fs, &ReorderBuffer());
    for (int64_t rs = fs; rs < fe; rs += rb) {
      const int64_t nr = std::min(rb, fe - rs);
      const float* wf;
      int64_t w_stride;
      if (direct) {
        wf = reinterpret_cast<const float*>(w.data + rs * w.row_bytes);
        w_stride = static_cast<int64_t>(w.row_bytes / sizeof(float));
      } else {
        const uint8_t* rows = fetched + (rs - fs) * w.row_bytes;
        for (int64_t i = 0; i < nr; ++i) dequant(rows + i * w.row_bytes, buf + i * cols, cols);
        wf = buf;
        w_stride = cols;
      }
      for (int64_t t0 = 0; t0 < job.n_tokens; t0 += internal::kMaxTokenTile) {
        const int64_t nt = std::min<int64_t>(internal::kMaxTokenTile, job.n_tokens - t0);
        job.kernels->float_tile(wf, w_stride, nr, job.x + t0 * cols, cols, cols, nt,
                                job.y + t0 * job.y_stride + rs, job.y_stride);
      }
    }
  }
}

}  // namespace

bool ForceKernelSetForTesting(KernelSetChoice choice) {
  const KernelSet* set = nullptr;
  switch (choice) {
    case KernelSetChoice::kAuto:
      set = &internal::CalibratedKernels();
      break;
    case KernelSetChoice::kPortable:
      set = &internal::PortableKernels();
      break;
    case KernelSetChoice::kAvx2:
      set = internal::Avx2Kernels();
      break;
    case KernelSetChoice::kAvx512:
      set = internal::Avx512Kernels();
      break;
    case KernelSetChoice::kNeon:
      set = internal::NeonKernels();
      break;
    case KernelSetChoice::kNeonDotprod:
      set = internal::NeonDotprodKernels();
      break;
  }
  if (set == nullptr) return false;
  ActiveSlot().store(set, std::memory_order_relaxed);
  return true;
}

const char* ActiveKernelSetName() { return Active().name; }

bool PrefersInterleaved(const WeightMatrix& w) {
  return w.layout == WeightLayout::kRows && HasInterleavedLayout(w.type) &&
         w.rows >= kInterleaveRows && Active().interleaved_tile[internal::Slot(w.type)] != nullptr;
}

WeightMatrix InterleaveMatrix(const WeightMatrix& w, uint8_t* out) {
  const int64_t full = w.rows / kInterleaveRows * kInterleaveRows;
  for (int64_t g = 0; g < full; g += kInterleaveRows) {
    InterleaveGroup(w.type, w.data + g * w.row_bytes, w.row_bytes, out + g * w.row_bytes);
  }
  std::memcpy(out + full * w.row_bytes, w.data + full * w.row_bytes,
              static_cast<size_t>(w.rows - full) * w.row_bytes);
  WeightMatrix m = w;
  m.data = out;
  m.layout = WeightLayout::kInterleaved8;
  return m;
}

namespace internal {
const KernelSet& ActiveKernels() { return Active(); }
}  // namespace internal

namespace {

// Row ranges of one matrix: `parts` ranges of `per_part` rows (a multiple of
// kMinRowsPerPart; the last ones may be short or empty).
struct RowSplit {
  int64_t parts;
  int64_t per_part;
};

// What a product streams: its weight bytes once per token.
int64_t Work(const WeightMatrix& w, int64_t n_tokens) {
  return w.rows * static_cast<int64_t>(w.row_bytes) * n_tokens;
}

// The work a part aims at in a job of `total_work`: kPartsPerThread parts per
// thread, but none below kMinPartWork.
int64_t PartTarget(int64_t total_work, int threads) {
  return std::max<int64_t>(kMinPartWork, total_work / (int64_t{threads} * kPartsPerThread));
}

// Splits w into about work / target parts, at least min_parts (the threads,
// for a product that runs alone) and at most kPartsPerThread per thread;
// one part when threading would not pay.
RowSplit SplitRows(const WeightMatrix& w, int64_t n_tokens, int threads, int64_t target,
                   int64_t min_parts) {
  int64_t parts = 1;
  if (threads > 1 && w.rows * w.cols * n_tokens >= kMinParallelMacs) {
    parts = (Work(w, n_tokens) + target / 2) / target;
    parts = std::min<int64_t>(std::max(parts, min_parts), int64_t{threads} * kPartsPerThread);
    parts = std::min<int64_t>(parts, (w.rows + kMinRowsPerPart - 1) / kMinRowsPerPart);
    parts = std::max<int64_t>(parts, 1);
  }
  int64_t per_part = (w.rows + parts - 1) / parts;
  per_part = (per_part + kMinRowsPerPart - 1) / kMinRowsPerPart * kMinRowsPerPart;
  return {parts, per_part};
}

// SplitRows for a product that runs alone.
RowSplit SplitAlone(const WeightMatrix& w, int64_t n_tokens, int threads) {
  return SplitRows(w, n_tokens, threads, PartTarget(Work(w, n_tokens), threads), threads);
}

}  // namespace

InputRowFormat InputRowFormatFor(const WeightMatrix& w, NumericPath path) {
  InputRowFormat f;
  if (path != NumericPath::kFast || Active().quant_tile[internal::Slot(w.type)] == nullptr) {
    return f;
  }
  const internal::ActivationFormat format = internal::ActivationFormatFor(w.type);
  f.format = static_cast<int>(format);
  f.cols = w.cols;
  f.row_bytes = internal::MakeActivationLayout(format, w.cols).row_bytes;
  return f;
}

void QuantizeInputRows(const InputRowFormat& f, const float* x, int64_t x_stride, int64_t n,
                       uint8_t* out, ThreadPool* pool) {
  const QuantInput in{
      internal::MakeActivationLayout(static_cast<internal::ActivationFormat>(f.format), f.cols), x,
      x_stride, n, out};
  QuantizeInputs(1, [&](int64_t) { return in; }, pool, nullptr);
}

void MatMulSharedInput(const MatMulOutput* outputs, int count, const float* x, int64_t n_tokens,
                       NumericPath path, ThreadPool* pool, MatMulScratch* scratch) {
  if (n_tokens <= 0 || count <= 0) return;
  const KernelSet* kernels = &Active();
  // The shared pass needs every matrix on the quantized path with the same
  // activation format; anything else runs matrix by matrix.
  bool shared = path == NumericPath::kFast && count <= kMaxSharedInputs;
  for (int i = 0; shared && i < count; ++i) {
    const WeightMatrix& w = *outputs[i].w;
    shared =
        kernels->quant_tile[internal::Slot(w.type)] != nullptr && w.cols == outputs[0].w->cols &&
        internal::ActivationFormatFor(w.type) == internal::ActivationFormatFor(outputs[0].w->type);
  }
  if (!shared) {
    for (int i = 0; i < count; ++i) {
      MatMul(*outputs[i].w, x, n_tokens, outputs[i].y, outputs[i].y_stride, path, pool, scratch);
    }
    return;
  }
  const WeightMatrix& w0 = *outputs[0].w;
  const ActivationLayout layout =
      internal::MakeActivationLayout(internal::ActivationFormatFor(w0.type), w0.cols);
  const size_t need = static_cast<size_t>(n_tokens) * layout.row_bytes + 64;
  if (scratch->activations.size() < need) scratch->activations.resize(need);
  uint8_t* base = Align64(scratch->activations.data());
  const QuantInput in{layout, x, w0.cols, n_tokens, base};
  QuantizeInputs(1, [&](int64_t) { return in; }, pool, nullptr);

  // One job over the row ranges of every matrix, so the threads hand off once.
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  Job jobs[kMaxSharedInputs];
  RowSplit splits[kMaxSharedInputs];
  int64_t first_part[kMaxSharedInputs + 1];
  first_part[0] = 0;
  for (int i = 0; i < count; ++i) {
    const WeightMatrix& w = *outputs[i].w;
    jobs[i] = Job{kernels,
                  &w,
                  x,
                  n_tokens,
                  outputs[i].y,
                  outputs[i].y_stride,
                  kernels->quant_tile[internal::Slot(w.type)],
                  layout,
                  base};
  }
  // The matrices share the job: parts sized by its total work, one at least
  // per matrix when there are enough of them to keep every thread busy.
  int64_t total_work = 0;
  for (int i = 0; i < count; ++i) total_work += Work(*outputs[i].w, n_tokens);
  const int64_t target = PartTarget(total_work, threads);
  const int64_t min_parts = count >= threads ? 1 : threads;
  for (int i = 0; i < count; ++i) {
    splits[i] = SplitRows(*outputs[i].w, n_tokens, threads, target, min_parts);
    first_part[i + 1] = first_part[i] + (outputs[i].w->rows > 0 ? splits[i].parts : 0);
  }
  auto body = [&](int64_t p_begin, int64_t p_end) {
    int i = 0;
    for (int64_t p = p_begin; p < p_end; ++p) {
      while (p >= first_part[i + 1]) ++i;
      const int64_t rows = jobs[i].w->rows;
      const int64_t r0 = std::min(rows, (p - first_part[i]) * splits[i].per_part);
      const int64_t r1 = std::min(rows, r0 + splits[i].per_part);
      if (r0 < r1) RunQuantRows(jobs[i], r0, r1);
    }
  };
  const int64_t parts = first_part[count];
  if (parts <= 1 || pool == nullptr) {
    body(0, parts);
  } else {
    pool->ParallelForChunks(parts, 1, body);
  }
}

void MatMulGroup(const MatMulProblem* problems, int64_t count, NumericPath path, ThreadPool* pool,
                 MatMulScratch* scratch) {
  if (count <= 0) return;
  const KernelSet* kernels = &Active();
  bool grouped = path == NumericPath::kFast;
  for (int64_t i = 0; grouped && i < count; ++i) {
    grouped = kernels->quant_tile[internal::Slot(problems[i].w->type)] != nullptr;
  }
  if (!grouped) {
    for (int64_t i = 0; i < count; ++i) {
      const MatMulProblem& p = problems[i];
      if (p.x_quantized != nullptr) {
        MatMulGroup(&p, 1, path, pool, scratch);  // its own type has a quantized tile
      } else {
        MatMul(*p.w, p.x, p.n_tokens, p.y, p.y_stride, path, pool, scratch);
      }
    }
    return;
  }
  // group[i]: byte offset of product i's quantized rows (shared with the
  // product before when both read the same x the same way, as gate and up
  // do); group[count + i]: its first part, with one past the end;
  // group[2 * count + 1 + i]: its rows per part.
  std::vector<int64_t>& group = scratch->group;
  group.resize(3 * count + 1);
  int64_t* act_start = group.data();
  int64_t* first_part = group.data() + count;
  int64_t* per_part = group.data() + 2 * count + 1;
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  auto empty = [&](int64_t i) { return problems[i].n_tokens <= 0 || problems[i].w->rows <= 0; };
  // Parts sized by the job's total work, as in MatMulSharedInput.
  int64_t total_work = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!empty(i)) total_work += Work(*problems[i].w, problems[i].n_tokens);
  }
  const int64_t target = PartTarget(total_work, threads);
  const int64_t min_parts = count >= threads ? 1 : threads;
  auto shares_previous = [&](int64_t i) {
    if (i == 0 || empty(i - 1)) return false;
    const MatMulProblem& p = problems[i];
    const MatMulProblem& q = problems[i - 1];
    if (p.x_quantized != nullptr || q.x_quantized != nullptr) return false;
    return p.x == q.x && p.n_tokens == q.n_tokens && p.w->cols == q.w->cols &&
           internal::ActivationFormatFor(p.w->type) == internal::ActivationFormatFor(q.w->type);
  };
  // Rows quantized by the caller take no room here.
  auto quantized_here = [&](int64_t i) { return problems[i].x_quantized == nullptr; };
  int64_t act_bytes = 0;
  first_part[0] = 0;
  for (int64_t i = 0; i < count; ++i) {
    const MatMulProblem& p = problems[i];
    const RowSplit split =
        empty(i) ? RowSplit{0, 0} : SplitRows(*p.w, p.n_tokens, threads, target, min_parts);
    first_part[i + 1] = first_part[i] + split.parts;
    per_part[i] = split.per_part;
    const internal::ActivationFormat format = internal::ActivationFormatFor(p.w->type);
    if (shares_previous(i)) {
      act_start[i] = act_start[i - 1];
      continue;
    }
    act_start[i] = act_bytes;
    if (!empty(i) && quantized_here(i)) {
      act_bytes += p.n_tokens * static_cast<int64_t>(
                                    internal::MakeActivationLayout(format, p.w->cols).row_bytes);
    }
  }
  const size_t need = static_cast<size_t>(act_bytes) + 64;
  if (scratch->activations.size() < need) scratch->activations.resize(need);
  uint8_t* base = Align64(scratch->activations.data());
  // Each token's row is quantized on its own, as in MatMul: the inputs not
  // shared with the product before, all their rows as one job.
  std::vector<int64_t>& inputs = scratch->inputs;
  inputs.clear();
  for (int64_t i = 0; i < count; ++i) {
    if (!empty(i) && !shares_previous(i) && quantized_here(i)) inputs.push_back(i);
  }
  QuantizeInputs(
      static_cast<int64_t>(inputs.size()),
      [&](int64_t k) {
        const MatMulProblem& p = problems[inputs[k]];
        return QuantInput{
            internal::MakeActivationLayout(internal::ActivationFormatFor(p.w->type), p.w->cols),
            p.x, p.w->cols, p.n_tokens, base + act_start[inputs[k]]};
      },
      pool, &scratch->first_row);
  auto body = [&](int64_t p_begin, int64_t p_end) {
    for (int64_t part = p_begin; part < p_end; ++part) {
      // The product whose parts hold `part`.
      const int64_t i = std::upper_bound(first_part, first_part + count + 1, part) - first_part - 1;
      const MatMulProblem& p = problems[i];
      const WeightMatrix& w = *p.w;
      const int64_t r0 = std::min(w.rows, (part - first_part[i]) * per_part[i]);
      const int64_t r1 = std::min(w.rows, r0 + per_part[i]);
      if (r0 >= r1) continue;
      Job job{kernels,
              &w,
              p.x,
              p.n_tokens,
              p.y,
              p.y_stride,
              kernels->quant_tile[internal::Slot(w.type)],
              internal::MakeActivationLayout(internal::ActivationFormatFor(w.type), w.cols),
              p.x_quantized != nullptr ? p.x_quantized : base + act_start[i]};
      RunQuantRows(job, r0, r1);
    }
  };
  const int64_t parts = first_part[count];
  if (parts <= 1 || pool == nullptr) {
    body(0, parts);
  } else {
    pool->ParallelForChunks(parts, 1, body);
  }
}

void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t y_stride,
            NumericPath path, ThreadPool* pool, MatMulScratch* scratch) {
  if (n_tokens <= 0 || w.rows <= 0) return;
  Job job{};
  job.kernels = &Active();
  job.w = &w;
  job.x = x;
  job.n_tokens = n_tokens;
  job.y = y;
  job.y_stride = y_stride;
  job.quant_tile =
      path == NumericPath::kFast ? job.kernels->quant_tile[internal::Slot(w.type)] : nullptr;

  if (job.quant_tile != nullptr) {
    // Each token's row is quantized on its own, before the rows are split, so
    // the quantized activations do not depend on the batch or the threads.
    job.layout = internal::MakeActivationLayout(internal::ActivationFormatFor(w.type), w.cols);
    const size_t need = static_cast<size_t>(n_tokens) * job.layout.row_bytes + 64;
    if (scratch->activations.size() < need) scratch->activations.resize(need);
    uint8_t* base = Align64(scratch->activations.data());
    const QuantInput in{job.layout, x, w.cols, n_tokens, base};
    QuantizeInputs(1, [&](int64_t) { return in; }, pool, nullptr);
    job.act = base;
  }

  // Contiguous row ranges, a few per thread, claimed by whichever thread is
  // free; the split does not change any output, since every (token, row)
  // result is computed the same way.
  const RowSplit split = SplitAlone(w, n_tokens, pool != nullptr ? pool->num_threads() : 1);
  const int64_t parts = split.parts;
  const int64_t per_part = split.per_part;

  const bool float_buffers = job.quant_tile == nullptr && w.type != TensorType::kF32;
  if (float_buffers) {
    const size_t floats =
        static_cast<size_t>(RowBlock(static_cast<uint64_t>(w.cols) * sizeof(float)) * w.cols);
    if (scratch->rows.size() < static_cast<size_t>(parts)) scratch->rows.resize(parts);
    for (int64_t p = 0; p < parts; ++p) {
      if (scratch->rows[p].size() < floats) scratch->rows[p].resize(floats);
    }
  }

  auto body = [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t r0 = std::min(w.rows, p * per_part);
      const int64_t r1 = std::min(w.rows, r0 + per_part);
      if (r0 >= r1) continue;
      if (job.quant_tile != nullptr) {
        RunQuantRows(job, r0, r1);
      } else {
        RunFloatRows(job, r0, r1, float_buffers ? scratch->rows[p].data() : nullptr);
      }
    }
  };
  if (parts == 1 || pool == nullptr) {
    body(0, parts);
  } else {
    pool->ParallelForChunks(parts, 1, body);
  }
}

}  // namespace colibri::ops
