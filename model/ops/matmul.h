// Matrix products against weights in any supported tensor type.
//
// A weight matrix W is [rows][cols] in GGML order: each of the `rows` rows holds
// `cols` elements encoded in `type` (RowBytes(type, cols) bytes per row).
// MatMul computes Y = X · Wᵀ: for every token t and row r,
//   y[t][r] = Σ_c x[t][c] · w[r][c].
//
// Two numeric paths:
//  - kExact: activations stay float32; weights are dequantized to float32 and
//    the products accumulate in float32. The reference path.
//  - kFast: activations are quantized the way llama.cpp does for the weight
//    type (Q8_0 blocks for Q4_0/Q5_0/Q8_0/MXFP4/IQ4_NL, Q8_1 for Q4_1/Q5_1,
//    Q8_K for the K-quants and the other i-quants; F32/F16/BF16 weights keep
//    float32 activations), then integer dot products run on SIMD.
//
// Batch invariance: y[t][·] depends only on x[t][·], W and the path: never on
// which other tokens are in the batch, on n_tokens, or on the thread count. The
// distributed engine relies on this to give bitwise identical results whether
// an expert runs locally or on a node.
//
// Kernels are chosen at run time (AVX-512 VNNI, else AVX2+FMA where available,
// else portable C++); a CPU cap (ConfigureKernelChoice, common/cpu_features.h)
// caps the choice.
#ifndef COLIBRI_MODEL_OPS_MATMUL_H_
#define COLIBRI_MODEL_OPS_MATMUL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/cpu_features.h"
#include "common/thread_pool.h"
#include "model/ops/tensor_type.h"
#include "model/ops/weight_layout.h"

namespace colibri::ops {

enum class NumericPath { kExact, kFast };

struct WeightMatrix {
  TensorType type = TensorType::kF32;
  const uint8_t* data = nullptr;  // rows * row_bytes bytes
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_bytes = 0;  // RowBytes(type, cols)
  // How the rows lie in data (model/ops/weight_layout.h); every layout takes
  // rows * row_bytes bytes.
  WeightLayout layout = WeightLayout::kRows;
};

// Whether MatMul on the kernel set in use runs faster over w's rows in the
// interleaved layout: w is in GGUF order, its type has the layout, the set
// has tiles for it and w has a full group of rows. Weights meant to stay in
// RAM for many products (the resident weights of a model, the RAM tier of an
// expert node) are worth interleaving when this holds.
bool PrefersInterleaved(const WeightMatrix& w);

// Writes w's rows * row_bytes bytes to out in the kInterleaved8 layout
// (out must not overlap w.data) and returns the matrix over out. Requires
// HasInterleavedLayout(w.type) and w.layout == kRows.
WeightMatrix InterleaveMatrix(const WeightMatrix& w, uint8_t* out);

// Scratch memory reused across calls (quantized activations, dequantized weight
// tiles), so that the decode loop does not allocate. One per calling thread.
class MatMulScratch {
 public:
  MatMulScratch() = default;
  MatMulScratch(const MatMulScratch&) = delete;
  MatMulScratch& operator=(const MatMulScratch&) = delete;

  std::vector<uint8_t> activations;  // quantized X
  // per-thread float buffers for dequantized weight rows
  std::vector<std::vector<float>> rows;
  // MatMulGroup's per-product offsets
  std::vector<int64_t> group;
  // The products whose inputs MatMulGroup quantizes, and each input's first
  // row in the job that quantizes them.
  std::vector<int64_t> inputs;
  std::vector<int64_t> first_row;
};

// x: [n_tokens][w.cols] float32, row stride w.cols; y: [n_tokens][w.rows], row
// stride y_stride (>= w.rows). pool may be null (single-threaded).
void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t y_stride,
            NumericPath path, ThreadPool* pool, MatMulScratch* scratch);

// One of several products that read the same input X.
struct MatMulOutput {
  const WeightMatrix* w;
  float* y;  // [n_tokens][w->rows], row stride y_stride
  int64_t y_stride;
};
inline constexpr int kMaxSharedInputs = 4;

// For i < count: MatMul(*outputs[i].w, x, n_tokens, outputs[i].y, ...), with
// results bitwise identical to those separate calls. Every w has x's width
// (w->cols). When all of them take the same quantized activations (kFast path,
// count <= kMaxSharedInputs) x is quantized once and the row ranges of all the
// matrices run as one parallel job (one thread hand-off instead of `count`);
// otherwise it makes the separate calls. For gate+up of an FFN, or Q, K and V.
void MatMulSharedInput(const MatMulOutput* outputs, int count, const float* x, int64_t n_tokens,
                       NumericPath path, ThreadPool* pool, MatMulScratch* scratch);

// One product of a group: y = x · wᵀ over its own n_tokens input rows.
struct MatMulProblem {
  const WeightMatrix* w;
  const float* x;  // [n_tokens][w->cols], row stride w->cols
  int64_t n_tokens;
  float* y;  // [n_tokens][w->rows], row stride y_stride (>= w->rows)
  int64_t y_stride;
  // Optional: the rows of x already quantized by QuantizeInputRows in
  // InputRowFormat(*w, path) (row stride row_bytes); x is then not read.
  const uint8_t* x_quantized = nullptr;
};

// The form MatMul puts an input row in for w on `path`: row_bytes > 0 when
// it quantizes rows (the kFast path with a quantized kernel for w's type on
// the kernel set in use), 0 when it multiplies float rows. Two matrices with
// equal formats take the same quantized rows.
struct InputRowFormat {
  int format = 0;  // internal::ActivationFormat
  int64_t cols = 0;
  uint64_t row_bytes = 0;  // a multiple of 64
  bool operator==(const InputRowFormat& o) const {
    return format == o.format && cols == o.cols && row_bytes == o.row_bytes;
  }
};
InputRowFormat InputRowFormatFor(const WeightMatrix& w, NumericPath path);

// Quantizes n rows of f.cols floats (row t at x + t * x_stride) into
// out + t * f.row_bytes (out 64-byte aligned) exactly as MatMul would, over
// the pool when the rows are many. Requires f.row_bytes > 0. For rows that
// several products read in several combinations (an MoE layer's tokens,
// gathered per expert): quantize each once, then copy the bytes.
void QuantizeInputRows(const InputRowFormat& f, const float* x, int64_t x_stride, int64_t n,
                       uint8_t* out, ThreadPool* pool);

// For i < count: MatMul(*p[i].w, p[i].x, p[i].n_tokens, p[i].y, p[i].y_stride,
// path, ...), with results bitwise identical to those separate calls (y
// buffers must not overlap each other or any x). On the kFast path with
// quantized weights, every input is quantized once and the row ranges of all
// the products run as one parallel job: one thread hand-off for, e.g., the
// gate and up matrices of every expert of a layer rather than one per expert.
// Otherwise (kExact, float weights) it makes the separate calls.
void MatMulGroup(const MatMulProblem* problems, int64_t count, NumericPath path, ThreadPool* pool,
                 MatMulScratch* scratch);

// Process-wide settings of MatMul's kernel choice; programs fill them from
// the environment in main (common/process_knobs.h).
struct KernelChoiceOptions {
  // Caps the CPU features the kernels may use (SetCpuCap); any cap but kNone
  // also skips the calibration: MatMul uses the best set the cap allows.
  // Default: CpuCap::kNone.
  CpuCap cpu_cap = CpuCap::kNone;
  // Where the calibration keeps its choice per CPU model
  // (model/ops/kernel_calibration.h); "": it measures in every process.
  // Default: "".
  std::string cache_dir;
};

// Applies `options`. Call it from main before the first MatMul or
// GetCpuFeatures (the choice is made once, on first use); later it returns
// FailedPrecondition and changes nothing. Thread-safe.
absl::Status ConfigureKernelChoice(const KernelChoiceOptions& options);

// The kernel sets MatMul can run. kAuto (the default) picks the set that
// measures fastest on this CPU model (model/ops/kernel_calibration.h); under a
// CPU cap (ConfigureKernelChoice), the best set it allows. All sets give
// bitwise identical results (the canonical order of model/ops/vec_dot.h), so
// the choice only affects speed.
enum class KernelSetChoice { kAuto, kPortable, kAvx2, kAvx512, kNeon, kNeonDotprod };
// Every set but kAuto, for tests and benchmarks that go through them all (a
// build or CPU runs only some: ForceKernelSetForTesting says which).
inline constexpr KernelSetChoice kEveryKernelSet[] = {
    KernelSetChoice::kPortable, KernelSetChoice::kAvx2, KernelSetChoice::kAvx512,
    KernelSetChoice::kNeon, KernelSetChoice::kNeonDotprod};

// For tests and benchmarks: makes MatMul use `choice` from now on, process-wide.
// Returns false, changing nothing, when this build or CPU cannot run it. Must
// not race with MatMul calls.
bool ForceKernelSetForTesting(KernelSetChoice choice);

// Name of the kernel set MatMul uses now: "avx512", "avx2", "neon-dotprod",
// "neon" or "portable".
const char* ActiveKernelSetName();

// Reference implementation of MatMul with plain loops (no SIMD, no threads),
// matching MatMul's arithmetic for the chosen path up to float rounding order.
// Tests compare the fast kernels against it. In this implementation the match is
// exact: the reference follows the same canonical order, written independently
// (per-element decoding instead of per-block unpacking).
void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                     int64_t y_stride, NumericPath path);

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_MATMUL_H_
