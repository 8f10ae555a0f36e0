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
