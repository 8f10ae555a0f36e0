#!/usr/bin/python3
"""Routing figures of the trained demo model on the held-out text, per layer.

    /usr/bin/python3 scripts/demo-model/measure_routing.py \
        --ckpt build/demo-model/final.pt --tokens build/demo-model/tokens-heldout.npy

For every token (windows of n_ctx as in training) and layer L:
- usage skew: how many of the layer's experts take 50% (and 80%) of its routes;
- next-layer prediction as colibri's Session does it: layer L+d's ffn_norm and
  router applied to the residual stream at layer L's MoE input, top `count`
  experts, against the experts layer L+d really routes the token to. Recall is
  hits / routed, precision hits / predicted, per token (what colibri's decode
  figures count, one token per batch), for d = 1, 2 and count = k, 1.5 k.
"""

import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokens", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    ckpt = torch.load(args.ckpt, map_location="cpu")
    cfg = Config(**ckpt["config"])
    model = Model(cfg)
    model.load_state_dict(ckpt["model"])
    model.eval()
    ids = np.load(args.tokens)
    ctx, k, E, L = cfg.n_ctx, cfg.n_expert_used, cfg.n_expert, cfg.n_layer
    n_windows = (len(ids) - 1) // ctx
    batch = torch.tensor(np.stack([ids[i * ctx:i * ctx + ctx] for i in range(n_windows)]))

    # Residual stream at each layer's MoE input (after attention), flattened.
    moe_in = []
    with torch.no_grad():
        x = model.tok_emb(batch)
        cos, sin = model.rope_cos[:ctx], model.rope_sin[:ctx]
        for b in model.blocks:
            x = x + b.attention(b.attn_norm(x), cos, sin)
            moe_in.append(x.reshape(-1, cfg.n_embd).clone())
            y, _, _ = b.moe(b.ffn_norm(x).reshape(-1, cfg.n_embd))
            x = x + y.view_as(x)

        def top(layer, resid, count):
            b = model.blocks[layer]
            return torch.topk(b.router(b.ffn_norm(resid)), count, dim=-1).indices

        routed = [top(l, moe_in[l], k) for l in range(L)]
    n_tok = routed[0].shape[0]
    print("held-out tokens: %d (%d windows of %d); %d experts top-%d, %d layers" %
          (n_tok, n_windows, ctx, E, k, L))

    print("\nexpert usage (share of the layer's routes):")
    print("layer  experts for 50%  for 80%  top expert  least expert")
    for l in range(L):
        counts = torch.bincount(routed[l].reshape(-1), minlength=E).double()
        share = (counts / counts.sum()).sort(descending=True).values
        cum = share.cumsum(0)
        n50 = int((cum < 0.5).sum().item()) + 1
        n80 = int((cum < 0.8).sum().item()) + 1
        print("%5d  %15d  %7d  %10.3f  %12.4f" % (l, n50, n80, share[0].item(), share[-1].item()))

    counts_to_try = [k, int(math.ceil(1.5 * k))]
    print("\nnext-layer prediction (per token):")
    print("layer  depth  count  recall  precision")
    totals = {}
    with torch.no_grad():
        for d in (1, 2):
            for c in counts_to_try:
                hits_all = routed_all = pred_all = 0
                for l in range(L - d):
                    pred = top(l + d, moe_in[l], c)
                    actual = routed[l + d]
                    hits = (pred.unsqueeze(-1) == actual.unsqueeze(-2)).any(-1).sum().item()
                    print("%5d  %5d  %5d  %6.3f  %9.3f" % (l + d, d, c, hits / actual.numel(),
                                                          hits / pred.numel()))
                    hits_all += hits
                    routed_all += actual.numel()
                    pred_all += pred.numel()
                totals[(d, c)] = (hits_all / routed_all, hits_all / pred_all)
    print("\nall layers:")
    for (d, c), (r, p) in sorted(totals.items()):
        print("depth %d count %d: recall %.3f precision %.3f" % (d, c, r, p))


if __name__ == "__main__":
    main()
