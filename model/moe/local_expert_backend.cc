#include "model/moe/local_expert_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

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

  if (batch.n_tokens <= kFusedMaxTokens) return RunFused(batch, lookup, owned, out);

  for (int e = 0; e < n_expert_; ++e) {
    const int64_t begin = expert_begin_[e];
    const int64_t m = expert_begin_[e + 1] - begin;
    if (m == 0 || (owned && !owned(e))) continue;
    const int64_t* routes = sorted_routes_.data() + begin;
    COLIBRI_ASSIGN_OR_RETURN(ExpertWeights w, lookup(batch.layer, e));
    if (w.n_embd() != n_embd) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", batch.layer, " expert ", e,
                                                     ": width ", w.n_embd(), " != ", n_embd));
    }
    if (gathered_in_.size() < static_cast<size_t>(m * n_embd)) {
      gathered_in_.resize(m * n_embd);
      gathered_out_.resize(m * n_embd);
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = routes[i] / batch.k;
      std::memcpy(gathered_in_.data() + i * n_embd, batch.x + t * n_embd, n_embd * sizeof(float));
    }
    ExpertFfn(w, gathered_in_.data(), m, gathered_out_.data(), path_, pool_, &scratch_);
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(out + routes[i] * n_embd, gathered_out_.data() + i * n_embd,
                  n_embd * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status ExpertGroupRunner::RunFused(const ExpertBatch& batch, const ExpertLookup& lookup,
                                         const std::function<bool(int)>& owned, float* out) {
  const int64_t n_embd = batch.n_embd;
  // The experts to run, their weights, and where their rows start: route rows
  // in gathered_in_/gathered_out_ (the sorted route index), hidden rows in
  // scratch_.gate/up (ff_begin_).
  fused_experts_.clear();
  fused_weights_.clear();
  ff_begin_.clear();
  int64_t ff_total = 0;
  for (int e = 0; e < n_expert_; ++e) {
    const int64_t m = expert_begin_[e + 1] - expert_begin_[e];
    if (m == 0 || (owned && !owned(e))) continue;
    COLIBRI_ASSIGN_OR_RETURN(ExpertWeights w, lookup(batch.layer, e));
    if (w.n_embd() != n_embd || w.down.rows != n_embd || w.down.cols != w.n_ff()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", batch.layer, " expert ", e,
                                                     ": width ", w.n_embd(), " != ", n_embd));
    }
    fused_experts_.push_back(e);
    fused_weights_.push_back(w);
    ff_begin_.push_back(ff_total);
    ff_total += m * w.n_ff();
  }
  if (fused_experts_.empty()) return absl::OkStatus();
  const int64_t n_routes = expert_begin_[n_expert_];
  if (gathered_in_.size() < static_cast<size_t>(n_routes * n_embd)) {
    gathered_in_.resize(n_routes * n_embd);
    gathered_out_.resize(n_routes * n_embd);
  }
  if (scratch_.gate.size() < static_cast<size_t>(ff_total)) {
    scratch_.gate.resize(ff_total);
    scratch_.up.resize(ff_total);
  }
  // Each expert's input rows: one token row may be read by several experts;
  // the copies keep every expert's x contiguous, as ExpertFfn gets it.
  for (int e : fused_experts_) {
    for (int64_t j = expert_begin_[e]; j < expert_begin_[e + 1]; ++j) {
      const int64_t t = sorted_routes_[j] / batch.k;
      std::memcpy(gathered_in_.data() + j * n_embd, batch.x + t * n_embd, n_embd * sizeof(float));
    }
  }

  // Gate and up of every expert: one parallel job.
  const size_t count = fused_experts_.size();
  tasks_.clear();
  for (size_t i = 0; i < count; ++i) {
    const int e = fused_experts_[i];
    const ExpertWeights& w = fused_weights_[i];
    const int64_t m = expert_begin_[e + 1] - expert_begin_[e];
    const float* x = gathered_in_.data() + expert_begin_[e] * n_embd;
    tasks_.push_back({&w.gate, x, m, scratch_.gate.data() + ff_begin_[i], w.n_ff()});
    tasks_.push_back({&w.up, x, m, scratch_.up.data() + ff_begin_[i], w.n_ff()});
  }
  ops::MatMulMany(tasks_.data(), static_cast<int>(tasks_.size()), path_, pool_, &scratch_.matmul);

  // The activation on this thread (a few thousand values), then every down.
  tasks_.clear();
  for (size_t i = 0; i < count; ++i) {
    const int e = fused_experts_[i];
    const ExpertWeights& w = fused_weights_[i];
    const int64_t m = expert_begin_[e + 1] - expert_begin_[e];
    float* gate = scratch_.gate.data() + ff_begin_[i];
    ExpertActivation(w, m, gate, scratch_.up.data() + ff_begin_[i]);
    tasks_.push_back({&w.down, gate, m, gathered_out_.data() + expert_begin_[e] * n_embd, n_embd});
  }
  ops::MatMulMany(tasks_.data(), static_cast<int>(tasks_.size()), path_, pool_, &scratch_.matmul);

  for (size_t i = 0; i < count; ++i) {
    const int e = fused_experts_[i];
    const int64_t m = expert_begin_[e + 1] - expert_begin_[e];
    float* rows = gathered_out_.data() + expert_begin_[e] * n_embd;
    ExpertDownBias(fused_weights_[i], m, rows);
    for (int64_t j = 0; j < m; ++j) {
      std::memcpy(out + sorted_routes_[expert_begin_[e] + j] * n_embd, rows + j * n_embd,
                  n_embd * sizeof(float));
    }
  }
  return absl::OkStatus();
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
