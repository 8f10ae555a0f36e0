"""A Qwen3-MoE-shaped transformer exactly as `qwen3moe` GGUFs define it.

Per block: x += Wo * Attn(RoPE_neox(q_norm(Wq n)), RoPE_neox(k_norm(Wk n)), Wv n)
with n = attn_norm(x), grouped-query attention, per-head RMSNorm on q and k
before RoPE, scale 1/sqrt(head_dim); then x += MoE(ffn_norm(x)) where the
router is a bias-free linear layer, probabilities are the softmax over all
experts, the top-k are kept and renormalised to sum to 1, and each expert is
SwiGLU: down(silu(gate x) * up x). No shared expert, no biases. The output
head is tied to the token embedding (GGUF: no output.weight).

Expert computation is batched: the tokens routed to each expert are gathered
and go through that expert's matrices in one matmul.
"""

import math
from dataclasses import dataclass, asdict

import torch
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 2048
    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    n_expert: int = 16
    n_expert_used: int = 2
    n_ff_exp: int = 128
    n_ctx: int = 128
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-6

    def to_dict(self):
        return asdict(self)


class RmsNorm(torch.nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n):
    half = cfg.head_dim // 2
    freq = cfg.rope_freq_base ** (-2.0 * torch.arange(half, dtype=torch.float64) / cfg.head_dim)
    theta = torch.arange(n, dtype=torch.float64)[:, None] * freq[None, :]
    return torch.cos(theta).float(), torch.sin(theta).float()


def apply_rope_neox(x, cos, sin):
    """x: [B, H, T, hd]; rotates (x[i], x[i + hd/2]) pairs (NEOX layout)."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, hd, E, ff = cfg.n_embd, cfg.head_dim, cfg.n_expert, cfg.n_ff_exp
        self.cfg = cfg
        self.attn_norm = RmsNorm(d, cfg.rms_eps)
        self.wq = torch.nn.Linear(d, cfg.n_head * hd, bias=False)
        self.wk = torch.nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.wv = torch.nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.wo = torch.nn.Linear(cfg.n_head * hd, d, bias=False)
        self.q_norm = RmsNorm(hd, cfg.rms_eps)
        self.k_norm = RmsNorm(hd, cfg.rms_eps)
        self.ffn_norm = RmsNorm(d, cfg.rms_eps)
        self.router = torch.nn.Linear(d, E, bias=False)
        # GGUF layouts: gate/up [E, ff, d] (dims {d, ff, E}), down [E, d, ff].
        self.gate = torch.nn.Parameter(torch.empty(E, ff, d))
        self.up = torch.nn.Parameter(torch.empty(E, ff, d))
        self.down = torch.nn.Parameter(torch.empty(E, d, ff))

    def attention(self, x, cos, sin):
        cfg = self.cfg
        B, T, _ = x.shape
        hd = cfg.head_dim
        q = self.q_norm(self.wq(x).view(B, T, cfg.n_head, hd)).transpose(1, 2)
        k = self.k_norm(self.wk(x).view(B, T, cfg.n_head_kv, hd)).transpose(1, 2)
        v = self.wv(x).view(B, T, cfg.n_head_kv, hd).transpose(1, 2)
        q = apply_rope_neox(q, cos, sin)
        k = apply_rope_neox(k, cos, sin)
        group = cfg.n_head // cfg.n_head_kv
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        y = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(B, T, cfg.n_head * hd))

    def moe(self, x):
        """x: [N, d] -> ([N, d], load-balancing loss, routed counts per expert)."""
        cfg = self.cfg
        probs = torch.softmax(self.router(x), dim=-1)
        top_w, top_i = torch.topk(probs, cfg.n_expert_used, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        flat_i = top_i.reshape(-1)
        flat_w = top_w.reshape(-1)
        token_of_slot = torch.arange(x.shape[0], device=x.device).repeat_interleave(
            cfg.n_expert_used)
        order = torch.argsort(flat_i, stable=True)
        counts = torch.bincount(flat_i, minlength=cfg.n_expert)
        start = 0
        for e, c in enumerate(counts.tolist()):
            if c == 0:
                continue
            slots = order[start:start + c]
            start += c
            tokens = token_of_slot[slots]
            xe = x[tokens]
            h = F.silu(xe @ self.gate[e].t()) * (xe @ self.up[e].t())
            out.index_add_(0, tokens, (h @ self.down[e].t()) * flat_w[slots, None])
        # Switch-style balance loss: E * sum_e (fraction of routes to e) * (mean prob of e).
        frac = counts.float() / flat_i.numel()
        balance = cfg.n_expert * torch.sum(frac * probs.mean(0))
        return out, balance, counts

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attn_norm(x), cos, sin)
        B, T, d = x.shape
        y, balance, counts = self.moe(self.ffn_norm(x).reshape(B * T, d))
        return x + y.view(B, T, d), balance, counts


class Model(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = torch.nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = RmsNorm(cfg.n_embd, cfg.rms_eps)
        cos, sin = rope_tables(cfg, cfg.n_ctx)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        out_std = std / math.sqrt(2 * self.cfg.n_layer)
        torch.nn.init.normal_(self.tok_emb.weight, std=std)
        for b in self.blocks:
            for lin in (b.wq, b.wk, b.wv, b.router):
                torch.nn.init.normal_(lin.weight, std=std)
            torch.nn.init.normal_(b.wo.weight, std=out_std)
            torch.nn.init.normal_(b.gate, std=std)
            torch.nn.init.normal_(b.up, std=std)
            torch.nn.init.normal_(b.down, std=out_std)

    def forward(self, idx):
        """idx: [B, T] -> (logits [B, T, V], mean balance loss, per-layer route counts)."""
        T = idx.shape[1]
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.tok_emb(idx)
        balance = 0.0
        counts = []
        for b in self.blocks:
            x, bal, c = b(x, cos, sin)
            balance = balance + bal
            counts.append(c)
        logits = self.output_norm(x) @ self.tok_emb.weight.t()
        return logits, balance / len(self.blocks), counts

    def n_params(self):
        return sum(p.numel() for p in self.parameters())
