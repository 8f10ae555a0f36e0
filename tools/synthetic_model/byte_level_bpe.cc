#include "tools/synthetic_model/byte_level_bpe.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace colibri::synthetic {
namespace {

bool MapsToItself(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

std::string EncodeUtf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

enum class CharClass { kLetter, kDigit, kSpace, kOther };

CharClass Classify(unsigned char c) {
  if (c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
  if (c >= '0' && c <= '9') return CharClass::kDigit;
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
    return CharClass::kSpace;
  }
  return CharClass::kOther;
}

// Length of the contraction GPT-2 splits off at text[i] ('s 't 're 've 'm 'll 'd), or 0.
size_t ContractionLength(absl::string_view text, size_t i) {
  if (text[i] != '\'') return 0;
  for (absl::string_view suffix : {"s", "t", "m", "d", "re", "ve", "ll"}) {
    if (text.substr(i + 1, suffix.size()) == suffix) return 1 + suffix.size();
  }
  return 0;
}

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

struct HeapEntry {
  int64_t count;
  uint64_t key;
};

// Orders the heap so that the top is the highest count, then the lowest key.
struct HeapOrder {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.count < b.count || (a.count == b.count && a.key > b.key);
  }
};

// The state of one training run: words as symbol sequences and the counts of
// every adjacent pair, updated incrementally as pairs merge.
class BpeTrainer {
 public:
  explicit BpeTrainer(std::vector<Word> words) : words_(std::move(words)) {
    visited_.assign(words_.size(), -1);
    for (size_t w = 0; w < words_.size(); ++w) AddPairs(static_cast<int32_t>(w));
    for (const auto& [key, count] : pair_counts_) heap_.push({count, key});
    touched_.clear();
  }

  // The most frequent pair, or false when none is left.
  bool PopBest(int32_t* left, int32_t* right) {
    while (!heap_.empty()) {
      const HeapEntry top = heap_.top();
      heap_.pop();
      auto it = pair_counts_.find(top.key);
      if (it == pair_counts_.end() || it->second != top.count || top.count <= 0) continue;
      *left = static_cast<int32_t>(top.key >> 32);
      *right = static_cast<int32_t>(top.key & 0xFFFFFFFFu);
      return true;
    }
    return false;
  }

  // Replaces every (left, right) by merged in the words that contain it.
  void Merge(int32_t left, int32_t right, int32_t merged, int iteration) {
    auto it = pair_words_.find(PairKey(left, right));
    if (it == pair_words_.end()) return;
    const std::vector<int32_t> candidates = std::move(it->second);
    pair_words_.erase(it);
    for (int32_t w : candidates) {
      if (visited_[static_cast<size_t>(w)] == iteration) continue;
      visited_[static_cast<size_t>(w)] = iteration;
      std::vector<int32_t>& s = words_[static_cast<size_t>(w)].symbols;
      bool found = false;
      for (size_t i = 0; i + 1 < s.size() && !found; ++i) found = s[i] == left && s[i + 1] == right;
      if (!found) continue;

      RemovePairs(w);
      size_t out = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          s[out++] = merged;
          ++i;
        } else {
          s[out++] = s[i];
        }
      }
      s.resize(out);
      AddPairs(w);
    }
    for (uint64_t key : touched_) heap_.push({pair_counts_[key], key});
    touched_.clear();
  }

 private:
  void AddPairs(int32_t w) {
    const Word& word = words_[static_cast<size_t>(w)];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const uint64_t key = PairKey(word.symbols[i], word.symbols[i + 1]);
      pair_counts_[key] += word.count;
      std::vector<int32_t>& list = pair_words_[key];
      if (list.empty() || list.back() != w) list.push_back(w);
      touched_.push_back(key);
    }
  }

  void RemovePairs(int32_t w) {
    const Word& word = words_[static_cast<size_t>(w)];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const uint64_t key = PairKey(word.symbols[i], word.symbols[i + 1]);
      pair_counts_[key] -= word.count;
      touched_.push_back(key);
    }
  }

  std::vector<Word> words_;
  std::vector<int> visited_;  // [words]: last iteration that processed the word
  absl::flat_hash_map<uint64_t, int64_t> pair_counts_;
  // Words that contained the pair when it was counted (may include stale ones).
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> pair_words_;
  std::vector<uint64_t> touched_;
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapOrder> heap_;
};

}  // namespace

const std::array<uint8_t, 256>& Gpt2ByteOrder() {
  static const std::array<uint8_t, 256> order = [] {
    std::array<uint8_t, 256> o{};
    size_t n = 0;
    for (int b = 0; b < 256; ++b) {
      if (MapsToItself(b)) o[n++] = static_cast<uint8_t>(b);
    }
    for (int b = 0; b < 256; ++b) {
      if (!MapsToItself(b)) o[n++] = static_cast<uint8_t>(b);
    }
    return o;
  }();
  return order;
}

std::string ByteToUnicode(uint8_t byte) {
  if (MapsToItself(byte)) return EncodeUtf8(byte);
  uint32_t k = 0;
  for (int b = 0; b < byte; ++b) k += MapsToItself(b) ? 0 : 1;
  return EncodeUtf8(0x100 + k);
}

std::vector<std::string> PreTokenize(absl::string_view text) {
  std::vector<std::string> pieces;
  const size_t n = text.size();
  auto run_end = [&](size_t i, CharClass cls) {
    while (i < n && Classify(static_cast<unsigned char>(text[i])) == cls) ++i;
    return i;
  };
  size_t i = 0;
  while (i < n) {
    const CharClass cls = Classify(static_cast<unsigned char>(text[i]));
    size_t end;
    if (const size_t len = ContractionLength(text, i); len > 0) {
      end = i + len;
    } else if (cls != CharClass::kSpace) {
      end = run_end(i, cls);
    } else if (text[i] == ' ' && i + 1 < n &&
               Classify(static_cast<unsigned char>(text[i + 1])) != CharClass::kSpace) {
      // " ?\p{L}+" and friends: a single space joins the run after it.
      end = run_end(i + 1, Classify(static_cast<unsigned char>(text[i + 1])));
    } else {
      // "\s+(?!\S)": a whitespace run leaves its last character to the next
      // pre-token when a non-space follows.
      end = run_end(i, CharClass::kSpace);
      if (end < n && end - i > 1) --end;
    }
    pieces.emplace_back(text.substr(i, end - i));
    i = end;
  }
  return pieces;
}

absl::StatusOr<BpeVocabulary> TrainByteLevelBpe(absl::string_view text, int vocab_size) {
  if (vocab_size < 257) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary size ", vocab_size, " is below 257 (256 byte tokens + <|endoftext|>)"));
  }
  BpeVocabulary vocab;
  absl::flat_hash_map<std::string, int32_t> token_ids;
  std::array<int32_t, 256> byte_token{};
  const std::array<uint8_t, 256>& order = Gpt2ByteOrder();
  for (int32_t id = 0; id < 256; ++id) {
    byte_token[order[static_cast<size_t>(id)]] = id;
    vocab.tokens.push_back(ByteToUnicode(order[static_cast<size_t>(id)]));
    token_ids[vocab.tokens.back()] = id;
  }

  // Distinct pre-tokens, sorted so that the training order never depends on hashing.
  absl::flat_hash_map<std::string, int64_t> piece_counts;
  for (std::string& piece : PreTokenize(text)) ++piece_counts[std::move(piece)];
  std::vector<std::pair<std::string, int64_t>> sorted(piece_counts.begin(), piece_counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  for (const auto& [piece, count] : sorted) {
    Word word;
    word.count = count;
    for (char c : piece) word.symbols.push_back(byte_token[static_cast<unsigned char>(c)]);
    words.push_back(std::move(word));
  }

  BpeTrainer trainer(std::move(words));
  const size_t target = static_cast<size_t>(vocab_size) - 1;  // room for <|endoftext|>
  int32_t left, right;
  for (int iteration = 0; vocab.tokens.size() < target && trainer.PopBest(&left, &right);
       ++iteration) {
    const std::string& l = vocab.tokens[static_cast<size_t>(left)];
    const std::string& r = vocab.tokens[static_cast<size_t>(right)];
    vocab.merges.push_back(absl::StrCat(l, " ", r));
    std::string merged_text = absl::StrCat(l, r);
    // Two different pairs can spell the same token ("a"+"bc", "ab"+"c"): reuse it.
    auto [it, inserted] =
        token_ids.try_emplace(std::move(merged_text), static_cast<int32_t>(vocab.tokens.size()));
    if (inserted) vocab.tokens.push_back(it->first);
    trainer.Merge(left, right, it->second, iteration);
  }

  vocab.token_types.assign(vocab.tokens.size(), BpeVocabulary::kTypeNormal);
  vocab.end_of_text_id = static_cast<int32_t>(vocab.tokens.size());
  vocab.tokens.push_back(BpeVocabulary::kEndOfText);
  vocab.token_types.push_back(BpeVocabulary::kTypeControl);
  return vocab;
}

int PadVocabulary(int vocab_size, BpeVocabulary* vocab) {
  int added = 0;
  while (vocab->tokens.size() < static_cast<size_t>(vocab_size)) {
    vocab->tokens.push_back(absl::StrCat("<|unused_", added, "|>"));
    vocab->token_types.push_back(BpeVocabulary::kTypeUnused);
    ++added;
  }
  return added;
}

}  // namespace colibri::synthetic
