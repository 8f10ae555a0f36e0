#!/usr/bin/python3
"""Writes a trained checkpoint as a float32 `qwen3moe` GGUF (v3).

    /usr/bin/python3 scripts/demo-model/export_gguf.py \
        --ckpt build/demo-model/final.pt --tokenizer build/demo-model/tokenizer.json \
        --out build/demo-model/demo-f32.gguf

F16 and quantized files are then made from this one by colibri's own quantizer
(`colibri-quantize`), which keeps norms and routers in F32. Tensor names, shapes
(GGML order: dims[0] is the row length, so a PyTorch [out, in] matrix is
{in, out}) and metadata keys are those llama.cpp writes for Qwen3-MoE; the
output head is tied (no output.weight). The NEOX RoPE layout is what the model
was trained with, so q/k need no permutation.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config  # noqa: E402

GGUF_MAGIC = b"GGUF"
ALIGN = 32
# GGUF metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32 = 0

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(kind, v):
    if kind == T_UINT32:
        return struct.pack("<I", v)
    if kind == T_INT32:
        return struct.pack("<i", v)
    if kind == T_FLOAT32:
        return struct.pack("<f", v)
    if kind == T_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if kind == T_STRING:
        return _string(v)
    raise ValueError(kind)


class GgufWriter:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, kind, value):
        self.kv.append((key, kind, value))

    def add_array(self, key, elem_kind, values):
        self.kv.append((key, T_ARRAY, (elem_kind, values)))

    def add_tensor(self, name, array):
        """array: float32 numpy array in PyTorch (row-major) shape."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        self.tensors.append((name, list(reversed(a.shape)), a))

    def write(self, path):
        out = bytearray()
        out += GGUF_MAGIC + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for key, kind, value in self.kv:
            out += _string(key) + struct.pack("<I", kind)
            if kind == T_ARRAY:
                elem_kind, values = value
                out += struct.pack("<IQ", elem_kind, len(values))
                for v in values:
                    out += _value(elem_kind, v)
            else:
                out += _value(kind, value)
        offset = 0
        for name, dims, a in self.tensors:
            out += _string(name) + struct.pack("<I", len(dims))
            out += b"".join(struct.pack("<Q", d) for d in dims)
            out += struct.pack("<IQ", GGML_F32, offset)
            offset += (a.nbytes + ALIGN - 1) // ALIGN * ALIGN
        out += b"\0" * (-len(out) % ALIGN)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(out)
            for _, _, a in self.tensors:
                f.write(a.tobytes())
                f.write(b"\0" * (-a.nbytes % ALIGN))
        os.replace(tmp, path)


def export(ckpt, tokenizer, path, name):
    cfg = Config(**ckpt["config"])
    sd = {k: v.float().numpy() for k, v in ckpt["model"].items()}
    w = GgufWriter()
    arch = "qwen3moe"
    w.add("general.architecture", T_STRING, arch)
    w.add("general.name", T_STRING, name)
    w.add("general.file_type", T_UINT32, 0)  # all F32
    w.add("general.quantization_version", T_UINT32, 2)
    for key, value in [("context_length", cfg.n_ctx), ("embedding_length", cfg.n_embd),
                       ("block_count", cfg.n_layer),
                       ("feed_forward_length", cfg.n_expert_used * cfg.n_ff_exp),
                       ("attention.head_count", cfg.n_head),
                       ("attention.head_count_kv", cfg.n_head_kv),
                       ("attention.key_length", cfg.head_dim),
                       ("attention.value_length", cfg.head_dim),
                       ("expert_count", cfg.n_expert), ("expert_used_count", cfg.n_expert_used),
                       ("expert_feed_forward_length", cfg.n_ff_exp)]:
        w.add("%s.%s" % (arch, key), T_UINT32, value)
    w.add(arch + ".attention.layer_norm_rms_epsilon", T_FLOAT32, cfg.rms_eps)
    w.add(arch + ".rope.freq_base", T_FLOAT32, cfg.rope_freq_base)

    tokens = tokenizer["tokens"]
    eot = tokens.index("<|endoftext|>")
    w.add("tokenizer.ggml.model", T_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", T_STRING, "gpt-2")
    w.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    w.add_array("tokenizer.ggml.token_type", T_INT32, tokenizer["token_types"])
    w.add_array("tokenizer.ggml.merges", T_STRING,
                [tokens[a] + " " + tokens[b] for a, b in tokenizer["merges"]])
    w.add("tokenizer.ggml.bos_token_id", T_UINT32, eot)
    w.add("tokenizer.ggml.eos_token_id", T_UINT32, eot)
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, False)
    w.add("tokenizer.chat_template", T_STRING, CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", sd["tok_emb.weight"])
    w.add_tensor("output_norm.weight", sd["output_norm.weight"])
    for i in range(cfg.n_layer):
        p, b = "blk.%d." % i, "blocks.%d." % i
        for gguf_name, torch_name in [("attn_norm.weight", "attn_norm.weight"),
                                      ("attn_q.weight", "wq.weight"),
                                      ("attn_k.weight", "wk.weight"),
                                      ("attn_v.weight", "wv.weight"),
                                      ("attn_output.weight", "wo.weight"),
                                      ("attn_q_norm.weight", "q_norm.weight"),
                                      ("attn_k_norm.weight", "k_norm.weight"),
                                      ("ffn_norm.weight", "ffn_norm.weight"),
                                      ("ffn_gate_inp.weight", "router.weight"),
                                      ("ffn_gate_exps.weight", "gate"),
                                      ("ffn_up_exps.weight", "up"),
                                      ("ffn_down_exps.weight", "down")]:
            w.add_tensor(p + gguf_name, sd[b + torch_name])
    w.write(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="colibri-demo-kjv")
    args = ap.parse_args()
    ckpt = torch.load(args.ckpt, map_location="cpu")
    with open(args.tokenizer) as f:
        tokenizer = json.load(f)
    export(ckpt, tokenizer, args.out, args.name)
    print("wrote %s (step %d)" % (args.out, ckpt["step"]))


if __name__ == "__main__":
    main()
