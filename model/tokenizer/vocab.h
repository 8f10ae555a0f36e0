// A tokenizer vocabulary: the raw GGUF metadata (VocabData) and what llama.cpp
// derives from it when it loads a model (Vocab): token attributes, special ids
// with their per-model defaults, the end-of-generation set, and the special
// tokens matched in text before tokenization.
//
// Thread-safety: a Vocab is immutable after Build; any number of threads may read it.
#ifndef COLIBRI_MODEL_TOKENIZER_VOCAB_H_
#define COLIBRI_MODEL_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/pre_tokenizer.h"

namespace colibri::tokenizer {

// `tokenizer.ggml.token_type` values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// llama.cpp's llama_token_attr bits.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

// The tokenizer metadata of a GGUF file, uninterpreted. Optional fields are
// nullopt when the key is absent.
struct VocabData {
  std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;                   // tokenizer.ggml.pre ("" when absent)
  std::string general_name;          // general.name (a few models get per-token tweaks)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores (empty: all 0)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (empty: all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("a b", rank = index)
  bool has_merges = false;           // the merges key is present

  // tokenizer.ggml.<name>_token_id. Values outside [0, n_tokens) are ignored
  // (the default stays), as llama.cpp does.
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, unk_id, sep_id, pad_id, mask_id;
  std::optional<int64_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

enum class VocabType { kSpm, kBpe };

class Vocab {
 public:
  // Applies llama.cpp's loading rules to `data`. InvalidArgument for an unknown
  // or unsupported model or pre-tokenizer (naming it); DataLoss for inconsistent
  // data (duplicate tokens, short score or type arrays, missing merges, add_bos
  // without a BOS id).
  static absl::StatusOr<Vocab> Build(VocabData data);

  VocabType type() const { return type_; }
  int32_t n_tokens() const { return static_cast<int32_t>(text_.size()); }
  const std::string& text(int32_t id) const { return text_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  uint32_t attr(int32_t id) const { return attrs_[id]; }
  // The id of the token spelled `text`, or -1.
  int32_t Find(absl::string_view text) const;

  // -1 when absent.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }
  int32_t eom_id() const { return eom_id_; }
  int32_t unk_id() const { return unk_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t sep_id() const { return sep_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool clean_spaces() const { return clean_spaces_; }
  bool IsEog(int32_t id) const { return eog_ids_.contains(id); }
  const absl::flat_hash_set<int32_t>& eog_ids() const { return eog_ids_; }

  // BPE only.
  const std::vector<std::string>& merges() const { return merges_; }
  const PreTokenizerSpec& pre_tokenizer() const { return pre_; }

  // Control, user-defined and unknown tokens, longest text first: the order in
  // which llama.cpp looks for them in the input.
  const std::vector<int32_t>& special_tokens() const { return special_tokens_; }

 private:
  Vocab() = default;
  absl::Status LoadTokens(VocabData& data);
  void ResolveSpecialIds(const VocabData& data);
  void DetectSpecialTokens();
  void BuildEogSet();
  void ApplyModelTweaks(absl::string_view general_name);

  VocabType type_ = VocabType::kBpe;
  std::vector<std::string> text_;
  std::vector<float> scores_;
  std::vector<uint32_t> attrs_;
  // Open-addressing index over text_, probed linearly: each slot holds the top
  // 32 bits of the text's hash and id + 1 (0 = empty). 8 bytes a slot keeps the
  // misses of the merge loops (most lookups) in cache.
  std::vector<uint64_t> index_;
  uint64_t index_mask_ = 0;
  std::vector<std::string> merges_;
  PreTokenizerSpec pre_;

  int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, eom_id_ = -1, unk_id_ = -1;
  int32_t sep_id_ = -1, pad_id_ = -1, mask_id_ = -1;
  int32_t fim_pre_id_ = -1, fim_suf_id_ = -1, fim_mid_id_ = -1;
  int32_t fim_pad_id_ = -1, fim_rep_id_ = -1, fim_sep_id_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  bool clean_spaces_ = false;
  absl::flat_hash_set<int32_t> eog_ids_;
  std::vector<int32_t> special_tokens_;
};

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_VOCAB_H_
