// Cutting special tokens out of the input before tokenization, as llama.cpp's
// tokenizer_st_partition: each special token in turn (longest text first) is
// searched for in every piece of raw text left, left to right, and the piece is
// split around each occurrence. With parse_special off, control and unknown
// tokens are not searched for but user-defined tokens still are (as Hugging
// Face's added tokens). LSTRIP / RSTRIP tokens swallow the ASCII whitespace
// next to them.
//
// Thread-safety: immutable after construction; Split may run concurrently.
#ifndef COLIBRI_MODEL_TOKENIZER_SPECIAL_TOKEN_SPLITTER_H_
#define COLIBRI_MODEL_TOKENIZER_SPECIAL_TOKEN_SPLITTER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/tokenizer/vocab.h"

namespace colibri::tokenizer {

// A special token (token >= 0) or the raw text [offset, offset + length).
struct Fragment {
  int32_t token = -1;
  size_t offset = 0;
  size_t length = 0;
};

class SpecialTokenSplitter {
 public:
  // `vocab` must outlive the splitter.
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // The fragments of `text`, in order; no fragment is empty.
  std::vector<Fragment> Split(absl::string_view text, bool parse_special) const;

 private:
  // A byte trie over the candidates' texts, used to find in one pass which
  // candidates occur in the text at all.
  struct Node {
    int32_t candidate = -1;                         // index into candidates, or -1
    std::vector<std::pair<uint8_t, int32_t>> next;  // byte -> node
  };
  struct Candidates {
    std::vector<int32_t> tokens;      // in search order
    std::vector<Node> nodes;          // nodes[0] is the root
    std::array<int32_t, 256> root{};  // first byte -> node, or -1
  };
  static void Insert(Candidates& c, absl::string_view text, int32_t index);
  std::vector<int32_t> Present(const Candidates& c, absl::string_view text) const;

  const Vocab& vocab_;
  Candidates all_;           // parse_special on
  Candidates user_defined_;  // parse_special off
};

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_SPECIAL_TOKEN_SPLITTER_H_
