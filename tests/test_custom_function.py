"""User-defined torch.autograd.Functions: thunder traces the forward and differentiates with the user's backward.

Each program below is run eagerly and under thunder (twice: the trace, then the cache); outputs and the gradients
of every input are compared bitwise. See [Note: custom autograd functions] in thunder/driver/custom_function.py.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

import thunder


class ScaledReLU(torch.autograd.Function):
    """The classic example: saves its input, masks the gradient in place; the backward is not relu's."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        gi = g.clone()
        gi[x < 0] = 0
        return gi * 3


class RoundSTE(torch.autograd.Function):
    """A straight-through estimator: the gradient is the cotangent itself."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class GradReverse(torch.autograd.Function):
    """Domain-adversarial gradient reversal: a view of the input forward, a negated gradient backward."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.neg() * ctx.alpha, None


class Identity(torch.autograd.Function):
    """Returns its input as is (eager returns a view of it)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class LinearFn(torch.autograd.Function):
    """Several inputs, one optional; ctx.needs_input_grad decides which gradients are computed."""

    @staticmethod
    def forward(ctx, x, w, b=None):
        ctx.save_for_backward(x, w, b)
        out = x @ w.t()
        return out + b if b is not None else out

    @staticmethod
    def backward(ctx, g):
        x, w, b = ctx.saved_tensors
        gx = g @ w if ctx.needs_input_grad[0] else None
        gw = g.t() @ x if ctx.needs_input_grad[1] else None
        gb = g.sum(0) if b is not None and ctx.needs_input_grad[2] else None
        return gx, gw, gb


class SetupContextMul(torch.autograd.Function):
    """The ``setup_context`` style, with a keyword argument."""

    @staticmethod
    def forward(x, y, scale=1.0):
        return x * y * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y, scale = inputs
        ctx.save_for_backward(x, y)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y * ctx.scale, g * x * ctx.scale, None


class TwoOutputs(torch.autograd.Function):
    """Two outputs, one of them integer (not differentiable) and one float marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(dim=-1)
        doubled = x * 2
        ctx.mark_non_differentiable(indices, doubled)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices, doubled

    @staticmethod
    def backward(ctx, g, g_indices, g_doubled):
        indices, = ctx.saved_tensors
        assert g_indices is not None and g_doubled is not None  # materialized as zeros, as eager does
        out = torch.zeros(ctx.shape, dtype=g.dtype)
        return out.scatter(-1, indices.unsqueeze(-1), g.unsqueeze(-1)) + g_doubled


class SinCos(torch.autograd.Function):
    """Two outputs; the program uses only one, so the other's cotangent is zeros."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    @once_differentiable
    def backward(ctx, gs, gc):
        x, = ctx.saved_tensors
        return gs * x.cos() - gc * x.sin()


class NoMaterialize(torch.autograd.Function):
    """``set_materialize_grads(False)``: where both outputs get gradients, the backward sees both."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g1, g2):
        out = None
        if g1 is not None:
            out = g1 * 2
        if g2 is not None:
            out = g2 * 3 if out is None else out + g2 * 3
        return out


class UpdatesItsGradient(torch.autograd.Function):
    """A backward that updates the gradient it is given in place (eager allows it)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.tanh()

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        g.mul_(1 - x.tanh() ** 2)
        return g


class BroadcastGrad(torch.autograd.Function):
    """A backward returning a broadcast gradient of another dtype: reduced and cast as autograd's engine does."""

    @staticmethod
    def forward(ctx, x, bias):
        return x + bias

    @staticmethod
    def backward(ctx, g):
        return g, g.double()  # bias: [4], its gradient [3, 4] in float64


class NestedOuter(torch.autograd.Function):
    """Calls another custom function in its forward (run without grad: traced through) and in its backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ScaledReLU.apply(x) + 1

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return RoundSTE.apply(g) * x.sigmoid()


class Bf16Autocast(torch.autograd.Function):
    """``torch.amp.custom_fwd``/``custom_bwd``: the forward in float32 even under autocast."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), x.t() @ g


class InPlaceIntermediate(torch.autograd.Function):
    """In-place updates of the forward's own tensors, and a tensor kept on ctx."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        y.mul_(0.5)
        ctx.y = y
        return y.clone()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.y


def _module_with_functions():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            return RoundSTE.apply(ScaledReLU.apply(self.fc(x)))

    return nn.Sequential(Block(), Block(), nn.Linear(6, 2))


PROGRAMS = {
    "relu-mask": (lambda x: (ScaledReLU.apply(x) * 2).sum(), [(4, 5)]),
    "ste": (lambda x: RoundSTE.apply(x.sin()).pow(2).sum(), [(3, 4)]),
    "grad-reverse": (lambda x: GradReverse.apply(x * 2, 0.5).exp().sum(), [(5,)]),
    "identity": (lambda x: Identity.apply(x).sum() + x.sum(), [(3,)]),
    "linear": (lambda x, w, b: LinearFn.apply(x, w, b).tanh().sum(), [(4, 3), (5, 3), (5,)]),
    "linear-no-bias": (lambda x, w: LinearFn.apply(x, w).tanh().sum(), [(4, 3), (5, 3)]),
    "setup-context": (lambda x, y: SetupContextMul.apply(x, y, scale=2.5).sum(), [(3, 2), (3, 2)]),
    "two-outputs": (lambda x: TwoOutputs.apply(x)[0].sum(), [(3, 4)]),
    "sin-cos": (lambda x: SinCos.apply(x)[0].sum(), [(6,)]),
    "no-materialize": (lambda x: sum(t.sum() for t in NoMaterialize.apply(x)), [(3,)]),
    "broadcast-grad": (lambda x, b: BroadcastGrad.apply(x, b).pow(2).sum(), [(3, 4), (4,)]),
    "nested": (lambda x: NestedOuter.apply(x).sum(), [(4, 4)]),
    "updates-its-gradient": (lambda x: (UpdatesItsGradient.apply(x) * 3).sum(), [(5,)]),
    "in-place-intermediate": (lambda x: InPlaceIntermediate.apply(x).sum(), [(5,)]),
    "used-twice": (lambda x: ScaledReLU.apply(ScaledReLU.apply(x) - 0.5).sum(), [(8,)]),
    "checkpointed": (lambda x: checkpoint(lambda t: ScaledReLU.apply(t.sin()), x, use_reentrant=False).sum(), [(6,)]),
    # the function's outputs are the program's
    "output": (lambda x: ScaledReLU.apply(x), [(3, 4)]),
    "output-is-input": (lambda x: Identity.apply(x), [(3, 4)]),
    "output-is-view": (lambda x: GradReverse.apply(x, 1.5), [(3, 4)]),
    "two-outputs-out": (lambda x: SinCos.apply(x), [(4,)]),
    # a tensor inside a list is no input of the function's node: no gradient reaches it (as in eager)
    "list-argument": (lambda x, w: ListArgument.apply([x], w).sum() + w.sum(), [(3, 2), (2,)]),
    "no-grad-inside": (lambda x: _no_grad_call(x), [(4,)]),
    "random-mask": (lambda x: (RandomMask.apply(x, 0.3) * x).sum(), [(6, 5)]),
    "non-tensor-outputs": (lambda x: WithNone.apply(x)[0].sum() + WithNone.apply(x)[2], [(4,)]),
    "update-output": (lambda x: _update_output(x), [(5,)]),
    "same-tensor-twice": (lambda x: LinearFn.apply(x, x).sum(), [(4, 4)]),
    # ``apply`` bound once, as a library does at import (pytorch_tabnet's ``sparsemax = SparsemaxFunction.apply``)
    "apply-bound-at-import": (lambda x: _shift_by_max(x * 2).sum(), [(3, 5)]),
    "apply-bound-at-import-input-updated": (lambda x: _shift_by_max_updated_input(x), [(3, 5)]),
}


class ShiftByMax(torch.autograd.Function):
    """Subtracts the maximum along ``dim`` from its input in place (a default argument; no ``ctx.mark_dirty``, as
    pytorch_tabnet's sparsemax), then clamps."""

    @staticmethod
    def forward(ctx, x, dim=-1):
        x -= x.max(dim=dim, keepdim=True)[0]
        out = x.clamp(min=-1)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        out, = ctx.saved_tensors
        return g * (out > -1) * 2, None


_shift_by_max = ShiftByMax.apply


def _shift_by_max_updated_input(x):
    y = x * 2
    out = _shift_by_max(y, 0)
    return (out * y).sum()  # ``y`` as the forward left it


class RandomMask(torch.autograd.Function):
    """A hand-written dropout: the forward draws the mask and saves it for the backward."""

    @staticmethod
    def forward(ctx, x, p):
        mask = (torch.rand_like(x) > p).to(x.dtype) / (1 - p)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        mask, = ctx.saved_tensors
        return g * mask, None


class WithNone(torch.autograd.Function):
    """Outputs that are not tensors: None and a number (their cotangents are None)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2, None, 3

    @staticmethod
    def backward(ctx, g, g_none, g_number):
        assert g_none is None and g_number is None
        return g * 5


def _update_output(x):
    y = ScaledReLU.apply(x)
    y.mul_(2)  # not a view: eager allows it
    return y.sum()


class ListArgument(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xs, w):
        ctx.save_for_backward(w)
        return xs[0] * w

    @staticmethod
    def backward(ctx, g):
        w, = ctx.saved_tensors
        return None, g.sum(0) * w


def _no_grad_call(x):
    with torch.no_grad():
        a = ScaledReLU.apply(x)
    return (a * x).sum()


def _loss(out):
    if isinstance(out, tuple):
        return sum(_loss(o) for o in out)
    return out if out.ndim == 0 else out.square().sum()


def _grads(inputs):
    return [None if t.grad is None else t.grad.clone() for t in inputs]


def _same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_function_matches_eager(name):
    fn, shapes = PROGRAMS[name]
    torch.manual_seed(0)
    inputs = [torch.randn(s, requires_grad=True) for s in shapes]
    torch.manual_seed(1)  # the same random numbers in every run
    expected = fn(*inputs)
    _loss(expected).backward()
    expected_grads = _grads(inputs)
    assert any(g is not None for g in expected_grads)
    jfn = thunder.jit(fn)
    for _ in range(2):  # the first call traces, the second runs from the cache
        for t in inputs:
            t.grad = None
        torch.manual_seed(1)
        out = jfn(*inputs)
        _loss(out).backward()
        assert _same(out, expected)
        assert _same(tuple(_grads(inputs)), tuple(expected_grads))
    assert thunder.cache_misses(jfn) == 1


def test_torchs_function_apply_is_left_as_it_is():
    """thunder hooks the C++ ``apply`` that ``Function.apply`` calls last, so ``apply`` bound before thunder was
    imported or had traced anything is handled the same (the programs "apply-bound-at-import" above)."""
    thunder.jit(PROGRAMS["relu-mask"][0])(torch.randn(3, requires_grad=True))
    assert torch.autograd.Function.__dict__["apply"].__func__.__module__ == "torch.autograd.function"
    assert "autograd_function.ShiftByMax(" in _traced(PROGRAMS["apply-bound-at-import"][0], (3, 5))


def _traced(fn, shape):
    jfn = thunder.jit(fn)
    jfn(torch.randn(shape, requires_grad=True))
    return str(thunder.last_traces(jfn)[0])


def test_trace_names_the_function():
    jfn = thunder.jit(PROGRAMS["relu-mask"][0])
    jfn(torch.randn(4, 5, requires_grad=True))
    assert "autograd_function.ScaledReLU(" in str(thunder.last_traces(jfn)[0])


def test_autocast_custom_fwd_and_bwd():
    torch.manual_seed(0)
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)

    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (Bf16Autocast.apply(x, w) + (x @ w)).float().sum()

    expected = f(x, w)
    expected.backward()
    grads = x.grad, w.grad
    x.grad = w.grad = None
    out = thunder.jit(f)(x, w)
    out.backward()
    assert torch.equal(out, expected)
    assert torch.equal(x.grad, grads[0]) and torch.equal(w.grad, grads[1])


def test_module_training_matches_eager():
    torch.manual_seed(0)
    model = _module_with_functions()
    twin = _module_with_functions()
    twin.load_state_dict(model.state_dict())
    jm = thunder.jit(twin)
    for step in range(3):
        x = torch.randn(7, 6)
        model(x).square().mean().backward()
        jm(x).square().mean().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.equal(p.grad, q.grad), step
            with torch.no_grad():
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
            p.grad = q.grad = None


def test_without_gradients_the_forward_is_traced_through():
    jfn = thunder.jit(lambda x: ScaledReLU.apply(x) * 2)
    x = torch.randn(4)
    assert torch.equal(jfn(x), ScaledReLU.apply(x) * 2)
    assert "autograd_function" not in str(thunder.last_traces(jfn)[0])


class _BadShape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g[0]


class _TooFew(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def backward(ctx, g):
        return g


class _GradForNumber(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, n):
        return x * n

    @staticmethod
    def backward(ctx, g):
        return g, g


class _Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, g):
        return g * 2


class _UpdatesSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        x.mul_(2)
        return g * x


def _use_after_base_update(x):
    x = x * 1
    y = GradReverse.apply(x, 1.0)
    x.add_(1)
    return y * 2


class _Flatten(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.reshape(-1)  # a view of x: whether reshape aliases is decided by the strides thunder computes

    @staticmethod
    def backward(ctx, g):
        return g.reshape(3, 4)


def _use_reshaped_after_base_update(x):
    x = x * 1
    y = _Flatten.apply(x)
    x.add_(1)  # before the strides were computed outside the tracing mode, y was taken for a copy: no error, y old
    return y * 2


class _UpdatesForwardTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.y = x.exp()
        return ctx.y * 2

    @staticmethod
    def backward(ctx, g):
        ctx.y.mul_(2)
        return g * ctx.y


def _two(x):
    return x, x.clone()


ERRORS = {
    # the same errors, with the same messages, as eager's backward raises
    "bad-shape": (lambda x: _BadShape.apply(x).sum(), _two, RuntimeError,
                  r"Function _BadShapeBackward returned an invalid gradient at index 0 - got \[4\] but expected shape "
                  r"compatible with \[3, 4\]"),
    "too-few": (lambda x: _TooFew.apply(x, x).sum(), _two, RuntimeError,
                r"function _TooFewBackward returned an incorrect number of gradients \(expected 2, got 1\)"),
    "grad-for-number": (lambda x: _GradForNumber.apply(x, 2).sum(), _two, RuntimeError,
                        "returned a gradient different than None at position 2, but the corresponding forward input "
                        "was not a Variable"),
    # eager refuses this when the update happens
    "update-returned-input": (lambda x: Identity.apply(x).add_(1).sum(), lambda x: (x, x.clone()), RuntimeError,
                              "Output 0 of Identity is a view and is being modified inplace"),
    "use-after-base-update": (_use_after_base_update, _two, RuntimeError,
                              "Output 0 of GradReverse is a view and its base or another view of its base has been "
                              "modified inplace"),
    "use-reshaped-after-base-update": (_use_reshaped_after_base_update, _two, RuntimeError,
                                       "Output 0 of _Flatten is a view and its base or another view of its base has "
                                       "been modified inplace"),
    # thunder refuses these
    "mark-dirty": (lambda x: _Dirty.apply(x).sum(), _two, NotImplementedError, "ctx.mark_dirty"),
    "backward-updates-saved": (lambda x: _UpdatesSaved.apply(x).sum(), _two, NotImplementedError,
                               "updates .* a tensor from outside it, in place"),
    "backward-updates-forward-tensor": (lambda x: _UpdatesForwardTensor.apply(x).sum(), _two, NotImplementedError,
                                        "updates .* a tensor from outside it, in place"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_function_errors(name):
    fn, make, error, match = ERRORS[name]
    x = torch.randn(3, 4, requires_grad=True)
    if name not in ("mark-dirty", "backward-updates-saved", "backward-updates-forward-tensor"):
        with pytest.raises(error, match=match):  # eager's error
            a, b = make(x)
            fn(b if name == "update-returned-input" else a).backward()
    with pytest.raises(error, match=match):
        a, b = make(x)
        thunder.jit(fn)(b if name in ("update-returned-input", "mark-dirty") else a).backward()


def test_torch_nn_cross_map_lrn2d_trains_as_eager():
    """torch.nn.CrossMapLRN2d is a custom autograd.Function from torch itself (torch.nn._functions)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.CrossMapLRN2d(3))
    x = torch.randn(2, 3, 8, 8)
    m(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad(set_to_none=True)
    thunder.jit(m)(x).sum().backward()
    for p, g in zip(m.parameters(), grads):
        assert torch.equal(p.grad, g)


@pytest.mark.parametrize("name", ["SwishMe", "MishMe", "HardSigmoidMe", "HardSwishMe", "HardMishMe"])
def test_timm_memory_efficient_activations_train_as_eager(name):
    """timm's memory-efficient activations are custom autograd.Functions that save only their input."""
    from tests.libraries import import_library

    me = import_library("timm").layers.activations_me
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 6), getattr(me, name)(), nn.Linear(6, 2))
    x = torch.randn(5, 6) * 3
    expected = m(x)
    expected.sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad(set_to_none=True)
    out = thunder.jit(m)(x)
    out.sum().backward()
    assert torch.equal(out, expected)
    for p, g in zip(m.parameters(), grads):
        assert torch.equal(p.grad, g)
