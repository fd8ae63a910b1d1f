"""The models of benchmarks/fusion.py, each a module ``model(idx, targets) -> loss``.

The Llama here writes out what fusion has to find: attention by hand (``q @ k^T * scale``, a causal
mask by ``masked_fill``, ``softmax``, ``@ v``; or ``F.scaled_dot_product_attention`` with
``attention="sdpa"``) and the hand-written RMSNorm of Llama's reference code (tests/models.py's
``RMSNorm``: float32, ``pow(2).mean``, ``rsqrt``, ``type_as``, ``* weight``), with RoPE, a SwiGLU MLP
and an untied LM head. The GPT is tests/models.py's, with the loss it computes itself.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
from tests.models import GPT, GPTConfig, RMSNorm, SwiGLU, apply_rotary_pos_emb, build_rope_cache  # noqa: E402


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    intermediate_size: int
    attention: str = "manual"  # "manual" or "sdpa"
    norm_eps: float = 1e-5

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.config.n_head, self.config.head_size).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary_pos_emb(q, cos, sin), apply_rotary_pos_emb(k, cos, sin)
        if self.config.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.config.head_size))
            att = att.masked_fill(mask, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = Attention(config)
        self.norm_2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.norm_1(x), cos, sin, mask)
        return x + self.mlp(self.norm_2(x))


class LlamaLM(nn.Module):
    """A Llama-style language model whose forward returns the cross-entropy loss."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        cos, sin = build_rope_cache(config.block_size, config.head_size)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        causal = torch.ones(config.block_size, config.block_size, dtype=torch.bool).triu(1)
        self.register_buffer("mask", causal, persistent=False)  # True above the diagonal: masked out

    def forward(self, idx, targets):
        T = idx.size(1)
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:T, :T]
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class GPTLM(nn.Module):
    """tests/models.py's GPT, returning only its loss."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.gpt = GPT(config)

    def forward(self, idx, targets):
        return self.gpt(idx, targets)[1]


class Workload(NamedTuple):
    label: str
    make_model: Callable[[], nn.Module]
    vocab_size: int
    batch: int
    seq: int


def llama(scale: str, attention: str) -> Workload:
    """scale "cpu": 2x256 (3.7M parameters); "gpu": 12x768 (134M); "tiny": 2x64, to smoke-test a path; "host": the
    GPU model's 12 layers at width 64, sequence 32, batch 1, where a CPU step is bound by the Python that launches
    the kernels, as the full model's step is on a GPU."""
    shapes = {
        "cpu": dict(n_layer=2, n_embd=256, n_head=4, intermediate_size=688, vocab_size=4096, block_size=128, batch=8),
        "gpu": dict(n_layer=12, n_embd=768, n_head=12, intermediate_size=2048, vocab_size=32000, block_size=1024,
                    batch=8),
        "tiny": dict(n_layer=2, n_embd=64, n_head=4, intermediate_size=176, vocab_size=512, block_size=64, batch=2),
        "host": dict(n_layer=12, n_embd=64, n_head=4, intermediate_size=176, vocab_size=512, block_size=32, batch=1),
    }[scale]
    batch = shapes.pop("batch")
    cfg = LlamaConfig(**shapes, attention=attention)
    label = f"Llama {cfg.n_layer}x{cfg.n_embd} {attention} attn, seq {cfg.block_size}, batch {batch}"
    return Workload(label, lambda: LlamaLM(cfg), cfg.vocab_size, batch, cfg.block_size)


def gpt(scale: str, attention: str) -> Workload:
    """scale "cpu": tests/models.py's GPT as benchmarks/training.py runs it; "gpu": GPT-2 small; "tiny"; "host"."""
    del attention  # the GPT keeps F.scaled_dot_product_attention
    cfg = {
        "cpu": GPTConfig(vocab_size=4096, block_size=128, n_layer=4, n_head=4, n_embd=256, dropout=0.1),
        "gpu": GPTConfig.gpt2_small(dropout=0.1),
        "tiny": GPTConfig(vocab_size=512, block_size=64, n_layer=2, n_head=4, n_embd=64, dropout=0.1),
        "host": GPTConfig(vocab_size=512, block_size=32, n_layer=12, n_head=4, n_embd=64, dropout=0.1),
    }[scale]
    batch = {"cpu": 8, "gpu": 8, "tiny": 2, "host": 1}[scale]
    label = f"GPT {cfg.n_layer}x{cfg.n_embd} sdpa, seq {cfg.block_size}, batch {batch}"
    return Workload(label, lambda: GPTLM(cfg), cfg.vocab_size, batch, cfg.block_size)


WORKLOADS = {"llama": llama, "gpt": gpt}
