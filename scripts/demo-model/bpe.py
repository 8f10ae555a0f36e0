"""Byte-level BPE (GPT-2 style) trained on the corpus, and the matching encoder.

The vocabulary is laid out as colibri's synthetic-model tokenizer does
(tools/synthetic_model/byte_level_bpe.h): the 256 byte tokens in GPT-2's
byte-to-unicode form and id order, one token per learned merge, then the special
tokens. Pre-tokenization is GPT-2's regex (tokenizer.ggml.pre "gpt-2"); the
corpus is pure ASCII, so the Unicode classes reduce to ASCII ones (checked).

Encoding applies merges by rank inside each pre-token (lowest rank first), which
is what llama.cpp's and colibri's runtime tokenizers do, so the token ids the
model is trained on are the ids colibri produces for the same text
(check_export.py verifies this on the held-out text).
"""

import heapq
import re
from collections import Counter

# GPT-2's pre-tokenizer regex with \p{L} -> [A-Za-z] and \p{N} -> [0-9]; valid
# only for ASCII text (PreTokenize asserts that).
_GPT2_ASCII = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]
TYPE_NORMAL = 1
TYPE_CONTROL = 3


def gpt2_byte_order():
    """Element i is the byte that byte token i stands for."""
    first = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    rest = [b for b in range(256) if b not in set(first)]
    return first + rest


def byte_to_unicode():
    """GPT-2's printable stand-in character for every byte."""
    first = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    mapping = {b: chr(b) for b in first}
    k = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + k)
            k += 1
    return mapping


def pre_tokenize(text):
    if not text.isascii():
        raise ValueError("the ASCII form of the GPT-2 regex needs ASCII text")
    return _GPT2_ASCII.findall(text)


class Tokenizer:
    """tokens[i] is token i's byte-to-unicode string; merges are (left, right) ids."""

    def __init__(self, tokens, merges, token_types):
        self.tokens = tokens
        self.merges = merges
        self.token_types = token_types
        self.rank = {pair: r for r, pair in enumerate(merges)}
        self.merged_id = {pair: 256 + r for r, pair in enumerate(merges)}
        order = gpt2_byte_order()
        self.byte_id = {b: i for i, b in enumerate(order)}
        self.id_bytes = {}
        for i, b in enumerate(order):
            self.id_bytes[i] = bytes([b])
        for r, (a, b) in enumerate(merges):
            self.id_bytes[256 + r] = self.id_bytes[a] + self.id_bytes[b]
        self.special = {t: tokens.index(t) for t in SPECIAL_TOKENS}
        self._cache = {}

    def _encode_word(self, word):
        ids = self._cache.get(word)
        if ids is not None:
            return ids
        ids = [self.byte_id[b] for b in word.encode("ascii")]
        while len(ids) > 1:
            best = None
            for i in range(len(ids) - 1):
                r = self.rank.get((ids[i], ids[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            pair = (ids[best[1]], ids[best[1] + 1])
            new_id = self.merged_id[pair]
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        self._cache[word] = ids
        return ids

    def encode(self, text):
        out = []
        for word in pre_tokenize(text):
            out.extend(self._encode_word(word))
        return out

    def decode(self, ids):
        return b"".join(self.id_bytes.get(i, b"") for i in ids).decode("utf-8", "replace")

    def merge_strings(self):
        return [self.tokens[a] + " " + self.tokens[b] for a, b in self.merges]


def train_bpe(text, vocab_size):
    """Learns vocab_size - 256 - len(SPECIAL_TOKENS) merges; deterministic.

    Ties between equally frequent pairs go to the lower left id, then the lower
    right id.
    """
    n_merges = vocab_size - 256 - len(SPECIAL_TOKENS)
    if n_merges < 0:
        raise ValueError("vocab_size too small")
    order = gpt2_byte_order()
    byte_id = {b: i for i, b in enumerate(order)}
    counts = Counter(pre_tokenize(text))
    words = [[byte_id[b] for b in w.encode("ascii")] for w in counts]
    freqs = list(counts.values())

    pair_count = Counter()
    pair_words = {}
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freqs[wi]
            pair_words.setdefault((a, b), set()).add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg or neg == 0:
            continue  # stale entry
        new_id = 256 + len(merges)
        merges.append(pair)
        touched = Counter()
        for wi in sorted(pair_words.pop(pair, ())):
            w, f = words[wi], freqs[wi]
            for a, b in zip(w, w[1:]):
                pair_count[(a, b)] -= f
                touched[(a, b)] += 0
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == pair:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                pair_count[(a, b)] += f
                pair_words.setdefault((a, b), set()).add(wi)
                touched[(a, b)] += 0
        pair_count.pop(pair, None)
        for p in touched:
            c = pair_count.get(p, 0)
            if c > 0 and p != pair:
                heapq.heappush(heap, (-c, p))
            elif c <= 0:
                pair_count.pop(p, None)

    b2u = byte_to_unicode()
    tokens = [b2u[b] for b in order]
    for a, b in merges:
        tokens.append(tokens[a] + tokens[b])
    tokens += SPECIAL_TOKENS
    types = [TYPE_NORMAL] * (len(tokens) - len(SPECIAL_TOKENS)) + [TYPE_CONTROL] * len(
        SPECIAL_TOKENS)
    return Tokenizer(tokens, merges, types)
