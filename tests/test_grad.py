"""Gradients of every differentiable operation of the torch language against torch.autograd.

Table-driven by ``tests/opinfos.py`` (the same records as the forward tests): for each sample in
float64, every floating-point tensor argument requires grad; thunder's gradients (a forward and a
backward trace behind a torch.autograd.Function) must match eager autograd's for a random
cotangent. Samples whose outputs are not differentiable in eager are skipped automatically, as are
samples eager cannot differentiate.
"""
from __future__ import annotations

import pytest
import torch

import thunder
from tests.opinfos import OPINFOS, OpInfo
from tests.test_ops import primary_op

_SEED = 4321


def _grad_cases():
    for info in OPINFOS:
        if torch.float64 in info.dtypes and not info.requires_cuda:
            yield pytest.param(info, id=info.name)


def _with_grad(x):
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
        return x.detach().clone().requires_grad_(True)
    if isinstance(x, list):
        return [_with_grad(y) for y in x]
    if isinstance(x, tuple):
        return tuple(_with_grad(y) for y in x)
    return x


def _grad_leaves(x, out):
    if isinstance(x, torch.Tensor) and x.requires_grad:
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _grad_leaves(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _grad_leaves(y, out)
    return out


def _diff_outputs(out):
    leaves = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in leaves if isinstance(o, torch.Tensor) and o.requires_grad]


def _grads(fn, args, kwargs, cotangent_seed):
    torch.manual_seed(_SEED)
    out = fn(*args, **kwargs)
    outs = _diff_outputs(out)
    inputs = _grad_leaves((args, kwargs), [])
    g = torch.Generator().manual_seed(cotangent_seed)
    cts = [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs]
    grads = torch.autograd.grad(outs, inputs, cts, allow_unused=True)
    return [torch.zeros_like(i) if gr is None else gr for i, gr in zip(inputs, grads)]


@pytest.mark.parametrize("info", list(_grad_cases()))
def test_grad(info: OpInfo):
    op = primary_op(info)
    checked = 0
    for i, sample in enumerate(info.sample_inputs(torch.float64)):
        args, kwargs = _with_grad(sample.args), _with_grad(sample.kwargs)
        if not _grad_leaves((args, kwargs), []):
            continue
        try:
            torch.manual_seed(_SEED)
            out = op(*args, **kwargs)
            if not _diff_outputs(out):
                continue
            expected = _grads(op, args, kwargs, i)
        except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError):
            continue  # eager cannot differentiate this sample (or rejects it): nothing to compare
        jop = thunder.jit(lambda *a, **k: op(*a, **k))
        args2, kwargs2 = _with_grad(sample.args), _with_grad(sample.kwargs)
        actual = _grads(jop, args2, kwargs2, i)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e, atol=1e-7, rtol=1e-7, equal_nan=True,
                                       msg=lambda m: f"{info.name} gradient on {sample}: {m}")
        checked += 1
    if checked == 0:
        pytest.skip(f"{info.name}: no differentiable float64 sample")
