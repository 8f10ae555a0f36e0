#include "model/speculative/ngram_drafter.h"

#include <algorithm>

namespace colibri::speculative {

std::array<int32_t, NgramDrafter::kMaxNgram> NgramDrafter::Key(size_t end, int n) const {
  std::array<int32_t, kMaxNgram> key;
  key.fill(-1);
  std::copy(tokens_.begin() + static_cast<ptrdiff_t>(end - n),
            tokens_.begin() + static_cast<ptrdiff_t>(end), key.begin());
  return key;
}

void NgramDrafter::Accept(absl::Span<const int32_t> tokens) {
  for (int32_t token : tokens) {
    // The n-grams ending at the last token now have a follower: index them.
    // The suffix itself is indexed only once it is followed, so a lookup of
    // the current suffix finds an earlier occurrence.
    const size_t end = tokens_.size();
    for (int n = 1; n <= kMaxNgram && static_cast<size_t>(n) <= end; ++n) {
      next_[n - 1][Key(end, n)] = end;
    }
    tokens_.push_back(token);
  }
}

void NgramDrafter::Propose(int max_tokens, std::vector<int32_t>* draft) {
  draft->clear();
  if (max_tokens <= 0) return;
  const size_t end = tokens_.size();
  for (int n = static_cast<int>(std::min<size_t>(kMaxNgram, end)); n >= 1; --n) {
    const auto it = next_[n - 1].find(Key(end, n));
    if (it == next_[n - 1].end()) continue;
    const size_t from = it->second;
    const size_t count = std::min(static_cast<size_t>(max_tokens), end - from);
    draft->assign(tokens_.begin() + static_cast<ptrdiff_t>(from),
                  tokens_.begin() + static_cast<ptrdiff_t>(from + count));
    return;
  }
}

}  // namespace colibri::speculative
