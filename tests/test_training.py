"""Training with thunder: forward/backward traces, torch.autograd integration and parity with eager."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import thunder
from tests.models import CNN, GPT, GPTConfig, Llama, LlamaConfig, TorchvisionMLP
from tests.parity import NotBitwise, check_training_parity


def _loss(out):
    if isinstance(out, tuple):
        logits, loss = out
        return loss if loss is not None else logits.float().pow(2).mean()
    return out.float().pow(2).mean() if out.ndim else out


def _train(model, make_batch, steps, *, jit, seed=0, accumulate=1, autocast=False):
    """Runs ``steps`` optimizer steps; returns the losses.

    SGD with momentum rather than Adam: Adam normalizes each gradient element, so it would blow a
    gradient that is zero in exact arithmetic (the key bias of attention) and ~1e-9 in floating point
    up to a full step, turning last-bit kernel differences into visible parameter differences.
    """
    m = thunder.jit(model) if jit else model
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2, momentum=0.9)
    losses = []
    for step in range(steps):
        for micro in range(accumulate):
            inputs = make_batch(step * accumulate + micro)
            torch.manual_seed(1000 + step * accumulate + micro)  # same dropout masks in both runs
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = _loss(m(*inputs))
            loss.backward()
            losses.append(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, m


def _batches(kind):
    def make(i):
        g = torch.Generator().manual_seed(i)
        if kind == "mlp":
            return (torch.randn(8, 64, generator=g),)
        if kind == "cnn":
            return (torch.randn(4, 3, 16, 16, generator=g),)
        idx = torch.randint(0, 96, (2, 12), generator=g)
        if kind == "gpt":
            return idx, torch.randint(0, 96, (2, 12), generator=g)
        return (idx,)

    return make


TRAIN_CASES = {
    "seed_mlp": (lambda: TorchvisionMLP(64, [48, 48, 16, 10], dropout=0.1), "mlp"),
    "cnn_batchnorm": (lambda: CNN(3, 8, 10, image_size=16), "cnn"),
    "gpt_tied": (lambda: GPT(GPTConfig(use_sdpa=True, dropout=0.1)), "gpt"),
    "gpt_masked_softmax": (lambda: GPT(GPTConfig(use_sdpa=False, dropout=0.1)), "gpt"),
    "llama": (lambda: Llama(LlamaConfig()), "llama"),
}


def _assert_same_training(make, kind, *, accumulate=1, autocast=False, freeze=None, atol=1e-5):
    torch.manual_seed(0)
    ref_model = make()
    model = copy.deepcopy(ref_model)
    if freeze:
        for m in (ref_model, model):
            for n, p in m.named_parameters():
                if freeze in n:
                    p.requires_grad_(False)
    ref_losses, _ = _train(ref_model, _batches(kind), 3, jit=False, accumulate=accumulate, autocast=autocast)
    losses, jm = _train(model, _batches(kind), 3, jit=True, accumulate=accumulate, autocast=autocast)
    for a, b in zip(ref_losses, losses):
        torch.testing.assert_close(b, a, atol=atol, rtol=atol)
    for (name, p_ref), p in zip(ref_model.named_parameters(), model.parameters()):
        torch.testing.assert_close(p, p_ref, atol=atol, rtol=atol, msg=lambda m: f"{name}: {m}")
    for (name, b_ref), b in zip(ref_model.named_buffers(), model.buffers()):
        torch.testing.assert_close(b, b_ref, atol=atol, rtol=atol, msg=lambda m: f"{name}: {m}")
    return jm


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_training_parity(case):
    make, kind = TRAIN_CASES[case]
    jm = _assert_same_training(make, kind)
    assert thunder.last_backward_traces(jm), "training must produce a backward trace"


@pytest.mark.parametrize("case", ["seed_mlp", "gpt_tied"])
def test_gradient_accumulation(case):
    make, kind = TRAIN_CASES[case]
    _assert_same_training(make, kind, accumulate=3)


@pytest.mark.parametrize("case,frozen", [("seed_mlp", "0."), ("gpt_tied", "wpe"), ("llama", "norm")])
def test_frozen_parameters(case, frozen):
    make, kind = TRAIN_CASES[case]
    _assert_same_training(make, kind, freeze=frozen)


@pytest.mark.parametrize("case", ["seed_mlp", "gpt_tied", "cnn_batchnorm"])
def test_autocast_training(case):
    make, kind = TRAIN_CASES[case]
    _assert_same_training(make, kind, autocast=True, atol=1e-2)


# ---------------------------------------------------------------------------------------------
# Dropout and other random ops
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("how", ["F.dropout(inplace=True)", "torch.dropout_", "nn.Dropout(inplace=True)"])
def test_inplace_dropout_draws_the_inplace_mask(how, grad):
    """Eager draws in-place dropout's mask with bernoulli_ on every device (F.dropout's is fused on CUDA): the
    trace says which mask it draws (``dropout_mask(..., True)``), and the values are eager's."""
    drop = nn.Dropout(0.3, inplace=True)

    def f(x):
        y = x * 1
        if how == "F.dropout(inplace=True)":
            F.dropout(y, 0.3, inplace=True)
        elif how == "torch.dropout_":
            torch.dropout_(y, 0.3, True)
        else:
            drop(y.flatten())
        return F.dropout(y, 0.1) * 2

    x = torch.randn(4, 8, requires_grad=grad)
    jf = thunder.jit(f)
    torch.manual_seed(3)
    expected = f(x)
    torch.manual_seed(3)
    assert torch.equal(jf(x), expected)
    masks = [b for b in thunder.last_traces(jf)[-1].bound_symbols if b.sym.name == "dropout_mask"]
    # the out-of-place dropout draws F.dropout's mask (run as F.dropout itself where no gradient is needed)
    assert [b.args[2:] for b in masks] == ([(True,), ()] if grad else [(True,)]), [str(b) for b in masks]


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_dropout_bitwise_with_same_seed(p):
    m = nn.Sequential(nn.Linear(16, 32), nn.Dropout(p), nn.ReLU(), nn.Dropout(p))
    jm = thunder.jit(m)
    x = torch.randn(4, 16, requires_grad=True)
    torch.manual_seed(7)
    ref = m(x)
    ref.sum().backward()
    gref = x.grad
    x.grad = None
    torch.manual_seed(7)
    out = jm(x)
    out.sum().backward()
    assert torch.equal(out, ref)
    assert torch.equal(x.grad, gref)  # the backward uses exactly the forward's mask
    # The RNG advanced exactly as in eager.
    torch.manual_seed(7)
    m(x)
    after_eager = torch.rand(3)
    torch.manual_seed(7)
    jm(x)
    assert torch.equal(torch.rand(3), after_eager)


def test_random_ops_match_eager_rng():
    def f(x):
        return x + torch.randn(x.shape) * torch.rand_like(x)

    jf = thunder.jit(f)
    x = torch.randn(5, 5)
    torch.manual_seed(3)
    ref = f(x)
    torch.manual_seed(3)
    assert torch.equal(jf(x), ref)


# ---------------------------------------------------------------------------------------------
# torch.autograd integration
# ---------------------------------------------------------------------------------------------


def test_grad_accumulates_into_existing_grad_and_inputs():
    def f(a, b):
        return (a * b).tanh().sum() + (a @ b.T).sum()

    jf = thunder.jit(f)
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    a.grad = torch.ones_like(a)
    f(a, b).backward()
    ga, gb = a.grad.clone(), b.grad.clone()
    a.grad = torch.ones_like(a)
    b.grad = None
    jf(a, b).backward()
    torch.testing.assert_close(a.grad, ga)
    torch.testing.assert_close(b.grad, gb)


def test_requires_grad_false_inputs_get_no_grad():
    def f(a, b):
        return (a * b).sum()

    jf = thunder.jit(f)
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    jf(a, b).backward()
    assert b.grad is None
    torch.testing.assert_close(a.grad, b)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_no_grad_modes_produce_plain_outputs(mode):
    m = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    with ctx:
        out = jm(x)
        assert torch.equal(out, m(x))
    assert not out.requires_grad and out.grad_fn is None
    assert not thunder.last_backward_traces(jm)
    # Back in grad mode, a new (training) specialization is compiled.
    out = jm(x)
    assert out.requires_grad


def test_torch_autograd_grad_on_jitted_outputs():
    def f(x, w):
        return torch.sigmoid(x @ w).mean(0)

    jf = thunder.jit(f)
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    expected = torch.autograd.grad(f(x, w).sum(), (x, w))
    got = torch.autograd.grad(jf(x, w).sum(), (x, w))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)


def test_double_backward_raises_clear_error():
    jf = thunder.jit(lambda x: (x**3).sum())
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(jf(x), x, create_graph=True)


def test_non_differentiable_outputs():
    def f(x):
        return x.sin(), x.argmax(dim=1), x > 0

    jf = thunder.jit(f)
    x = torch.randn(3, 4, requires_grad=True)
    s, idx, mask = jf(x)
    assert s.requires_grad and not idx.requires_grad and not mask.requires_grad
    assert torch.equal(idx, x.argmax(dim=1)) and torch.equal(mask, x > 0)
    s.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())


def test_detach_and_no_grad_inside_the_program():
    def f(x):
        with torch.no_grad():
            scale = x.abs().max()
        return (x * scale).sum() + (x.detach() * x).sum()

    jf = thunder.jit(f)
    x = torch.randn(4, requires_grad=True)
    f(x).backward()
    expected = x.grad
    x.grad = None
    jf(x).backward()
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.parametrize("fn", [
    lambda x: torch.special.erfcx(x),
    lambda x: torch.cummax(x, 0).values,
    lambda x: F.max_pool2d(x.view(1, 1, 4, 4), 2).flatten(),
])
def test_fallback_op_gradients_via_torch_autograd(fn):
    jf = thunder.jit(lambda x: fn(x).sum())
    x = torch.randn(16, dtype=torch.float64, requires_grad=True)
    (expected,) = torch.autograd.grad(fn(x).sum(), x)
    (got,) = torch.autograd.grad(jf(x), x)
    torch.testing.assert_close(got, expected)


# ---------------------------------------------------------------------------------------------
# Traces: forward and backward, saved tensors
# ---------------------------------------------------------------------------------------------


def test_forward_and_backward_traces_print_as_in_the_seed():
    model = TorchvisionMLP(16, [16, 8], dropout=0.1)
    jm = thunder.jit(model)
    x = torch.randn(4, 16)
    jm(x).sum().backward()
    fwd = str(thunder.last_traces(jm)[-1])
    bwd = str(thunder.last_backward_traces(jm)[-1])
    assert "@torch.no_grad()\n@no_autocast\ndef augmented_forward_fn(" in fwd
    assert "return {'output': " in fwd and "'flat_args': [" in fwd and "'flat_output': (" in fwd
    assert "# Constructed by Delete Last Used" in fwd.splitlines()[0]
    assert "def backward_fn(saved_for_backward, cotangents):" in bwd
    assert "torch.nn.functional.linear(" in fwd and "    # t" in fwd  # executed op with its decomposition
    # Every value the backward reads is deleted after its last use.
    body = bwd.split("def backward_fn")[1]
    unpacked = [line.split("=")[0] for line in body.splitlines() if "= C0" in line]
    for name in unpacked[0].replace(",", " ").split():
        assert f"del {name}" in body or f" {name}," in body.split("return")[-1] or f", {name}" in body


def _saved_bytes(run):
    """(count, bytes) of the distinct storages saved for backward while ``run()`` builds the graph.

    Storages rather than tensors: views of one activation saved under several shapes share memory.
    """
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return len(seen), sum(seen.values()), out


@pytest.mark.parametrize("case", ["seed_mlp", "gpt_tied", "llama"])
def test_saved_tensors_no_more_than_eager(case):
    make, kind = TRAIN_CASES[case]
    torch.manual_seed(0)
    model = make()
    inputs = _batches(kind)(0)
    jm = thunder.jit(model)
    torch.manual_seed(1)
    _loss(jm(*inputs))  # compile
    torch.manual_seed(1)
    _, eager_bytes, _ = _saved_bytes(lambda: _loss(model(*inputs)))
    torch.manual_seed(1)
    _, our_bytes, _ = _saved_bytes(lambda: _loss(jm(*inputs)))
    assert our_bytes <= eager_bytes * 1.0 + 1024, (our_bytes, eager_bytes)


def test_activation_checkpointing_recomputes_and_matches():
    class M(nn.Module):
        def __init__(self, use_checkpoint):
            super().__init__()
            self.a = nn.Linear(16, 64)
            self.b = nn.Linear(64, 16)
            self.use_checkpoint = use_checkpoint

        def inner(self, x):
            return self.b(torch.tanh(F.gelu(self.a(x)) * 2))

        def forward(self, x):
            y = checkpoint(self.inner, x, use_reentrant=False) if self.use_checkpoint else self.inner(x)
            return y.sum()

    saved = {}
    for use_checkpoint in (False, True):
        torch.manual_seed(0)
        m = M(use_checkpoint)
        jm = thunder.jit(m)
        x = torch.randn(4, 16, requires_grad=True)
        jm(x).backward()
        got = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
        for p in m.parameters():
            p.grad = None
        x.grad = None
        m(x).backward()
        expected = [p.grad for p in m.parameters()] + [x.grad]
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        fwd = thunder.last_traces(jm)[-1]
        saved[use_checkpoint] = {t.name for t in fwd.bound_symbols[-1].args[0][1][0]}
    activations = {n for n in saved[False] if not n.startswith("t_") and n != "x"}
    assert activations, "without checkpointing activations are saved"
    assert not {n for n in saved[True] if not n.startswith("t_") and n != "x"}, saved[True]
    bwd = str(thunder.last_backward_traces(jm)[-1])
    assert "torch.nn.functional.gelu(" in bwd  # the region is recomputed in the backward


def test_checkpoint_with_dropout_uses_the_forward_mask():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return checkpoint(lambda y: self.drop(self.a(y)).relu(), x, use_reentrant=False).sum()

    torch.manual_seed(0)
    m = M()
    jm = thunder.jit(m)
    x = torch.randn(4, 8, requires_grad=True)
    torch.manual_seed(5)
    m(x).backward()
    expected = x.grad.clone()
    x.grad = None
    torch.manual_seed(5)
    jm(x).backward()
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("where", ["outside", "inside"])
def test_autocast_casting_rules_match_eager(dtype, where):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(8, 16)
            self.ln = nn.LayerNorm(16)
            self.l2 = nn.Linear(16, 4)

        def forward(self, x, y):
            if where == "inside":
                with torch.autocast("cpu", dtype=dtype):
                    h = self.l2(F.gelu(self.ln(self.l1(x))))
                    return F.cross_entropy(h, y), h.softmax(-1)
            h = self.l2(F.gelu(self.ln(self.l1(x))))
            return F.cross_entropy(h, y), h.softmax(-1)

    torch.manual_seed(0)
    m = M()
    jm = thunder.jit(copy.deepcopy(m))
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    ctx = torch.autocast("cpu", dtype=dtype) if where == "outside" else torch.autocast("cpu", enabled=False)
    with ctx:
        ref = m(x, y)
        out = jm(x, y)
    for a, b in zip(ref, out):
        assert a.dtype == b.dtype
        torch.testing.assert_close(b, a, atol=0, rtol=0)
    ref[0].backward()
    out[0].backward()
    for p_ref, p in zip(m.parameters(), jm.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, atol=0, rtol=0)


# Eager's autocast casts a float32 leaf that requires grad and is no view (a parameter) once while autocast stays on;
# its gradient's parts are then added in the lower precision (see thunder.torch.autocast.CastCache)
_SHARED_CASTS = {
    "weight_twice": lambda x, w, y: F.linear(F.linear(x, w).relu(), w),  # ALBERT's shared layers, a recurrence
    "leaf_input_thrice": lambda x, w, y: F.linear(y, w) + F.linear(y, w * 2) * F.linear(y, w.t()),
    "computed_twice": lambda x, w, y: (lambda v: F.linear(v, w) + F.linear(v, w))(x * 1),  # not a leaf: cast each time
    "inside_then_again": lambda x, w, y: _autocast_twice(x, w),  # the cache is emptied when autocast is left
    "no_grad_then_grad": lambda x, w, y: _no_grad_first(x, w),
    "cache_disabled": lambda x, w, y: _without_cache(x, w),
    # not a leaf, both operands of one product and used again: its two casts' gradients are added in the order torch's
    # autocast made the casts, the last operand's first
    "both_operands_and_again": lambda x, w, y: (lambda v: torch.matmul(v, v) + v)((y * 1)[:, :16]),
    # keyword arguments take their places in the signature: ``mat2`` is cast first, then ``mat1``, then ``input``
    "keywords_out_of_order": lambda x, w, y: (lambda v: torch.addmm(input=v, mat2=v, mat1=v) + v)((y * 1)[:, :16]),
    # a list argument's tensors are cast first to last (the promotion of torch.stack's lower-precision tensors), so the
    # later one's gradient is added first (generated program 684 under autocast)
    "list_elements_first_to_last": lambda x, w, y: (lambda v: (torch.stack([y, v, v]) * _PARTS[:, None, None]).sum(0)
                                                      + v * 3)((y * 1).to(torch.get_autocast_dtype("cpu"))),
    "cat_elements_first_to_last": lambda x, w, y: (lambda v: torch.cat([v, y, v], 1).view(16, 3, 32).mul(
        _PARTS[:, None]).sum(1) + v * 3)((y * 1).to(torch.get_autocast_dtype("cpu"))),
}
_PARTS = torch.tensor([1.0, 0.7, 1.3])  # the list elements' gradients: unequal parts


def _autocast_twice(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = F.linear(x, w)
    b = a.float() * 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return F.linear(b, w) + F.linear(x, w)


def _no_grad_first(x, w):
    with torch.no_grad():
        a = F.linear(x, w)
    return F.linear(x, w) * a


def _without_cache(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        return F.linear(F.linear(x, w), w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", list(_SHARED_CASTS))
def test_autocast_casts_a_parameter_once_as_eager(name, dtype):
    fn = _SHARED_CASTS[name]
    gen = torch.Generator().manual_seed(0)
    x0, w0, y0 = (torch.randn(s, generator=gen) for s in ((16, 32), (32, 32), (16, 32)))
    results = []
    for f in (fn, thunder.jit(fn)):
        x, w, y = x0.clone(), w0.clone().requires_grad_(), y0.clone().requires_grad_()
        with torch.autocast("cpu", dtype=dtype):
            out = f(x, w, y)
        ct = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
        results.append((out, *torch.autograd.grad(out, (w, y), ct, allow_unused=True)))
    for a, b in zip(*results):
        assert (a is None and b is None) or (a.dtype == b.dtype and torch.equal(a, b)), name


# Torch functions that autocast the operations inside them (einsum's bmm, an LSTM's layers), and operations the
# CPU's autocast leaves alone that the CUDA's casts (atan2, addcmul): under CPU autocast, eager's dtypes, values and
# gradients (see [Note: fallback calls under autocast] in thunder/torch/fallback.py)
_AUTOCAST_INSIDE = {
    "einsum": lambda a, w: torch.einsum("ij,kj->ik", a, w),
    "einsum-sum-first": lambda a, w: torch.einsum("ij,kl->ik", a, w),
    "tensordot": lambda a, w: torch.tensordot(a, w, 1),
    "multi_dot": lambda a, w: torch.linalg.multi_dot([a, w, w]),
    "inner": lambda a, w: torch.inner(a, w),
    "vecdot": lambda a, w: torch.linalg.vecdot(a, w[:4]),
    "matrix_power": lambda a, w: torch.linalg.matrix_power(w, 3),
    "addbmm": lambda a, w: torch.addbmm(a, a[None], w[None]),
    "conv_tbc": lambda a, w: torch.conv_tbc(a[None], w[None], w[0]),
    "bilinear": lambda a, w: F.bilinear(a, a, w[None]),
    "lstm": lambda a, w: _LSTM(a[None])[0],
    "atan2-float64": lambda a, w: torch.atan2(a, w[:4].double()),
    "addcmul-bfloat16": lambda a, w: torch.addcmul(a, a, w[:4].bfloat16()),
}
_LSTM = nn.LSTM(5, 3)


@pytest.mark.parametrize("name", list(_AUTOCAST_INSIDE))
def test_torch_functions_that_autocast_inside_run_as_in_eager(name):
    fn = _AUTOCAST_INSIDE[name]
    gen = torch.Generator().manual_seed(0)
    a0, w0 = torch.randn(4, 5, generator=gen), torch.randn(5, 5, generator=gen)
    results = []
    for f in (fn, thunder.jit(fn)):
        a, w = a0.clone().requires_grad_(), w0.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = f(a, w)
        results.append((out, *torch.autograd.grad(out, (a, w), torch.ones_like(out), allow_unused=True)))
    for e, j in zip(*results):
        assert (e is None and j is None) or (e.dtype == j.dtype and torch.equal(e, j)), name


class _TimesTwoWithCustomBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 100


def test_custom_autograd_function_trains_with_its_own_backward():
    """More in tests/test_custom_function.py."""
    jf = thunder.jit(lambda x: _TimesTwoWithCustomBackward.apply(x).sum())
    x = torch.randn(3, requires_grad=True)
    jf(x).backward()
    assert torch.equal(x.grad, torch.full((3,), 100.0))
    # without gradients its forward is traced like any other code
    x = torch.randn(3)
    assert torch.equal(jf(x), (x * 2).sum())


class _FusedQKVAttention(nn.Module):
    """litgpt's layout: one projection for q, k and v, split by a view; q and k transformed, v used as is."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k = q * 0.5, k.sin()
        att = (q @ k.transpose(-2, -1)).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C)).square().mean()


def test_a_small_view_of_a_larger_value_is_saved_compact():
    """``v``, a third of the qkv projection, is saved as a copy (as eager's matmul saves one): saving the view
    would keep the whole projection alive. Gradients as without the copy: within rounding of eager's (the
    projection's weight gradient differs from eager's by about 1e-10 with or without it, on some CPUs)."""
    torch.manual_seed(0)
    model = _FusedQKVAttention()
    x = torch.randn(2, 16, 32)
    jm = thunder.jit(model)
    jm(x)
    _, eager_bytes, _ = _saved_bytes(lambda: model(x))
    _, our_bytes, _ = _saved_bytes(lambda: jm(x))
    assert our_bytes <= eager_bytes, (our_bytes, eager_bytes)
    rounding = NotBitwise("qkv.weight's gradient rounds differently from eager's (also without compact saves) on "
                          "AMD EPYC, bitwise on Intel Xeon: the CPU's matrix kernels decide", atol=1e-8, rtol=1e-5,
                          depends_on_machine=True)
    check_training_parity(_FusedQKVAttention(), (x,), loss_of=lambda loss: loss, not_bitwise=rounding)


class _TwoHeads(nn.Module):
    """A trunk and two heads; the loss may use one head only (a pooler, an auxiliary head)."""

    def __init__(self):
        super().__init__()
        self.trunk, self.head, self.aux = nn.Linear(4, 4), nn.Linear(4, 3), nn.Linear(4, 2)

    def forward(self, x):
        h = self.trunk(x).relu()
        rows = x[x[:, 0] > 0]  # an output with a run-time extent
        return self.head(h), self.aux(h), self.aux(rows)


@pytest.mark.parametrize("used", ["head", "aux", "rows", "head+rows"])
def test_parameters_only_unused_outputs_reach_get_no_gradient_as_in_eager(used):
    """Eager leaves ``.grad`` None for parameters that reach the loss through no output; AdamW then skips them. A
    zero gradient instead would decay and move them: the first call's AdamW steps already differed."""
    torch.manual_seed(0)
    model, ref = _TwoHeads(), _TwoHeads()
    ref.load_state_dict(model.state_dict())
    jmodel = thunder.jit(model)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.1) for m in (model, ref)]

    def loss_of(outputs):
        head, aux, rows = outputs
        return sum({"head": head, "aux": aux, "rows": rows}[part].square().sum() for part in used.split("+"))

    for _ in range(3):
        x = torch.randn(6, 4)
        for m, opt in zip((jmodel, ref), optimizers):
            opt.zero_grad()
            loss_of(m(x)).backward()
            opt.step()
        for (name, p), r in zip(model.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (r.grad is None), name
            assert torch.equal(p, r), name
