#include "model/moe/router.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

namespace {

// Inserts candidate i (score v) into the descending list e[0..*filled) of at
// most k entries; ties keep the earlier (lower) id first.
inline void InsertTop(const float* score, int i, int k, int32_t* e, int* filled) {
  const float v = score[i];
  if (*filled == k && !(v > score[e[k - 1]])) return;
  int pos = *filled < k ? (*filled)++ : k - 1;
  while (pos > 0 && v > score[e[pos - 1]]) {
    e[pos] = e[pos - 1];
    --pos;
  }
  e[pos] = i;
}

}  // namespace

void RouteExperts(const float* logits, int64_t n_tokens, int n_expert, int k,
                  const RoutingOptions& o, float* scratch, int32_t* experts, float* weights) {
  if (o.plain()) {
    SelectExperts(logits, n_tokens, n_expert, k, o.normalize, experts, weights);
    return;
  }
  float* p = scratch;               // [n_expert] gating probabilities
  float* sel = scratch + n_expert;  // [n_expert] selection scores
  float* group = sel + n_expert;    // [n_groups] group scores
  const int n_groups = o.n_groups > 1 ? o.n_groups : 1;
  const int group_size = n_expert / n_groups;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* l = logits + t * n_expert;
    int32_t* e = experts + t * k;
    float* w = weights + t * k;
    if (o.logit_bias != nullptr) {
      for (int i = 0; i < n_expert; ++i) group[i] = l[i] + o.logit_bias[i];
      l = group;  // the group scores are not needed before l is consumed below
    }
    if (o.softmax_topk) {
      int filled = 0;
      for (int i = 0; i < n_expert; ++i) InsertTop(l, i, k, e, &filled);
      float sum = 0.0f;
      for (int r = 0; r < k; ++r) {
        w[r] = std::exp(l[e[r]] - l[e[0]]);
        sum += w[r];
      }
      for (int r = 0; r < k; ++r) w[r] /= sum;
      continue;
    }
    if (o.sigmoid) {
      for (int i = 0; i < n_expert; ++i) p[i] = 1.0f / (1.0f + std::exp(-l[i]));
    } else {
      float max = l[0];
      for (int i = 1; i < n_expert; ++i) max = std::fmax(max, l[i]);
      double sum = 0.0;
      for (int i = 0; i < n_expert; ++i) sum += std::exp(static_cast<double>(l[i] - max));
      for (int i = 0; i < n_expert; ++i) {
        p[i] = static_cast<float>(std::exp(static_cast<double>(l[i] - max)) / sum);
      }
    }
    for (int i = 0; i < n_expert; ++i) {
      sel[i] = o.selection_bias != nullptr ? p[i] + o.selection_bias[i] : p[i];
    }
    if (n_groups > 1) {
      for (int g = 0; g < n_groups; ++g) {
        const float* s = sel + g * group_size;
        float best = -std::numeric_limits<float>::infinity();
        float second = best;
        for (int j = 0; j < group_size; ++j) {
          if (s[j] > best) {
            second = best;
            best = s[j];
          } else if (s[j] > second) {
            second = s[j];
          }
        }
        group[g] = group_size > 1 ? best + second : best;
      }
      // Keep the n_groups_used best groups: a group is dropped when at least
      // that many groups beat it (higher score, or equal with a lower index).
      for (int g = 0; g < n_groups; ++g) {
        int better = 0;
        for (int h = 0; h < n_groups; ++h) {
          if (group[h] > group[g] || (group[h] == group[g] && h < g)) ++better;
        }
        if (better >= o.n_groups_used) {
          std::fill(sel + g * group_size, sel + (g + 1) * group_size,
                    -std::numeric_limits<float>::infinity());
        }
      }
    }
    int filled = 0;
    for (int i = 0; i < n_expert; ++i) InsertTop(sel, i, k, e, &filled);
    float sum = 0.0f;
    for (int r = 0; r < k; ++r) {
      w[r] = p[e[r]];
      sum += w[r];
    }
    if (o.normalize) {
      const float denom = std::fmax(sum, 6.103515625e-5f);
      for (int r = 0; r < k; ++r) w[r] /= denom;
    }
    if (o.scale != 0.0f && o.scale != 1.0f) {
      for (int r = 0; r < k; ++r) w[r] *= o.scale;
    }
  }
}

}  // namespace colibri::moe
