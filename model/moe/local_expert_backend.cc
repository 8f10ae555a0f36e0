#include "model/moe/local_expert_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::moe {

ExpertGroupRunner::ExpertGroupRunner(int n_expert, ops::NumericPath path, ThreadPool* pool)
    : n_expert_(n_expert), path_(path), pool_(pool), expert_begin_(n_expert + 1) {}

absl::Status ExpertGroupRunner::Run(const ExpertBatch& batch, const ExpertLookup& lookup,
                                    const std::function<bool(int)>& owned, float* out) {
  const int64_t n_embd = batch.n_embd;
  const int64_t n_routes = batch.n_tokens * batch.k;
  std::fill(expert_begin_.begin(), expert_begin_.end(), 0);
  for (int64_t i = 0; i < n_routes; ++i) {
    const int32_t e = batch.experts[i];
    if (e < 0 || e >= n_expert_) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", batch.layer, ": expert id ", e,
                                                     " out of range [0, ", n_expert_, ")"));
    }
    ++expert_begin_[e + 1];
  }
  for (int e = 0; e < n_expert_; ++e) expert_begin_[e + 1] += expert_begin_[e];
  if (sorted_routes_.size() < static_cast<size_t>(n_routes)) sorted_routes_.resize(n_routes);
  // Place routes in ascending (token, rank) order within each expert, using
  // expert_begin_ as insertion cursors, then shift the cursors back to starts.
  for (int64_t i = 0; i < n_routes; ++i) {
    sorted_routes_[expert_begin_[batch.experts[i]]++] = i;
  }
  for (int e = n_expert_; e > 0; --e) expert_begin_[e] = expert_begin_[e - 1];
  expert_begin_[0] = 0;

  // The experts to run, with their weights, looked up before anything runs.
  group_.clear();
  for (int e = 0; e < n_expert_; ++e) {
    const int64_t m = expert_begin_[e + 1] - expert_begin_[e];
    if (m == 0 || (owned && !owned(e))) continue;
    COLIBRI_ASSIGN_OR_RETURN(ExpertWeights w, lookup(batch.layer, e));
    if (w.n_embd() != n_embd || w.down.rows != n_embd || w.up.rows != w.n_ff() ||
        w.down.cols != w.n_ff()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", batch.layer, " expert ", e, ": shapes gate ", w.gate.rows, "x",
                       w.gate.cols, ", up ", w.up.rows, "x", w.up.cols, ", down ", w.down.rows, "x",
                       w.down.cols, " do not fit width ", n_embd));
    }
    group_.push_back(Member{e, w, 0, 0});
  }
  // Experts in runs of at most kMaxRunRoutes routes: each run is two parallel
  // jobs over all its experts (gate and up, then down), which bounds the
  // buffers while keeping thread hand-offs per layer, not per expert.
  // The runs are laid out first so that the buffers grow once per batch.
  runs_.clear();
  int64_t max_routes = 0, max_ff_floats = 0;
  size_t first = 0;
  while (first < group_.size()) {
    size_t last = first;
    int64_t routes = 0, ff_floats = 0;
    do {
      Member& g = group_[last];
      const int64_t m = expert_begin_[g.expert + 1] - expert_begin_[g.expert];
      g.row = routes;
      g.ff_offset = ff_floats;
      routes += m;
      ff_floats += m * g.w.n_ff();
      ++last;
    } while (last < group_.size() && routes < kMaxRunRoutes);
    runs_.push_back({first, last});
    max_routes = std::max(max_routes, routes);
    max_ff_floats = std::max(max_ff_floats, ff_floats);
    first = last;
  }
  // Gate and up of every expert read the batch's token rows: when they all
  // take the same quantized rows, each token is quantized once here and its
  // bytes are copied per route (the rows are those MatMul would make).
  in_format_ = ops::InputRowFormat{};
  if (!group_.empty()) {
    const ops::InputRowFormat f = ops::InputRowFormatFor(group_[0].w.gate, path_);
    bool same = f.row_bytes > 0;
    for (size_t j = 0; same && j < group_.size(); ++j) {
      same = ops::InputRowFormatFor(group_[j].w.gate, path_) == f &&
             ops::InputRowFormatFor(group_[j].w.up, path_) == f;
    }
    if (same) {
      in_format_ = f;
      uint8_t* rows = token_rows_.Reserve(static_cast<size_t>(batch.n_tokens) * f.row_bytes);
      ops::QuantizeInputRows(f, batch.x, n_embd, batch.n_tokens, rows, pool_);
      gathered_q_.Reserve(static_cast<size_t>(max_routes) * f.row_bytes);
    }
  }
  if (in_format_.row_bytes == 0) gathered_in_.Reserve(static_cast<size_t>(max_routes * n_embd));
  gathered_out_.Reserve(static_cast<size_t>(max_routes * n_embd));
  gate_.Reserve(static_cast<size_t>(max_ff_floats));
  up_.Reserve(static_cast<size_t>(max_ff_floats));
  for (const RunSpan& run : runs_) {
    COLIBRI_RETURN_IF_ERROR(RunExperts(batch, run.first, run.last, out));
  }
  return absl::OkStatus();
}

void ExpertGroupRunner::Reserve(int64_t n_tokens, int k, const ExpertWeights& w) {
  // A run holds at most kMaxRunRoutes routes plus its last expert's, at most
  // one per token.
  const int64_t n_routes = n_tokens * k;
  const int64_t routes = std::min(n_routes, kMaxRunRoutes + n_tokens);
  const ops::InputRowFormat f = ops::InputRowFormatFor(w.gate, path_);
  if (f.row_bytes > 0) {
    token_rows_.Touch(static_cast<size_t>(n_tokens) * f.row_bytes);
    gathered_q_.Touch(static_cast<size_t>(routes) * f.row_bytes);
  } else {
    gathered_in_.Touch(static_cast<size_t>(routes * w.n_embd()));
  }
  gathered_out_.Touch(static_cast<size_t>(routes * w.n_embd()));
  gate_.Touch(static_cast<size_t>(routes * w.n_ff()));
  up_.Touch(static_cast<size_t>(routes * w.n_ff()));
  if (sorted_routes_.size() < static_cast<size_t>(n_routes)) sorted_routes_.resize(n_routes);
}

template <typename T>
void ExpertGroupRunner::Scratch<T>::Touch(size_t n) {
  std::memset(static_cast<void*>(Reserve(n)), 0, n * sizeof(T));
}

template <typename T>
T* ExpertGroupRunner::Scratch<T>::Reserve(size_t n) {
  if (n > size_) {
    bytes_.reset();  // the old buffer goes before the new one is mapped
    bytes_.reset(new uint8_t[n * sizeof(T) + 64]);  // default-initialized: not zeroed
    const auto at = reinterpret_cast<uintptr_t>(bytes_.get());
    aligned_ = reinterpret_cast<T*>((at + 63) & ~uintptr_t{63});
    size_ = n;
  }
  return aligned_;
}

absl::Status ExpertGroupRunner::RunExperts(const ExpertBatch& batch, size_t first, size_t last,
                                           float* out) {
  const int64_t n_embd = batch.n_embd;
  const uint64_t q_bytes = in_format_.row_bytes;  // 0: float rows
  for (size_t j = first; j < last; ++j) {
    const Member& g = group_[j];
    const int64_t begin = expert_begin_[g.expert];
    const int64_t m = expert_begin_[g.expert + 1] - begin;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = sorted_routes_[begin + i] / batch.k;
      if (q_bytes > 0) {
        std::memcpy(gathered_q_.data() + (g.row + i) * q_bytes, token_rows_.data() + t * q_bytes,
                    q_bytes);
      } else {
        std::memcpy(gathered_in_.data() + (g.row + i) * n_embd, batch.x + t * n_embd,
                    n_embd * sizeof(float));
      }
    }
  }
  const size_t n = last - first;
  const int threads = pool_ != nullptr ? pool_->num_threads() : 1;
  if (batch.n_tokens <= kFusedMaxTokens && n >= static_cast<size_t>(threads)) {
    RunProductsFused(first, last, n_embd, q_bytes);
  } else {
    RunProductsInTwoJobs(first, last, n_embd, q_bytes);
  }
  for (size_t j = first; j < last; ++j) {
    const Member& g = group_[j];
    const int64_t begin = expert_begin_[g.expert];
    const int64_t m = expert_begin_[g.expert + 1] - begin;
    float* rows = gathered_out_.data() + g.row * n_embd;
    ExpertFfnAddDownBias(g.w, rows, m);
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(out + sorted_routes_[begin + i] * n_embd, rows + i * n_embd,
                  n_embd * sizeof(float));
    }
  }
  return absl::OkStatus();
}

ops::MatMulProblem ExpertGroupRunner::GateOrUpProblem(const Member& g, bool gate, int64_t n_embd,
                                                     uint64_t q_bytes) {
  const int64_t m = expert_begin_[g.expert + 1] - expert_begin_[g.expert];
  ops::MatMulProblem problem{gate ? &g.w.gate : &g.w.up, nullptr, m,
                             (gate ? gate_.data() : up_.data()) + g.ff_offset, g.w.n_ff()};
  if (q_bytes > 0) {
    problem.x_quantized = gathered_q_.data() + g.row * q_bytes;
  } else {
    problem.x = gathered_in_.data() + g.row * n_embd;
  }
  return problem;
}

ops::MatMulProblem ExpertGroupRunner::ActivateForDown(const Member& g, int64_t n_embd) {
  const int64_t m = expert_begin_[g.expert + 1] - expert_begin_[g.expert];
  ExpertFfnActivate(g.w, gate_.data() + g.ff_offset, up_.data() + g.ff_offset, m);
  return {&g.w.down, gate_.data() + g.ff_offset, m, gathered_out_.data() + g.row * n_embd, n_embd};
}

void ExpertGroupRunner::RunProductsInTwoJobs(size_t first, size_t last, int64_t n_embd,
                                             uint64_t q_bytes) {
  // Gate and up of every expert: one job (each expert's x quantized once, or
  // already quantized per token).
  problems_.clear();
  for (size_t j = first; j < last; ++j) {
    problems_.push_back(GateOrUpProblem(group_[j], /*gate=*/true, n_embd, q_bytes));
    problems_.push_back(GateOrUpProblem(group_[j], /*gate=*/false, n_embd, q_bytes));
  }
  ops::MatMulGroup(problems_.data(), static_cast<int64_t>(problems_.size()), path_, pool_,
                   &scratch_.matmul);
  // Down of every expert: the second job.
  problems_.clear();
  for (size_t j = first; j < last; ++j) problems_.push_back(ActivateForDown(group_[j], n_embd));
  ops::MatMulGroup(problems_.data(), static_cast<int64_t>(problems_.size()), path_, pool_,
                   &scratch_.matmul);
}

// One part per product, claimed in order: the gates and ups of every expert,
// then the downs. The part that finishes an expert's second of gate and up
// leaves its counter at zero; that expert's down waits for it (at most the
// length of one product still running on another thread, since every gate
// and up was claimed before any down), then activates and multiplies. With
// the two jobs of RunProductsInTwoJobs each thread waits at the end of both
// for the other's last part, and the workers are woken twice per layer.
// Every product runs whole on one thread; the results are those of the two
// jobs bit for bit (the split of a product never changes its output).
void ExpertGroupRunner::RunProductsFused(size_t first, size_t last, int64_t n_embd,
                                         uint64_t q_bytes) {
  const size_t n = last - first;
  const size_t parts = 3 * n;
  while (part_scratch_.size() < parts)
    part_scratch_.push_back(std::make_unique<ops::MatMulScratch>());
  if (pending_size_ < n) {
    pending_.reset(new std::atomic<int>[n]);
    pending_size_ = n;
  }
  for (size_t k = 0; k < n; ++k) pending_[k].store(2, std::memory_order_relaxed);
  auto body = [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const size_t part = static_cast<size_t>(p);
      ops::MatMulScratch* scratch = part_scratch_[part].get();
      if (part < 2 * n) {
        const ops::MatMulProblem problem =
            GateOrUpProblem(group_[first + part / 2], /*gate=*/part % 2 == 0, n_embd, q_bytes);
        ops::MatMulGroup(&problem, 1, path_, nullptr, scratch);
        pending_[part / 2].fetch_sub(1, std::memory_order_acq_rel);
      } else {
        const size_t k = part - 2 * n;
        for (int spins = 0; pending_[k].load(std::memory_order_acquire) != 0; ++spins) {
          if (spins < 4096) {
            CpuRelax();
          } else {
            std::this_thread::yield();
          }
        }
        const ops::MatMulProblem problem = ActivateForDown(group_[first + k], n_embd);
        ops::MatMulGroup(&problem, 1, path_, nullptr, scratch);
      }
    }
  };
  if (pool_ == nullptr) {
    body(0, static_cast<int64_t>(parts));
  } else {
    pool_->ParallelForChunks(static_cast<int64_t>(parts), 1, body);
  }
}

LocalExpertBackend::LocalExpertBackend(const std::vector<std::vector<ExpertWeights>>* experts,
                                       int n_expert, ops::NumericPath path, ThreadPool* pool)
    : experts_(experts),
      page_size_(static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE))),
      runner_(n_expert, path, pool) {}

void LocalExpertBackend::Submit(const ExpertBatch& batch, float* out) {
  auto lookup = [this](int layer, int expert) -> absl::StatusOr<ExpertWeights> {
    if (layer < 0 || layer >= static_cast<int>(experts_->size())) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " out of range"));
    }
    return (*experts_)[layer][expert];
  };
  pending_ = runner_.Run(batch, lookup, nullptr, out);
}

absl::Status LocalExpertBackend::Wait() {
  absl::Status s = std::move(pending_);
  pending_ = absl::OkStatus();
  return s;
}

void LocalExpertBackend::Reserve(int64_t n_tokens, int k) {
  const ExpertWeights* widest = nullptr;
  for (const std::vector<ExpertWeights>& layer : *experts_) {
    for (const ExpertWeights& w : layer) {
      if (w.gate.data != nullptr && (widest == nullptr || w.n_ff() > widest->n_ff())) widest = &w;
    }
  }
  if (widest != nullptr) runner_.Reserve(n_tokens, k, *widest);
}

void LocalExpertBackend::Prefetch(int layer, absl::Span<const int32_t> experts) {
  if (layer < 0 || layer >= static_cast<int>(experts_->size())) return;
  const std::vector<ExpertWeights>& in_layer = (*experts_)[layer];
  for (int32_t e : experts) {
    if (e < 0 || e >= static_cast<int>(in_layer.size())) continue;
    for (const ops::WeightMatrix* m : {&in_layer[e].gate, &in_layer[e].up, &in_layer[e].down}) {
      if (m->data == nullptr) continue;
      // Advice only, and only for a matrix whose first page is not resident:
      // advising resident pages costs a page-cache walk for nothing.
      const uintptr_t begin = reinterpret_cast<uintptr_t>(m->data) / page_size_ * page_size_;
      const uintptr_t end = reinterpret_cast<uintptr_t>(m->data) + m->rows * m->row_bytes;
      unsigned char resident = 0;
      if (::mincore(reinterpret_cast<void*>(begin), page_size_, &resident) == 0 &&
          (resident & 1) != 0) {
        continue;
      }
      ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
    }
  }
}

}  // namespace colibri::moe
