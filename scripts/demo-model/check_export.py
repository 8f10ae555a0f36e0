#!/usr/bin/python3
"""Checks an exported demo model against PyTorch on the held-out text.

    /usr/bin/python3 scripts/demo-model/check_export.py --ckpt build/demo-model/final.pt \
        --text build/demo-model/heldout.txt --coordinator build/coordinator/colibri-coordinator \
        --f16 demo-f16.gguf [--quantized demo-q8_0.gguf ...] [--json out.json]

1. colibri's tokenizer (`colibri-coordinator tokenize`) must give exactly the ids
   the Python tokenizer gives for the text (else the training ids would not be
   the ones colibri feeds the model).
2. PyTorch's mean next-token loss over windows of n_ctx + 1 tokens with the
   weights rounded to F16 as the F16 GGUF stores them (routers and norms stay
   F32), against `colibri-coordinator perplexity --exact` on the F16 GGUF: they
   must agree to within float rounding (|difference| < 1e-3 nats).
3. The quantized files' losses (default fast path) are printed next to it.
"""

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from model import Config, Model  # noqa: E402

TOLERANCE_NATS = 1e-3


def colibri_tokens(coordinator, gguf, text_path):
    out = subprocess.run([coordinator, "tokenize", "--model", gguf, "--text-file", text_path],
                         capture_output=True, text=True, check=True).stdout
    return [int(x) for x in out.split()]


def colibri_loss(coordinator, gguf, text_path, ctx, exact):
    cmd = [coordinator, "perplexity", "--model", gguf, "--text-file", text_path, "--ctx",
           str(ctx), "--threads", "2"]
    if exact:
        cmd.append("--exact")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    figures = dict(re.findall(r"^([a-z ]+): ([0-9.]+)", out, re.M))
    return float(figures["mean nll"]), int(figures["scored tokens"])


def torch_loss(model, ids, ctx):
    """The same windows as colibri's perplexity command, float64 accumulation."""
    total, count = 0.0, 0
    n_windows = (len(ids) - 1) // ctx
    with torch.no_grad():
        for w in range(0, n_windows, 16):
            rows = [ids[i * ctx:i * ctx + ctx + 1] for i in range(w, min(w + 16, n_windows))]
            batch = torch.tensor(np.stack(rows), dtype=torch.long)
            logits, _, _ = model(batch[:, :-1])
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                  batch[:, 1:].reshape(-1), reduction="sum")
            total += nll.item()
            count += batch[:, 1:].numel()
    return total / count, count


def round_to_f16(model):
    """Rounds what colibri-quantize --type f16 converts: matrices except routers."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "router" not in name:
                p.copy_(p.half().float())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--f16", required=True)
    ap.add_argument("--quantized", nargs="*", default=[])
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(2)

    ckpt = torch.load(args.ckpt, map_location="cpu")
    cfg = Config(**ckpt["config"])
    with open(args.tokenizer) as f:
        t = json.load(f)
    tok = bpe.Tokenizer(t["tokens"], [tuple(m) for m in t["merges"]], t["token_types"])
    with open(args.text) as f:
        text = f.read()
    py_ids = tok.encode(text)
    c_ids = colibri_tokens(args.coordinator, args.f16, args.text)
    same = py_ids == c_ids
    print("tokens: python %d, colibri %d, identical: %s" % (len(py_ids), len(c_ids), same))
    if not same:
        sys.exit("FAIL: colibri's tokenizer disagrees with the training tokenizer")

    model = Model(cfg)
    model.load_state_dict(ckpt["model"])
    model.eval()
    ids = np.array(c_ids, dtype=np.int64)
    f32_loss, n = torch_loss(model, ids, cfg.n_ctx)
    round_to_f16(model)
    f16_loss, _ = torch_loss(model, ids, cfg.n_ctx)
    c16_exact, n16 = colibri_loss(args.coordinator, args.f16, args.text, cfg.n_ctx, True)
    c16_fast, _ = colibri_loss(args.coordinator, args.f16, args.text, cfg.n_ctx, False)
    results = {"scored_tokens": n, "ctx": cfg.n_ctx, "pytorch_f32": f32_loss,
               "pytorch_f16": f16_loss, "colibri_f16_exact": c16_exact,
               "colibri_f16_fast": c16_fast, "quantized": {}}
    print("held-out tokens scored: %d (colibri %d), windows of %d" % (n, n16, cfg.n_ctx))
    print("%-34s %10s %10s" % ("", "mean nll", "ppl"))
    for label, v in [("PyTorch, F32 weights", f32_loss), ("PyTorch, F16 weights", f16_loss),
                     ("colibri F16 --exact", c16_exact), ("colibri F16 (fast path)", c16_fast)]:
        print("%-34s %10.5f %10.3f" % (label, v, np.exp(v)))
    for q in args.quantized:
        loss, _ = colibri_loss(args.coordinator, q, args.text, cfg.n_ctx, False)
        results["quantized"][os.path.basename(q)] = loss
        print("%-34s %10.5f %10.3f" % ("colibri " + os.path.basename(q), loss, np.exp(loss)))
    diff = abs(c16_exact - f16_loss)
    print("|colibri F16 exact - PyTorch F16| = %.2e nats (tolerance %.0e)" % (diff, TOLERANCE_NATS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if n != n16 or diff >= TOLERANCE_NATS:
        sys.exit("FAIL: the export does not reproduce PyTorch's loss")
    print("OK")


if __name__ == "__main__":
    main()
