// Prompt lookup: guesses that the sequence goes on as it did after the most
// recent earlier occurrence of its last n tokens. Tries n = max_ngram down to
// 1 and takes the longest suffix that occurred before. Strong where the
// output copies its input: code edits, quotes, structured output, repeats.
//
// Each n-gram is indexed once, when the token after it arrives, so Accept is
// O(max_ngram) per token and Propose O(max_ngram + max_tokens), whatever the
// length of the sequence.
//
// Thread-safety: none (see Drafter).
#ifndef COLIBRI_MODEL_SPECULATIVE_NGRAM_DRAFTER_H_
#define COLIBRI_MODEL_SPECULATIVE_NGRAM_DRAFTER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/speculative/drafter.h"

namespace colibri::speculative {

class NgramDrafter : public Drafter {
 public:
  // Longest n-gram matched.
  static constexpr int kMaxNgram = 3;

  NgramDrafter() = default;
  NgramDrafter(const NgramDrafter&) = delete;
  NgramDrafter& operator=(const NgramDrafter&) = delete;

  void Accept(absl::Span<const int32_t> tokens) override;
  void Propose(int max_tokens, std::vector<int32_t>* draft) override;

 private:
  // The n-gram of tokens_ ending just before index `end` (n <= end), padded.
  std::array<int32_t, kMaxNgram> Key(size_t end, int n) const;

  std::vector<int32_t> tokens_;
  // [n - 1]: n-gram -> index of the token that followed its most recent
  // occurrence (so always < tokens_.size()).
  std::array<absl::flat_hash_map<std::array<int32_t, kMaxNgram>, size_t>, kMaxNgram> next_;
};

}  // namespace colibri::speculative

#endif  // COLIBRI_MODEL_SPECULATIVE_NGRAM_DRAFTER_H_
