"""Model code as popular libraries (Hugging Face transformers, litgpt, timm, torchvision) write it.

Each test jits a small module written in one such style and compares with eager. The point is the
Python around the tensor code: keyword-heavy signatures, structured outputs, type checks, dtype
queries, size arithmetic, module containers and shared submodules.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import math
from typing import NamedTuple, Optional

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from tests.libraries import import_torchvision
from tests.models import TorchvisionMLP

pytestmark = pytest.mark.usefixtures("no_grad")

@pytest.fixture
def no_grad():
    with torch.no_grad():
        yield


def assert_equal_tree(actual, expected):
    """Same structure (types included) and bitwise-equal tensors."""
    assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        assert torch.equal(actual, expected), f"max abs diff {(actual - expected).abs().max()}"
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            assert_equal_tree(getattr(actual, f.name), getattr(expected, f.name))
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            assert_equal_tree(actual[k], expected[k])
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_equal_tree(a, e)
    else:
        assert actual == expected


# ---------------------------------------------------------------------------------------------
# Signatures: many keyword arguments with defaults (Hugging Face style)
# ---------------------------------------------------------------------------------------------


class HFStyleEncoder(nn.Module):
    """An attention layer whose forward takes the keyword arguments HF models take."""

    def __init__(self, hidden: int = 32, n_head: int = 4, vocab: int = 50):
        super().__init__()
        self.n_head = n_head
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(16, hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, input_ids: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None, inputs_embeds: Optional[torch.Tensor] = None,
                head_mask=None, output_attentions: bool = False, output_hidden_states: Optional[bool] = None,
                return_dict: Optional[bool] = None, scale: float = 1.0, **kwargs):
        if input_ids is not None and inputs_embeds is not None:
            raise ValueError("You cannot specify both input_ids and inputs_embeds at the same time")
        return_dict = return_dict if return_dict is not None else True
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
        B, T, C = inputs_embeds.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=inputs_embeds.device).unsqueeze(0).expand(B, -1)
        x = self.norm(inputs_embeds + self.pos(position_ids))
        head_dim = x.size(-1) // self.n_head  # integer arithmetic on sizes
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim) * scale
        if attention_mask is not None:
            # the extended attention mask of HF: 0 where attended, the dtype's minimum where masked
            ext = (1.0 - attention_mask[:, None, None, :].to(scores.dtype)) * torch.finfo(scores.dtype).min
            scores = scores + ext
        probs = scores.softmax(dim=-1)
        if head_mask is not None:
            probs = probs * head_mask
        y = self.out((probs @ v).transpose(1, 2).reshape(B, T, C))
        hidden_states = (x, y) if output_hidden_states else None
        attentions = (probs,) if output_attentions else None
        if not return_dict:
            return tuple(v for v in (y, hidden_states, attentions) if v is not None)
        return EncoderOutput(last_hidden_state=y, hidden_states=hidden_states, attentions=attentions)


@dataclasses.dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor
    hidden_states: Optional[tuple] = None
    attentions: Optional[tuple] = None


def _hf_inputs():
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    return ids, mask


HF_CALLS = {
    "positional": lambda ids, mask: ((ids, mask), {"return_dict": False}),
    "keywords": lambda ids, mask: ((), dict(input_ids=ids, attention_mask=mask, return_dict=False)),
    "mixed_with_flags": lambda ids, mask: ((ids,), dict(attention_mask=mask, output_attentions=True,
                                                        output_hidden_states=True, return_dict=False)),
    "positional_none_and_scale": lambda ids, mask: ((ids, None, None, None, None, False), dict(scale=0.5, return_dict=False)),
    "extra_kwargs": lambda ids, mask: ((ids,), dict(attention_mask=mask, return_dict=False, unused_flag=True)),
    "inputs_embeds": lambda ids, mask: ((), dict(inputs_embeds=torch.randn(2, 8, 32), return_dict=False)),
    "dataclass_output": lambda ids, mask: ((ids, mask), dict(output_attentions=True)),
}


@pytest.mark.parametrize("call", list(HF_CALLS))
def test_keyword_heavy_forward(call):
    torch.manual_seed(0)
    model = HFStyleEncoder().eval()
    jmodel = thunder.jit(model)
    ids, mask = _hf_inputs()
    args, kwargs = HF_CALLS[call](ids, mask)
    expected = model(*args, **kwargs)
    assert_equal_tree(jmodel(*args, **kwargs), expected)
    assert_equal_tree(jmodel(*args, **kwargs), expected)
    assert (thunder.cache_misses(jmodel), thunder.cache_hits(jmodel)) == (1, 1)


def test_keyword_heavy_forward_switching_call_styles():
    """Alternating call styles: each style compiles once, then hits its own cache entry."""
    torch.manual_seed(0)
    model = HFStyleEncoder().eval()
    jmodel = thunder.jit(model)
    ids, mask = _hf_inputs()
    calls = [HF_CALLS[c](ids, mask) for c in ("positional", "keywords", "mixed_with_flags")]
    for _ in range(2):
        for args, kwargs in calls:
            assert_equal_tree(jmodel(*args, **kwargs), model(*args, **kwargs))
    assert (thunder.cache_misses(jmodel), thunder.cache_hits(jmodel)) == (3, 3)


def test_validation_error_in_forward_propagates():
    model = HFStyleEncoder().eval()
    ids, _ = _hf_inputs()
    with pytest.raises(ValueError, match="cannot specify both"):
        thunder.jit(model)(ids, inputs_embeds=torch.randn(2, 8, 32))


# ---------------------------------------------------------------------------------------------
# Structured outputs
# ---------------------------------------------------------------------------------------------


class CausalLMOutput(NamedTuple):
    logits: torch.Tensor
    loss: Optional[torch.Tensor]


@dataclasses.dataclass
class ModelOutput:
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None
    extras: dict = dataclasses.field(default_factory=dict)
    n_tokens: int = 0


class HFModelOutput(collections.OrderedDict):
    """transformers' ModelOutput: a dataclass that is also an OrderedDict of its non-None fields."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __getitem__(self, k):
        return dict(self.items())[k] if isinstance(k, str) else tuple(self.values())[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class BaseModelOutput(HFModelOutput):
    last_hidden_state: torch.Tensor = None
    pooler_output: Optional[torch.Tensor] = None


class StructuredOutputs(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.proj = nn.Linear(16, 8)

    def forward(self, x, targets=None):
        logits = self.proj(x)
        loss = None if targets is None else F.cross_entropy(logits, targets)
        if self.kind == "namedtuple":
            return CausalLMOutput(logits, loss)
        if self.kind == "dict":
            return {"logits": logits, "loss": loss, "aux": {"mean": logits.mean(), "shape": tuple(logits.shape)}}
        if self.kind == "dataclass":
            return ModelOutput(logits=logits, loss=loss, extras={"probs": logits.softmax(-1)}, n_tokens=x.shape[0])
        if self.kind == "list_of_tuples":
            return [(logits, loss), (logits.argmax(-1),)]
        if self.kind == "ordered_dict":
            return collections.OrderedDict(logits=logits, loss=loss)
        if self.kind == "hf_model_output":
            return BaseModelOutput(last_hidden_state=logits, pooler_output=loss)
        raise ValueError(self.kind)


@pytest.mark.parametrize("with_targets", [False, True], ids=["no_targets", "targets"])
@pytest.mark.parametrize("kind", ["namedtuple", "dict", "dataclass",
                                  "list_of_tuples", "ordered_dict",
                                  "hf_model_output"])
def test_structured_outputs(kind, with_targets):
    torch.manual_seed(0)
    model = StructuredOutputs(kind)
    jmodel = thunder.jit(model)
    x = torch.randn(4, 16)
    args = (x, torch.tensor([1, 0, 7, 3])) if with_targets else (x,)
    expected = model(*args)
    for _ in range(2):
        actual = jmodel(*args)
        assert_equal_tree(actual, expected)
    if kind == "namedtuple":
        assert actual.logits is actual[0] and actual._fields == ("logits", "loss")


# ---------------------------------------------------------------------------------------------
# Python around the tensors: isinstance, finfo, size arithmetic, dtype/device queries
# ---------------------------------------------------------------------------------------------


class TypeChecks(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, bias=0.0, mask=None):
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(x)
        if isinstance(bias, torch.Tensor):
            x = x + bias
        elif isinstance(bias, (int, float)) and bias != 0:
            x = x + bias
        y = self.lin(x)
        if torch.is_tensor(mask) and mask.dtype == torch.bool:
            y = y.masked_fill(~mask, torch.finfo(y.dtype).min)
        if y.is_floating_point() and y.dtype in (torch.float16, torch.bfloat16):
            y = y.float()
        return y.softmax(-1), y.dtype, y.device, y.ndim, len(y)


@pytest.mark.parametrize("variant", ["plain", "scalar_bias", "tensor_bias", "mask"])
def test_isinstance_and_dtype_queries(variant):
    torch.manual_seed(0)
    model = TypeChecks()
    x = torch.randn(4, 8)
    kwargs = {"plain": {}, "scalar_bias": {"bias": 0.5}, "tensor_bias": {"bias": torch.randn(8)},
              "mask": {"mask": torch.rand(4, 8) > 0.3}}[variant]
    assert_equal_tree(thunder.jit(model)(x, **kwargs), model(x, **kwargs))


def test_finfo_min_masking_matches_eager():
    def masked_softmax(scores, mask):
        dtype = scores.dtype
        min_value = torch.finfo(dtype).min
        scores = torch.where(mask, scores, torch.tensor(min_value, dtype=dtype, device=scores.device))
        return scores.softmax(-1), torch.finfo(dtype).eps, torch.iinfo(torch.int32).max

    scores, mask = torch.randn(2, 4, 6), torch.rand(2, 4, 6) > 0.5
    assert_equal_tree(thunder.jit(masked_softmax)(scores, mask), masked_softmax(scores, mask))


def test_size_arithmetic():
    n_head = 4

    def split_heads(x):
        B, T = x.size(0), x.size(1)
        head_dim = x.size(-1) // n_head
        assert head_dim * n_head == x.shape[-1]
        half = head_dim // 2
        x = x.view(B, T, n_head, head_dim).transpose(1, 2)
        scale = 1 / math.sqrt(head_dim)
        return x[..., :half] * scale, x[..., half:].reshape(B * n_head, T, -1), x.numel() // B, x.shape[-1] % 3

    x = torch.randn(2, 5, 32)
    assert_equal_tree(thunder.jit(split_heads)(x), split_heads(x))


class HFRotaryEmbedding(nn.Module):
    """transformers' LlamaRotaryEmbedding: a no_grad forward computing cos/sin with autocast disabled."""

    def __init__(self, dim: int = 8, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
        with torch.autocast(device_type=device_type, enabled=False):
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def test_hf_rotary_embedding():
    model = HFRotaryEmbedding()
    x, pos = torch.randn(2, 4, 8), torch.arange(4)[None].expand(2, -1)
    assert_equal_tree(thunder.jit(model)(x, pos), model(x, pos))


def test_library_flags_and_helpers():
    """Checks libraries make before running tensor code, and mask construction in forward."""

    def fn(x):
        if torch.jit.is_scripting() or torch.jit.is_tracing():
            return x
        mask = torch.triu(torch.full((x.shape[-1], x.shape[-1]), float("-inf"), device=x.device), diagonal=1)
        zeros = x.new_zeros(x.shape) + torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        a, b = x.chunk(2, dim=-1)
        rows = torch.stack([r.sum(-1) for r in x.unbind(0)])
        return (F.pad(x, (1, 1)), mask + x[0, :, None], zeros, a * b, rows, x.max(dim=-1).values,
                torch.einsum("bij,bkj->bik", x, x), torch.is_autocast_enabled())

    x = torch.randn(2, 4, 8)
    assert_equal_tree(thunder.jit(fn)(x), fn(x))


def test_library_code_sees_compilation():
    """Value-dependent library paths are guarded by ``torch.compiler.is_compiling()``: it reports True while
    thunder traces (as under torch.compile) and False again afterwards; the stricter checks stay False."""
    import torch._dynamo

    seen = []

    def fn(x):
        seen.append((torch.compiler.is_compiling(), torch._dynamo.is_compiling(), torch.compiler.is_dynamo_compiling(),
                     torch.compiler.is_exporting(), torch.jit.is_tracing()))
        return x * 3 if torch.compiler.is_compiling() else x

    x = torch.randn(3)
    assert torch.equal(thunder.jit(fn)(x), x * 3)
    assert seen == [(True, True, False, False, False)]
    assert not torch.compiler.is_compiling()


# ---------------------------------------------------------------------------------------------
# Module containers and shared submodules
# ---------------------------------------------------------------------------------------------


class Containers(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(3)])
        self.heads = nn.ModuleDict({"cls": nn.Linear(16, 4), "reg": nn.Linear(16, 1)})
        self.act = nn.ModuleDict({"relu": nn.ReLU(), "gelu": nn.GELU()})
        self.shared = nn.Linear(16, 16)  # called twice per forward
        self.seq = nn.Sequential(collections.OrderedDict(norm=nn.LayerNorm(16), drop=nn.Dropout(0.0)))

    def forward(self, x, act: str = "gelu", heads=("cls", "reg")):
        for i, block in enumerate(self.blocks):
            x = self.act[act](block(x)) + (x if i > 0 else 0)
        x = self.blocks[-1](x) + self.blocks[0](x)  # indexing a ModuleList
        x = self.shared(self.shared(x))
        x = self.seq(x)
        x = self.seq.norm(x)
        out = {name: self.heads[name](x) for name in heads if name in self.heads}
        for name, head in self.heads.items():
            out[f"{name}_again"] = head(x)
        out["n_blocks"] = len(self.blocks)
        return out


@pytest.mark.parametrize("act,heads", [("gelu", ("cls", "reg")), ("relu", ("reg",))])
def test_module_containers_and_shared_submodule(act, heads):
    torch.manual_seed(0)
    model = Containers()
    jmodel = thunder.jit(model)
    x = torch.randn(3, 16)
    assert_equal_tree(jmodel(x, act=act, heads=heads), model(x, act=act, heads=heads))
    # each parameter is an input once, though `shared` is called twice
    comp = thunder.last_traces(jmodel)[-1]
    names = [p.name for p in comp.params]
    assert len(names) == len(set(names)) == 1 + len(list(model.parameters()))


def test_tied_weights_are_one_input():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 8)
            self.head = nn.Linear(8, 20, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, idx):
            return self.head(self.emb(idx))

    model = Tied()
    jmodel = thunder.jit(model)
    idx = torch.randint(0, 20, (2, 5))
    assert_equal_tree(jmodel(idx), model(idx))
    assert len(thunder.last_traces(jmodel)[-1].params) == 2  # idx and the one shared weight
    with torch.no_grad():
        model.emb.weight.mul_(2)  # parameters are fetched on every call: the update is seen
    assert_equal_tree(jmodel(idx), model(idx))


# ---------------------------------------------------------------------------------------------
# Calling conventions: *args/**kwargs wrappers, properties reading parameters, batches as dicts
# ---------------------------------------------------------------------------------------------


class PassThroughWrapper(nn.Module):
    """A wrapper forwarding ``*args, **kwargs``, with HF's ``device`` / ``dtype`` properties."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    @property
    def device(self):
        return next(self.parameters()).device

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def forward(self, *args, **kwargs):
        assert self.device == args[0].device
        return self.inner(*args, **kwargs).to(self.dtype)


class BatchDictModel(nn.Module):
    """Takes the data loader's batch dict, returns a dict with the loss (Lightning / HF Trainer style)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, batch, *, label_smoothing: float = 0.0):
        logits = self.lin(batch["x"])
        return {"loss": F.cross_entropy(logits, batch["labels"], label_smoothing=label_smoothing), "logits": logits}


class KeywordOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, *, x, scale=2.0):
        return self.lin(x) * scale


CALLING_CONVENTIONS = {
    "pass_through_wrapper": (PassThroughWrapper, lambda: ((torch.randn(2, 4),), {})),
    "batch_dict": (BatchDictModel, lambda: (({"x": torch.randn(2, 4), "labels": torch.tensor([0, 2])},),
                                            {"label_smoothing": 0.1})),
    "keyword_only": (KeywordOnly, lambda: ((), {"x": torch.randn(2, 4), "scale": 3.0})),
}


@pytest.mark.parametrize("name", list(CALLING_CONVENTIONS))
def test_calling_conventions(name):
    make_model, make_inputs = CALLING_CONVENTIONS[name]
    torch.manual_seed(0)
    model = make_model()
    args, kwargs = make_inputs()
    jmodel = thunder.jit(model)
    assert_equal_tree(jmodel(*args, **kwargs), model(*args, **kwargs))
    assert_equal_tree(jmodel(*args, **kwargs), model(*args, **kwargs))
    assert thunder.cache_hits(jmodel) == 1


# ---------------------------------------------------------------------------------------------
# torch.nn's own composite modules, as libraries use them
# ---------------------------------------------------------------------------------------------

NN_MODULES = {
    "multihead_attention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True),
                            lambda: ((torch.randn(2, 5, 8),) * 3, {"need_weights": False})),
    "multihead_attention_weights_padding": (
        lambda: nn.MultiheadAttention(8, 2, batch_first=True),
        lambda: ((torch.randn(2, 5, 8),) * 3, {"key_padding_mask": torch.tensor([[False] * 5, [False] * 3 + [True] * 2])})),
    "transformer_encoder_layer": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True),
                                  lambda: ((torch.randn(2, 5, 8),), {})),
    "transformer_encoder_causal": (
        lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True),
                                      2, enable_nested_tensor=False),
        lambda: ((torch.randn(2, 5, 8),), {"mask": nn.Transformer.generate_square_subsequent_mask(5), "is_causal": True})),
    "gru": (lambda: nn.GRU(4, 6, num_layers=2, batch_first=True), lambda: ((torch.randn(2, 3, 4),), {})),
    "lstm": (lambda: nn.LSTM(4, 6, batch_first=True, bidirectional=True), lambda: ((torch.randn(2, 3, 4),), {})),
    "embedding_padding_idx": (lambda: nn.Embedding(10, 4, padding_idx=0), lambda: ((torch.tensor([[0, 3, 4]]),), {})),
    "group_norm": (lambda: nn.GroupNorm(2, 4), lambda: ((torch.randn(2, 4, 3, 3),), {})),
    "instance_norm": (lambda: nn.InstanceNorm2d(4, affine=True), lambda: ((torch.randn(2, 4, 3, 3),), {})),
    "upsample_nearest": (lambda: nn.Upsample(scale_factor=2, mode="nearest"), lambda: ((torch.randn(2, 4, 3, 3),), {})),
    "adaptive_avg_pool": (lambda: nn.AdaptiveAvgPool2d(1), lambda: ((torch.randn(2, 4, 3, 3),), {})),
    "conv_transpose": (lambda: nn.ConvTranspose2d(4, 2, 3, stride=2), lambda: ((torch.randn(2, 4, 3, 3),), {})),
    "conv1d_same_padding": (lambda: nn.Conv1d(4, 2, 3, padding="same"), lambda: ((torch.randn(2, 4, 7),), {})),
}


def _tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _tensors(y)]
    return []


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", list(NN_MODULES))
def test_torch_nn_modules(name, train):
    """Float tolerance: e.g. eval-mode MultiheadAttention takes a fused fast path in eager that thunder decomposes."""
    make_model, make_inputs = NN_MODULES[name]
    torch.manual_seed(0)
    model = make_model().train(train)
    args, kwargs = make_inputs()
    torch.manual_seed(1)
    expected = model(*args, **kwargs)
    torch.manual_seed(1)
    actual = thunder.jit(model)(*args, **kwargs)
    assert type(actual) is type(expected)
    actual, expected = _tensors(actual), _tensors(expected)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# The seed example: torchvision's MLP on MNIST-shaped inputs
# ---------------------------------------------------------------------------------------------


def _torchvision_mlp(in_channels, hidden, dropout):
    try:
        torchvision = import_torchvision()
    except Exception:  # noqa: BLE001 - not installed, or built for another torch
        return TorchvisionMLP(in_channels, hidden, dropout=dropout)
    return torchvision.ops.MLP(in_channels=in_channels, hidden_channels=hidden, bias=True, dropout=dropout)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_mnist_mlp(train):
    torch.manual_seed(0)
    model = _torchvision_mlp(784, [128, 128, 28, 10], dropout=0.1).train(train)
    jmodel = thunder.jit(model)
    data = torch.rand(8, 1, 28, 28).flatten(1)  # the seed example's flatten transform
    for seed in (1, 2):
        torch.manual_seed(seed)
        expected = model(data)
        torch.manual_seed(seed)
        actual = jmodel(data)
        assert torch.equal(actual, expected)
        assert torch.equal(torch.argmax(actual, 1), torch.argmax(expected, 1))
    assert thunder.cache_hits(jmodel) == 1


# ---------------------------------------------------------------------------------------------
# Mode flags read in forward
# ---------------------------------------------------------------------------------------------


class ModeDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(self.lin(x))
        if self.training:
            return y * 2
        return y - 1


def test_train_eval_switch_recompiles():
    torch.manual_seed(0)
    model = ModeDependent()
    jmodel = thunder.jit(model)
    x = torch.randn(4, 8)
    for train in (True, False, True, False):
        model.train(train)
        torch.manual_seed(3)
        expected = model(x)
        torch.manual_seed(3)
        assert torch.equal(jmodel(x), expected)
    assert (thunder.cache_misses(jmodel), thunder.cache_hits(jmodel)) == (2, 2)
