// Reuse of a piece's tokens within one Encode call.
//
// Text repeats (words, SentencePiece segments): each distinct piece is merged
// once per call, and later occurrences copy its ids from where they were first
// written in the output. The cache borrows the pieces (string_views into the
// text being encoded), so it must not outlive that call.
#ifndef COLIBRI_MODEL_TOKENIZER_PIECE_CACHE_H_
#define COLIBRI_MODEL_TOKENIZER_PIECE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace colibri::tokenizer {

class PieceCache {
 public:
  // Appends the ids of `piece` to *out: copied when the piece was seen before,
  // else produced by encode(piece, out) and remembered.
  template <typename EncodeFn>
  void Encode(absl::string_view piece, std::vector<int32_t>* out, EncodeFn&& encode) {
    auto [it, inserted] = seen_.try_emplace(piece);
    if (!inserted) {
      const auto [begin, end] = it->second;
      for (size_t i = begin; i < end; ++i) out->push_back((*out)[i]);
      return;
    }
    const size_t begin = out->size();
    encode(piece, out);
    it->second = {begin, out->size()};
  }

 private:
  absl::flat_hash_map<absl::string_view, std::pair<size_t, size_t>> seen_;  // -> [begin, end)
};

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_PIECE_CACHE_H_
