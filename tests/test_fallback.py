"""Torch operations that thunder has no definition for (the generic fallback, thunder/torch/fallback.py).

In-place ones are computed by their out-of-place twin where torch has one (``scatter_`` as ``scatter``),
else recorded as ``updated_copy(op, a, ...)`` (see [Note: in-place fallback]), and the tensor is rebound
to the result, so later reads, other names for the same tensor, returned tensors and the caller's inputs
see the update exactly as in eager PyTorch (bitwise: the same torch kernel runs, random ops draw the
same numbers). Gradients come from torch's autograd, which must see a
tensor passed in several positions as one tensor, as eager does.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder


def _scatter(x):
    m = torch.zeros_like(x)
    m.scatter_(1, torch.tensor([[0], [2], [1]]), 1.0)  # DeepSeek-V3's group mask
    return m * x


def _alias(x):
    y = x.clone()
    z = y  # another name for the same tensor sees the update
    y.index_fill_(1, torch.tensor([1]), -1.0)
    return z + 1


def _chain(x):
    return x.clone().zero_().add_(2).masked_scatter_(x > 0, x * 3)


def _random(x):
    noise = torch.empty(x.shape[0], 1).bernoulli_(0.7).div_(0.7)  # torchvision's StochasticDepth
    return x * noise + torch.empty_like(x).uniform_(-1, 1)


def _functions(x):
    y, z = x * 2, x - 1
    torch.sigmoid_(y)
    F.leaky_relu_(z, 0.2)
    return y + z


def _inplace_keyword(x):
    y = (x * 2).reshape(1, 3, 2, 2)
    z = F.dropout2d(y, 0.5, True, True)
    return z + F.threshold(y, 0.1, 20.0, True)


def _dunder(x):
    i = (x * 10).to(torch.int64)
    i <<= 2
    i %= 7
    return i


def _init(x):
    w = torch.empty(4, 4)
    with torch.no_grad():
        torch.nn.init.kaiming_uniform_(w)
    return x @ w


CASES = {"scatter_": _scatter, "alias": _alias, "chain": _chain, "random": _random, "functions": _functions,
         "inplace_keyword": _inplace_keyword, "dunder": _dunder, "nn_init": _init}


@pytest.mark.parametrize("name", CASES)
def test_inplace_fallback_matches_eager(name):
    fn = CASES[name]
    jfn = thunder.jit(fn)
    for call in range(2):
        x = torch.randn(3, 4)
        torch.manual_seed(call)
        expected = fn(x)
        torch.manual_seed(call)
        actual = jfn(x)
        assert torch.equal(actual, expected), f"{name}: {actual} != {expected}"
    if name in ("random", "nn_init"):  # no out-of-place twin: run on a copy
        assert "updated_copy(" in str(thunder.last_traces(jfn)[-1])


@pytest.mark.parametrize("name", ["scatter_", "alias", "chain", "functions"])
def test_inplace_fallback_gradients(name):
    fn = CASES[name]
    x = torch.randn(3, 4, requires_grad=True)
    out = thunder.jit(fn)(x)
    expected = fn(x)
    assert torch.equal(out, expected)
    cot = torch.randn_like(expected)
    (grad,) = torch.autograd.grad(out, x, cot)
    (expected_grad,) = torch.autograd.grad(expected, x, cot)
    assert torch.equal(grad, expected_grad)


def test_inplace_fallback_updates_the_input():
    def fn(x, idx):
        x.scatter_(0, idx, 5.0)
        return x.sum()

    x, idx = torch.zeros(3, 2), torch.tensor([[2, 0]])
    ref = x.clone()
    out = thunder.jit(fn)(x, idx)
    assert torch.equal(out, fn(ref, idx)) and torch.equal(x, ref)


@pytest.mark.parametrize("op", ["resize_", "set_"])
def test_inplace_storage_changes_are_refused(op):
    args = {"resize_": (6,), "set_": ()}[op]

    def fn(x):
        y = x * 1
        getattr(y, op)(*args)
        return y

    with pytest.raises(NotImplementedError, match=op):
        thunder.jit(fn)(torch.randn(2, 3))


def test_inplace_aten_overload_updates_its_argument():
    """An aten in-place overload called directly: its schema says it writes its first argument."""
    def fn(x):
        y = x * 1
        torch.ops.aten.mul_.Scalar(y, 3.0)
        return y

    x = torch.randn(3)
    assert torch.equal(thunder.jit(fn)(x), fn(x))


def test_fallback_sees_one_tensor_passed_in_several_positions():
    """nn.MultiheadAttention takes its self-attention path (one packed projection) only if query is key is value."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16, requires_grad=True)
    out = thunder.jit(lambda x: mha(x, x, x, need_weights=False)[0])(x)
    (grads) = torch.autograd.grad(out.sum(), (x, mha.in_proj_weight))
    expected = torch.autograd.grad(mha(x, x, x, need_weights=False)[0].sum(), (x, mha.in_proj_weight))
    assert all(torch.equal(g, e) for g, e in zip(grads, expected))


def test_fallback_gradient_of_one_tensor_under_two_names():
    """``x.contiguous()`` is ``x`` at run time: its gradient is counted once."""
    x = torch.randn(4, 3, requires_grad=True)
    fn = lambda x: torch.cdist(x, x.contiguous()).sum()  # noqa: E731
    (grad,) = torch.autograd.grad(thunder.jit(fn)(x), x)
    (expected,) = torch.autograd.grad(fn(x), x)
    torch.testing.assert_close(grad, expected)


_SPARSE = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.ones(3), (3, 3))


def _zero_tensor():
    """The gradient torch's autograd gives for ``sgn``: a ZeroTensor, without memory."""
    leaf = torch.randn(3, requires_grad=True)
    zero = torch.autograd.grad(torch.sgn(leaf).sum(), leaf)[0]
    assert zero._is_zerotensor()
    return zero


def test_a_zero_tensor_input_is_refused_when_tracing():
    """A ZeroTensor has no memory, which the prologue's aliasing checks read: tracing with one fails clearly (once
    traced, a call with one runs: tests/test_fusion_inductor.py)."""
    with pytest.raises(NotImplementedError, match="thunder does not take ZeroTensors"):
        thunder.jit(lambda x: x * 2)(_zero_tensor())


@pytest.mark.parametrize("fn,args,match", [
    (lambda x: x.to_sparse().values(), (torch.eye(3),), "cannot trace torch.Tensor.to_sparse"),
    (lambda a, x: a @ x, (_SPARSE, torch.randn(3, 4)), "tensors of layout torch.sparse_coo"),
    (lambda a, x: a @ x, (_SPARSE.to_sparse_csr(), torch.randn(3, 4)), "tensors of layout torch.sparse_csr"),
], ids=["converted", "coo_input", "csr_input"])
def test_sparse_tensors_are_refused_naming_their_layout(fn, args, match):
    """A sparse input was once traced as a dense one (PyTorch Geometric's sparse adjacency): it fails clearly now."""
    with pytest.raises(NotImplementedError, match=match):
        thunder.jit(fn)(*args)


# Gradients through torch's autograd (thunder/torch/autograd_rule.py): a graph of one node is called directly, any other
# runs in torch's engine; both give eager's gradients bitwise.
_ONE_NODE = {
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), True),
    "sdpa_float_mask": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.arange(64.0).reshape(8, 8) / 64, scale=0.3), True),
    "sdpa_bool_mask_gqa": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k[:, :2], v[:, :2], attn_mask=torch.ones(8, 8, dtype=torch.bool).tril(), enable_gqa=True), True),
    "sdpa_one_tensor_twice": (lambda q, k, v: F.scaled_dot_product_attention(q, q, v) + k, False),  # one leaf, two edges
    "sdpa_math_dropout": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.3), False),
}


def _count_engine_calls(monkeypatch):
    calls = []
    grad = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: calls.append(1) or grad(*a, **k))
    return calls


@pytest.mark.parametrize("how", ["backward", "grad_of_some_inputs"])
@pytest.mark.parametrize("name", _ONE_NODE)
def test_autograd_fallback_gradients_called_node_or_engine(name, how, monkeypatch):
    fn, direct = _ONE_NODE[name]
    qkv = [torch.randn(2, 4, 8, 16) for _ in range(3)]
    grads = {}
    for variant, f in [("eager", fn), ("thunder", thunder.jit(fn))]:
        torch.manual_seed(0)
        leaves = [t.clone().requires_grad_(True) for t in qkv]
        out = f(*leaves)
        cot = torch.ones_like(out) * torch.arange(16.0)
        if variant == "thunder":
            calls = _count_engine_calls(monkeypatch)
        if how == "backward":
            out.backward(cot)
            grads[variant] = [t.grad for t in leaves]
        else:  # the engine skips the edges it does not need: a node called inside computes none of them
            grads[variant] = list(torch.autograd.grad(out, leaves[:2], cot))
        grads[variant].append(out.detach())
    for a, e in zip(grads["thunder"], grads["eager"]):
        assert a is not None and torch.equal(a, e) and a.stride() == e.stride()
    engine_calls = len(calls) - (how != "backward")  # the test's own autograd.grad
    assert engine_calls == (0 if direct and how == "backward" else 1), engine_calls


def test_autograd_fallback_node_called_keeps_retain_graph_semantics():
    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    out = thunder.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))(q, k, v)
    out.sum().backward(retain_graph=True)
    first = q.grad.clone()
    out.sum().backward()
    assert torch.equal(q.grad, 2 * first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()
