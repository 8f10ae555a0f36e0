#!/usr/bin/python3
"""Writes scripts/demo-model/PROVENANCE.md, provenance.json and words.txt.

provenance.json holds the figures tests compare against (PyTorch's held-out
loss on the F16 weights, computed by check_export.py); words.txt is the sorted
set of lower-cased words of the training text, which the cluster-script test
uses to tell English from gibberish.
"""

import argparse
import hashlib
import json
import math
import os
import platform
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

MODEL_FILE = "colibri-demo-kjv-q8_0.gguf"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--train-command", required=True)
    ap.add_argument("--ckpt", default="final.pt")
    ap.add_argument("--note", default="", help="a sentence on how this run differed")
    args = ap.parse_args()

    ckpt = torch.load(os.path.join(args.work, args.ckpt), map_location="cpu")
    with open(os.path.join(args.work, "check.json")) as f:
        check = json.load(f)
    train_text, held_text = corpus.split_text()
    words = sorted(set(w.lower() for w in re.findall(r"[A-Za-z]+", train_text)))
    with open(os.path.join(args.out, "words.txt"), "w") as f:
        f.write("\n".join(words) + "\n")

    model_path = os.path.join(args.out, MODEL_FILE)
    versions = {p: corpus.package_version(p) for p in ("bible-kjv-text", "bible-kjv",
                                                        "python3-torch", "python3-numpy")}
    cfg = ckpt["config"]
    prov = {
        "model_file": MODEL_FILE,
        "sha256": sha256(model_path),
        "bytes": os.path.getsize(model_path),
        "command": args.command,
        "train_command": args.train_command,
        "note": args.note,
        "packages": versions,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "seed": ckpt["seed"],
        "steps": ckpt["step"],
        "batch": ckpt["args"]["batch"],
        "tokens_seen": ckpt["step"] * ckpt["args"]["batch"] * cfg["n_ctx"],
        "n_params": ckpt["n_params"],
        "config": cfg,
        "train_loss_smoothed": ckpt["train_loss"],
        "held_out": {
            "text": "heldout.txt (1 John to Revelation)",
            "ctx": check["ctx"],
            "scored_tokens": check["scored_tokens"],
            "pytorch_f32_nll": check["pytorch_f32"],
            "pytorch_f16_nll": check["pytorch_f16"],
            "colibri_f16_exact_nll": check["colibri_f16_exact"],
            "colibri_f16_fast_nll": check["colibri_f16_fast"],
            "colibri_quantized_nll": check["quantized"],
        },
    }
    with open(os.path.join(args.out, "provenance.json"), "w") as f:
        json.dump(prov, f, indent=1)
        f.write("\n")

    ho = prov["held_out"]
    lines = [
        "# The demo model: a small Qwen3-MoE trained on the King James Bible",
        "",
        "`%s` (%.1f MiB, sha256 `%s`) is a `qwen3moe` GGUF trained by "
        "`scripts/demo-model/` and quantized to Q8_0 by `colibri-quantize`." % (
            MODEL_FILE, prov["bytes"] / 1048576, prov["sha256"]),
        "",
        "- Text: the King James Bible from Debian's `bible-kjv-text` %s (public domain), "
        "printed by `bible` (`bible-kjv` %s), one verse per line without references. "
        "Held out: 1 John to Revelation (`heldout.txt`); trained on Genesis to Jude." % (
            versions["bible-kjv-text"], versions["bible-kjv"]),
        "- Tokenizer: byte-level BPE (GPT-2 layout, pre-tokenizer `gpt-2`) trained on the "
        "training text: %d tokens including `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` "
        "(a ChatML `tokenizer.chat_template` is set; the model never saw chat)." %
        cfg["vocab_size"],
        "- Shape: d %d, %d layers, %d query / %d KV heads of %d, %d experts top-%d of width %d, "
        "context %d, tied output; %d parameters." % (
            cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"],
            cfg["n_expert"], cfg["n_expert_used"], cfg["n_ff_exp"], cfg["n_ctx"],
            prov["n_params"]),
        "- Training: %d steps of %d x %d tokens (%d tokens, about %.1f passes over the text), "
        "AdamW, seed %d, PyTorch %s (Debian `python3-torch` %s), on 2 shared CPU cores." % (
            prov["steps"], prov["batch"], cfg["n_ctx"], prov["tokens_seen"],
            prov["tokens_seen"] / 1129266.0, prov["seed"], prov["torch"],
            versions["python3-torch"]),
        "- Reproduce: `%s` (training alone: `%s`).%s" % (
            args.command, args.train_command, (" " + args.note) if args.note else ""),
        "",
        "Held-out loss (mean next-token negative log-likelihood, nats; %d tokens scored in "
        "windows of %d):" % (ho["scored_tokens"], ho["ctx"]),
        "",
        "| weights | measured by | nll | perplexity |",
        "|---|---|---|---|",
    ]
    rows = [("F32", "PyTorch", ho["pytorch_f32_nll"]),
            ("F16", "PyTorch", ho["pytorch_f16_nll"]),
            ("F16", "colibri `perplexity --exact`", ho["colibri_f16_exact_nll"]),
            ("F16", "colibri `perplexity`", ho["colibri_f16_fast_nll"])]
    for name, v in sorted(ho["colibri_quantized_nll"].items()):
        rows.append((name, "colibri `perplexity`", v))
    for w, by, v in rows:
        lines.append("| %s | %s | %.5f | %.3f |" % (w, by, v, math.exp(v)))
    lines += [
        "",
        "Smoothed training loss at the last step: %.4f. `provenance.json` has these figures "
        "for the tests (`tests/coordinator/cli/perplexity_command_test.cc` compares colibri's "
        "perplexity of the committed file with PyTorch's F16 figure); `words.txt` is the "
        "training text's vocabulary (`tests/scripts/cluster_scripts_test.cc`); `train.log` and "
        "`loss.tsv` are the run's log and loss curve (held-out loss on the first 48 windows "
        "every 50 steps)." %
        prov["train_loss_smoothed"],
        "",
    ]
    with open(os.path.join(args.out, "PROVENANCE.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
