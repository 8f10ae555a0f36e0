#include "model/moe/router.h"

#include <cmath>

namespace colibri::moe {

void SelectExperts(const float* logits, int64_t n_tokens, int n_expert, int k, bool normalize,
                   int32_t* experts, float* weights) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* l = logits + t * n_expert;
    int32_t* e = experts + t * k;
    float* w = weights + t * k;
    float max = l[0];
    for (int i = 1; i < n_expert; ++i) max = std::fmax(max, l[i]);
    double sum = 0.0;
    for (int i = 0; i < n_expert; ++i) sum += std::exp(static_cast<double>(l[i] - max));
    // Selection by insertion into a sorted top-k list; k is small (<= 16 typically).
    int filled = 0;
    for (int i = 0; i < n_expert; ++i) {
      const float v = l[i];
      if (filled == k && !(v > l[e[k - 1]])) continue;
      int pos = filled < k ? filled++ : k - 1;
      while (pos > 0 && v > l[e[pos - 1]]) {
        e[pos] = e[pos - 1];
        --pos;
      }
      e[pos] = i;
    }
    double selected = 0.0;
    for (int r = 0; r < k; ++r) {
      const double p = std::exp(static_cast<double>(l[e[r]] - max)) / sum;
      w[r] = static_cast<float>(p);
      selected += p;
    }
    if (normalize) {
      for (int r = 0; r < k; ++r) w[r] = static_cast<float>(w[r] / selected);
    }
  }
}

}  // namespace colibri::moe
