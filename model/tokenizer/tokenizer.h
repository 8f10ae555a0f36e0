// Tokenizers from GGUF metadata, giving exactly llama.cpp's token ids.
//
// Supported: byte-level BPE (`tokenizer.ggml.model` = "gpt2") with the
// pre-tokenizers llama.cpp knows by `tokenizer.ggml.pre` (qwen2, gpt-2, llama3 /
// llama-bpe, deepseek-llm, deepseek-coder, deepseek-v3, falcon, starcoder,
// refact, mpt, olmo, the default and their aliases; see pre_tokenizer_specs.cc),
// and SentencePiece BPE ("llama"). Special and user-defined tokens, BOS/EOS
// handling and the end-of-generation set follow llama.cpp's llama_vocab.
//
//   COLIBRI_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromGguf(*file));
//   EncodeOptions options;
//   options.add_special = true;  // BOS as the vocabulary asks
//   COLIBRI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(prompt, options));
//
// Thread-safety: a Tokenizer is immutable after construction; any number of
// threads may call its const methods concurrently. A StreamDecoder is not
// thread-safe (one per stream).
#ifndef COLIBRI_MODEL_TOKENIZER_TOKENIZER_H_
#define COLIBRI_MODEL_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/vocab.h"

namespace colibri::tokenizer {

class BpeTokenizer;
class SpmTokenizer;
class SpecialTokenSplitter;

struct EncodeOptions {
  // Add BOS / EOS where the vocabulary asks for them (add_bos / add_eos).
  // Default: false.
  bool add_special = false;
  // Recognise the text of control tokens (e.g. "<|im_start|>") as those tokens.
  // User-defined tokens are recognised either way, as in llama.cpp.
  // Default: false.
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Reads the tokenizer.* metadata (and general.name) of `file`. The tokenizer
  // keeps no reference to `file`. InvalidArgument for an unknown or unsupported
  // tokenizer model or pre-tokenizer (the message names it), or a key of the
  // wrong type; DataLoss for missing or inconsistent vocabulary data.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const gguf::GgufFile& file);
  // The same from already extracted metadata.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromVocabData(VocabData data);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`, as llama_tokenize(text, add_special, parse_special).
  // InvalidArgument for a text of 4 GiB or more; Internal or ResourceExhausted
  // only if the pre-tokenizer's regex engine fails (resource limits).
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              const EncodeOptions& options) const;

  // Bytes of one token, as llama_token_to_piece(lstrip = 0): control and unknown
  // tokens are rendered (as their text) only when `render_special`; byte tokens
  // give their byte. The bytes may end inside a UTF-8 character. Empty for an id
  // outside [0, n_vocab).
  std::string TokenToPiece(int32_t id, bool render_special) const;

  // Text of `ids`, as llama_detokenize(remove_special = false, unparse_special =
  // render_special) without its clean-up of spaces before punctuation (so that
  // Decode(Encode(x)) == x for byte-level BPE); for SentencePiece the leading
  // space of the first token is dropped.
  std::string Decode(absl::Span<const int32_t> ids, bool render_special) const;

  int32_t n_vocab() const { return vocab_.n_tokens(); }
  // -1 when the vocabulary has none.
  int32_t bos_id() const { return vocab_.bos_id(); }
  int32_t eos_id() const { return vocab_.eos_id(); }
  int32_t eot_id() const { return vocab_.eot_id(); }
  int32_t pad_id() const { return vocab_.pad_id(); }
  int32_t unk_id() const { return vocab_.unk_id(); }
  bool add_bos() const { return vocab_.add_bos(); }
  bool add_eos() const { return vocab_.add_eos(); }
  // EOS, EOT, EOM and the tokens llama.cpp adds to its end-of-generation set
  // (e.g. "<|im_end|>", "<|endoftext|>", FIM pad/repo/file-separator tokens).
  bool IsEndOfGeneration(int32_t id) const { return vocab_.IsEog(id); }
  // Control or unknown: not rendered unless asked.
  bool IsControl(int32_t id) const;
  // The token's text as stored in the vocabulary (byte-level or U+2581-escaped).
  const std::string& TokenText(int32_t id) const { return vocab_.text(id); }
  const Vocab& vocab() const { return vocab_; }

 private:
  explicit Tokenizer(Vocab vocab);

  const Vocab vocab_;
  std::unique_ptr<BpeTokenizer> bpe_;  // when vocab_.type() == kBpe
  std::unique_ptr<SpmTokenizer> spm_;  // when vocab_.type() == kSpm
  std::unique_ptr<SpecialTokenSplitter> splitter_;
};

// Turns generated token ids into text as it becomes complete UTF-8: a token
// ending inside a multi-byte character emits nothing until the character's last
// byte arrives. Pieces are as Tokenizer::TokenToPiece (no leading-space removal).
// Bytes that can never complete a character are passed through as they are.
class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder. render_special: as TokenToPiece.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false);

  // Appends token `id`; returns the text that became complete (maybe empty).
  std::string Push(int32_t id);
  // Ends the stream: returns the bytes still held back (an incomplete character).
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  const bool render_special_;
  std::string pending_;  // bytes of an unfinished UTF-8 character
};

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_TOKENIZER_H_
