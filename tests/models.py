"""Small models written the way popular libraries write them, for parity tests against eager PyTorch.

Each model comes with a ``ModelCase``: how to build it and how to make its inputs. Sizes are small
so the tests stay fast; ``GPTConfig.gpt2_small()`` gives the 124M-parameter GPT-2 the benchmarks use.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# MLPs
# ---------------------------------------------------------------------------------------------


class MLP(nn.Module):
    """A plain stack of Linear + ReLU layers (the benchmark's 8-layer MLP uses ``n_layers=8``)."""

    def __init__(self, width: int = 32, n_layers: int = 2, in_features: int | None = None, out_features: int | None = None):
        super().__init__()
        dims = [in_features or width] + [width] * (n_layers - 1) + [out_features or width]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class TorchvisionMLP(nn.Sequential):
    """``torchvision.ops.MLP`` written by hand: [Linear, ReLU, Dropout] per hidden layer, then Linear, Dropout.

    The seed MNIST example jits ``torchvision.ops.MLP(in_channels=784, hidden_channels=[784, 784, 784, 28, 10],
    dropout=.1)``; the tests use narrower layers.
    """

    def __init__(self, in_channels: int, hidden_channels: list[int], dropout: float = 0.1, inplace: bool | None = None):
        params = {} if inplace is None else {"inplace": inplace}
        layers: list[nn.Module] = []
        in_dim = in_channels
        for hidden_dim in hidden_channels[:-1]:
            layers.append(nn.Linear(in_dim, hidden_dim, bias=True))
            layers.append(nn.ReLU(**params))
            layers.append(nn.Dropout(dropout, **params))
            in_dim = hidden_dim
        layers.append(nn.Linear(in_dim, hidden_channels[-1], bias=True))
        layers.append(nn.Dropout(dropout, **params))
        super().__init__(*layers)


# ---------------------------------------------------------------------------------------------
# CNN
# ---------------------------------------------------------------------------------------------


class CNN(nn.Module):
    """Conv2d + BatchNorm2d + ReLU + MaxPool blocks, then a Linear classifier."""

    def __init__(self, in_channels: int = 3, channels: int = 8, n_classes: int = 10, image_size: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * channels, momentum=0.2)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(2 * channels * (image_size // 4) ** 2, n_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        return self.fc(torch.flatten(x, 1))


# ---------------------------------------------------------------------------------------------
# GPT (nanoGPT / GPT-2 style)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 96
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    dropout: float = 0.1
    bias: bool = True
    use_sdpa: bool = True  # F.scaled_dot_product_attention(is_causal=True), else masked softmax with a tril buffer

    @classmethod
    def gpt2_small(cls, **overrides) -> "GPTConfig":
        base = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, dropout=0.0)
        return cls(**{**base, **overrides})


# The blocks are the launcher's model (launch/gpt.py), configured by this module's GPTConfig.
from launch.gpt import GPT, CausalSelfAttention, GPTBlock, GPTMLP  # noqa: E402,F401


# ---------------------------------------------------------------------------------------------
# Llama (litgpt / HF style)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 96
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 4
    n_query_groups: int = 2  # grouped-query attention: n_head // n_query_groups query heads share a KV head
    n_embd: int = 32
    intermediate_size: int = 88
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    builtin_rmsnorm: bool = False  # nn.RMSNorm, else the hand-written RMSNorm below
    expand_kv: bool = False  # repeat KV heads with expand + reshape, else with repeat_interleave

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    """The hand-written RMSNorm of Llama's reference code: computes in float32, casts back."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


def build_rope_cache(seq_len: int, n_elem: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2).float() / n_elem))
    idx_theta = torch.outer(torch.arange(seq_len).float(), theta)
    emb = torch.cat((idx_theta, idx_theta), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    return (x * cos) + (rotate_half(x) * sin)


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        hs = config.head_size
        self.q_proj = nn.Linear(config.n_embd, config.n_head * hs, bias=False)
        self.k_proj = nn.Linear(config.n_embd, config.n_query_groups * hs, bias=False)
        self.v_proj = nn.Linear(config.n_embd, config.n_query_groups * hs, bias=False)
        self.o_proj = nn.Linear(config.n_head * hs, config.n_embd, bias=False)

    def _repeat_kv(self, x):
        n_rep = self.config.n_head // self.config.n_query_groups
        if n_rep == 1:
            return x
        if not self.config.expand_kv:
            return x.repeat_interleave(n_rep, dim=1)
        B, G, T, hs = x.shape
        return x[:, :, None, :, :].expand(B, G, n_rep, T, hs).reshape(B, G * n_rep, T, hs)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        hs = self.config.head_size
        q = self.q_proj(x).view(B, T, self.config.n_head, hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.config.n_query_groups, hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.config.n_query_groups, hs).transpose(1, 2)
        q = apply_rotary_pos_emb(q, cos, sin)
        k = apply_rotary_pos_emb(k, cos, sin)
        k, v = self._repeat_kv(k), self._repeat_kv(v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.config.n_head * hs))


class SwiGLU(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def _rmsnorm(config: LlamaConfig) -> nn.Module:
    if config.builtin_rmsnorm:
        return nn.RMSNorm(config.n_embd, eps=config.norm_eps)
    return RMSNorm(config.n_embd, eps=config.norm_eps)


class LlamaBlock(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.input_layernorm = _rmsnorm(config)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = _rmsnorm(config)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.n_embd)
        self.layers = nn.ModuleList(LlamaBlock(config) for _ in range(config.n_layer))
        self.norm = _rmsnorm(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        cos, sin = build_rope_cache(config.block_size, config.head_size, config.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx):
        T = idx.size(1)
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


# ---------------------------------------------------------------------------------------------
# The cases the parity tests run
# ---------------------------------------------------------------------------------------------


class ModelCase(NamedTuple):
    name: str
    make_model: Callable[[], nn.Module]
    make_inputs: Callable[[], tuple]  # positional arguments of forward
    atol: float = 0.0  # 0: bitwise; else a float tolerance, where thunder runs other kernels than eager


def _tokens(vocab: int, batch: int = 2, seq: int = 12):
    return lambda: (torch.randint(0, vocab, (batch, seq)),)


MODEL_CASES = [
    ModelCase("mlp", lambda: MLP(width=32, n_layers=3), lambda: (torch.randn(4, 32),)),
    ModelCase("torchvision_mlp", lambda: TorchvisionMLP(64, [48, 48, 16, 10], dropout=0.1), lambda: (torch.randn(8, 64),)),
    ModelCase("cnn", lambda: CNN(3, 8, 10, image_size=16), lambda: (torch.randn(4, 3, 16, 16),)),
    ModelCase("gpt_block_sdpa", lambda: GPTBlock(GPTConfig(use_sdpa=True)), lambda: (torch.randn(2, 12, 32),)),
    ModelCase("gpt_block_masked", lambda: GPTBlock(GPTConfig(use_sdpa=False)), lambda: (torch.randn(2, 12, 32),)),
    ModelCase("gpt_sdpa", lambda: GPT(GPTConfig(use_sdpa=True)), _tokens(96)),
    ModelCase("gpt_masked", lambda: GPT(GPTConfig(use_sdpa=False)), _tokens(96)),
    ModelCase("llama", lambda: Llama(LlamaConfig()), _tokens(96)),
    ModelCase("llama_builtin_rmsnorm_expand_kv", lambda: Llama(LlamaConfig(builtin_rmsnorm=True, expand_kv=True)), _tokens(96)),
    ModelCase("llama_mha", lambda: Llama(LlamaConfig(n_query_groups=4)), _tokens(96)),
]


class LMLoss(nn.Module):
    """A language model whose forward returns ``(logits, ...)``, with the cross-entropy loss over the tokens."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx, targets):
        logits, _ = self.model(idx)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class RankDependentBranch(nn.Module):
    """Which layer runs depends on the data (rank-local): ``layers`` picks other layers per rank, ``scale`` only
    scales the output (the same gradients to reduce on every rank, in another trace)."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        if self.what == "layers":
            return self.a(x) if x.sum() > 0 else self.b(x)
        y = self.b(self.a(x))
        return y * 2 if x.sum() > 0 else y


class LinearFunction(torch.autograd.Function):
    """A linear layer with a hand-written backward (a custom autograd.Function): its gradients come from user code."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.t() + b

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x, g.sum(0)


class CustomFunctionMLP(nn.Module):
    """Two linear layers computed by ``LinearFunction``."""

    def __init__(self, in_features=8, hidden=16, out_features=4):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(in_features, hidden), nn.Linear(hidden, out_features)

    def forward(self, x):
        h = LinearFunction.apply(x, self.fc1.weight, self.fc1.bias).tanh()
        return LinearFunction.apply(h, self.fc2.weight, self.fc2.bias)
