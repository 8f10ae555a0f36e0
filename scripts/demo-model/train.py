#!/usr/bin/python3
"""Trains colibri's demo MoE on the King James Bible.

    nice -n 19 python3 scripts/demo-model/train.py --out build/demo-model

Writes to --out: tokenizer.json, tokens-train.npy / tokens-heldout.npy,
ckpt-STEP.pt every --ckpt-every steps and final.pt, and a loss log (train.log is
whatever the caller redirects stdout to; loss.tsv has the curve). Everything is
seeded: the same command on the same package versions gives the same weights
(up to PyTorch's CPU kernels, which are deterministic for these ops).
"""

import argparse
import json
import math
import os
import random
import sys
import time

# On a machine shared with other jobs, OpenMP workers that spin while waiting
# burn the CPU share this nice -n 19 process gets; sleeping instead changes no
# result. Must be set before torch loads its OpenMP runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
from model import Config, Model  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--balance-coef", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-windows", type=int, default=48,
                   help="held-out windows scored during training (the export check scores all)")
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--bench", type=int, default=0, help="time this many steps and exit")
    return p.parse_args()


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def held_out_loss(model, tokens, ctx, max_windows):
    """Mean next-token NLL over the first max_windows windows of ctx + 1 tokens."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        n_windows = min((len(tokens) - 1) // ctx, max_windows)
        for w in range(0, n_windows, 16):
            rows = [tokens[i * ctx:i * ctx + ctx + 1] for i in range(w, min(w + 16, n_windows))]
            batch = torch.tensor(np.stack(rows), dtype=torch.long)
            logits, _, _ = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                   reduction="sum")
            total += loss.item()
            count += batch[:, 1:].numel()
    model.train()
    return total / count


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)

    train_text, held_text = corpus.split_text()
    t0 = time.time()
    tok = bpe.train_bpe(train_text, args.vocab_size)
    train_ids = np.array(tok.encode(train_text), dtype=np.int64)
    held_ids = np.array(tok.encode(held_text), dtype=np.int64)
    print("tokenizer: %d tokens, %.1fs; train %d tokens, held-out %d tokens" %
          (len(tok.tokens), time.time() - t0, len(train_ids), len(held_ids)), flush=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump({"tokens": tok.tokens, "merges": tok.merges, "token_types": tok.token_types},
                  f)
    np.save(os.path.join(args.out, "tokens-train.npy"), train_ids)
    np.save(os.path.join(args.out, "tokens-heldout.npy"), held_ids)
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write(held_text)

    cfg = Config(vocab_size=len(tok.tokens))
    model = Model(cfg)
    print("config: %s" % json.dumps(cfg.to_dict()), flush=True)
    print("parameters: %d" % model.n_params(), flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    # Linear warm-up, then inverse square root decay. The schedule does not
    # depend on --steps, so the checkpoint of step N is the same whatever
    # --steps was: a run can be cut short and its last checkpoint reproduced
    # exactly with --steps N.
    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        return args.lr * math.sqrt(args.warmup / (step + 1))

    batch_rng = np.random.default_rng(args.seed)
    ctx = cfg.n_ctx
    loss_tsv = open(os.path.join(args.out, "loss.tsv"), "w")
    loss_tsv.write("step\ttrain_loss\theld_out_loss\tbalance\n")
    smooth = None
    t_start = time.time()
    steps = args.bench or args.steps
    for step in range(steps):
        starts = batch_rng.integers(0, len(train_ids) - ctx - 1, size=args.batch)
        batch = torch.from_numpy(np.stack([train_ids[s:s + ctx + 1] for s in starts]))
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        logits, balance, counts = model(batch[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), batch[:, 1:].reshape(-1))
        loss = ce + args.balance_coef * balance
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        smooth = ce.item() if smooth is None else 0.95 * smooth + 0.05 * ce.item()
        held = None
        last = step + 1 == steps
        if (step + 1) % args.eval_every == 0 or last:
            held = held_out_loss(model, held_ids, ctx, args.eval_windows)
        if step % 10 == 0 or held is not None:
            share = [sorted((c.float() / c.sum()).tolist(), reverse=True) for c in counts]
            top = " ".join("%.2f" % (s[0]) for s in share)
            print("step %5d  lr %.2e  loss %.4f (avg %.4f)  balance %.3f  max-expert-share %s  "
                  "%s%.0fs" % (step, lr_at(step), ce.item(), smooth, balance.item(), top,
                               "" if held is None else "held-out %.4f  " % held,
                               time.time() - t_start), flush=True)
            loss_tsv.write("%d\t%.5f\t%s\t%.4f\n" % (step, smooth,
                                                     "" if held is None else "%.5f" % held,
                                                     balance.item()))
            loss_tsv.flush()
        if args.bench:
            continue
        if (step + 1) % args.ckpt_every == 0 or last:
            state = {"config": cfg.to_dict(), "model": model.state_dict(), "step": step + 1,
                     "train_loss": smooth, "held_out_loss": held, "seed": args.seed,
                     "args": vars(args), "n_params": model.n_params()}
            name = "final.pt" if last else "ckpt-%05d.pt" % (step + 1)
            torch.save(state, os.path.join(args.out, name + ".tmp"))
            os.replace(os.path.join(args.out, name + ".tmp"), os.path.join(args.out, name))
    print("done in %.0fs" % (time.time() - t_start), flush=True)


if __name__ == "__main__":
    main()
