"""The generic path (torch ops without an ltorch definition) against eager: gradients of tensors passed by
keyword or inside containers, Tensor property getters, and dtypes few ops support (float8, complex32)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import thunder


def _leaf(t):
    return t.detach().clone().requires_grad_(t.requires_grad)


def _values_and_grads(fn, tensors: dict):
    """``fn(**tensors)``'s output and the gradients of the tensors that require grad, for a fixed cotangent."""
    tensors = {k: _leaf(v) for k, v in tensors.items()}
    out = fn(**tensors)
    out = out[0] if isinstance(out, tuple) else out
    ct = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    out.backward(ct)
    return out.detach(), {k: v.grad for k, v in tensors.items() if v.requires_grad}


def _r(*shape, grad=True):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=grad)


# Each case: the function and its tensors (keywords); every tensor that requires grad must get eager's gradient.
_CONTAINER_CASES = {
    "instance_norm-weight-bias-by-keyword": (
        lambda x, w, b: F.instance_norm(x, weight=w, bias=b), dict(x=_r(2, 3, 5), w=_r(3), b=_r(3))),
    "instance_norm-positional": (lambda x, w, b: F.instance_norm(x, None, None, w, b), dict(x=_r(2, 3, 5), w=_r(3), b=_r(3))),
    "multi_dot-list": (lambda a, b, c: torch.linalg.multi_dot([a, b, c]), dict(a=_r(3, 4), b=_r(4, 5), c=_r(5, 2))),
    "multi_dot-tuple-partial": (lambda a, b, c: torch.linalg.multi_dot((a, b, c)),
                                dict(a=_r(3, 4), b=_r(4, 5, grad=False), c=_r(5, 2))),
    "embedding_bag-per_sample_weights": (
        lambda e, w: F.embedding_bag(torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), e, torch.tensor([0, 4]), mode="sum",
                                     per_sample_weights=w), dict(e=_r(10, 3), w=_r(8))),
    "block_diag-varargs": (lambda a, b: torch.block_diag(a, b) * 2, dict(a=_r(2, 2), b=_r(1, 3))),
    "cdist-keyword-x2": (lambda a, b: torch.cdist(a, x2=b), dict(a=_r(3, 4), b=_r(5, 4))),
}


@pytest.mark.parametrize("name", list(_CONTAINER_CASES))
def test_fallback_gradients_of_every_tensor_argument(name):
    fn, tensors = _CONTAINER_CASES[name]
    expected_out, expected = _values_and_grads(fn, tensors)
    out, actual = _values_and_grads(thunder.jit(fn), tensors)
    torch.testing.assert_close(out, expected_out, rtol=0, atol=0)
    assert actual.keys() == expected.keys()
    for k in expected:
        assert actual[k] is not None, f"{name}: no gradient for {k}"
        torch.testing.assert_close(actual[k], expected[k], rtol=0, atol=0, msg=lambda m: f"{name}, {k}: {m}")


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_recurrent_weights_in_a_list_get_gradients(cls):
    """``nn.LSTM`` passes its weights to ``_VF.lstm`` as a list: each parameter gets eager's gradient."""
    torch.manual_seed(0)
    model = cls(3, 4, num_layers=2, bidirectional=True)
    jmodel = thunder.jit(copy.deepcopy(model))
    x = torch.randn(5, 2, 3)
    for m in (model, jmodel):
        out, _ = m(x)
        out.pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), jmodel.parameters()):
        assert q.grad is not None, f"{cls.__name__}.{name} got no gradient"
        assert torch.equal(p.grad, q.grad), f"{cls.__name__}.{name}"


# ---------------------------------------------------------------------------------------------
# Tensor property getters: each is its own operation, whichever was traced first in the process
# ---------------------------------------------------------------------------------------------

_GETTERS = ("real", "imag", "T", "mT", "H", "mH")


def _getter_inputs():
    return {"complex": torch.randn(2, 3, dtype=torch.complex64), "real": torch.randn(2, 3)}


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_property_getters(order):
    getters = _GETTERS if order == "forward" else tuple(reversed(_GETTERS))
    for name in getters:
        for kind, x in _getter_inputs().items():
            try:
                expected = getattr(x, name) * 1
            except RuntimeError as e:  # imag of a real tensor
                with pytest.raises(RuntimeError, match=str(e)[:30]):
                    thunder.jit(lambda a: getattr(a, name) * 1)(x)
                continue
            actual = thunder.jit(lambda a: getattr(a, name) * 1)(x)
            assert actual.shape == expected.shape and torch.equal(actual, expected), f"{kind} x.{name}"


def test_property_getters_in_one_program():
    z = torch.randn(2, 3, dtype=torch.complex128)
    fn = lambda z: (z.imag, z.real, z.mH, z.H, z.T, z.mT)  # noqa: E731
    for a, e in zip(thunder.jit(fn)(z), fn(z)):
        assert a.shape == e.shape and torch.equal(a, e)


def test_property_getter_gradient():
    z = torch.randn(3, dtype=torch.complex128, requires_grad=True)
    fn = lambda z: (z.real * 2 + z.imag * 3).sum()  # noqa: E731
    (expected,) = torch.autograd.grad(fn(z), [z])
    (actual,) = torch.autograd.grad(thunder.jit(fn)(z), [z])
    assert torch.equal(actual, expected)


# ---------------------------------------------------------------------------------------------
# float8 and complex32 inputs: what torch computes, thunder computes; what torch rejects, thunder rejects
# ---------------------------------------------------------------------------------------------

_RARE_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.complex32)
_RARE_OPS = {
    "identity": lambda a: a,
    "to-float32": lambda a: a.to(torch.float32),
    "view": lambda a: a.view(2, 2),
    "cat": lambda a: torch.cat([a, a]),
    "add": lambda a: a + a,
    "mul": lambda a: a * 2,
    "reshape-transpose": lambda a: a.reshape(2, 2).t(),
}


def _as_comparable(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else torch.view_as_real(t) if t.is_complex() else t


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", _RARE_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(_RARE_OPS))
def test_rare_dtypes(dtype, op):
    fn = _RARE_OPS[op]
    x = torch.randn(4).to(dtype)
    try:
        expected = fn(x)
    except (RuntimeError, NotImplementedError) as e:
        with pytest.raises(type(e)):
            thunder.jit(fn)(x)
        return
    actual = thunder.jit(fn)(x)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(_as_comparable(actual), _as_comparable(expected))


# ---------------------------------------------------------------------------------------------
# In-place Tensor methods without a thunder definition: recorded functionally, written back to inputs
# ---------------------------------------------------------------------------------------------

_INPLACE_FALLBACK = {
    "zero_-input": lambda y, x: (y.zero_(), x * 2)[1],
    "index_fill_-intermediate": lambda y, x: (x * 1).index_fill_(0, torch.tensor([1]), 5.0) * y,
    "fill_diagonal_-input": lambda y, x: (y.fill_diagonal_(3.0), x * y)[1],
    "masked_scatter_-intermediate": lambda y, x: (x * 1).masked_scatter_(y > 0, x.flip(0)),
}


@pytest.mark.parametrize("name", list(_INPLACE_FALLBACK))
def test_inplace_fallback_methods(name):
    fn = _INPLACE_FALLBACK[name]
    g = torch.Generator().manual_seed(0)
    y0, x0 = torch.randn(3, 3, generator=g), torch.randn(3, 3, generator=g)
    results = []
    for f in (fn, thunder.jit(fn), thunder.jit(fn)):
        y, x = y0.clone(), x0.clone().requires_grad_()
        out = f(y, x)
        out.sum().backward()
        results.append((out.detach(), y, x.grad))
    for actual in results[1:]:
        for a, e in zip(actual, results[0]):
            assert torch.equal(a, e), name


def test_torch_autograd_keeps_tensor_identity():
    """``mha(x, x, x)`` takes the self-attention path (``query is key``) in eager; the generic path must too."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2)
    fn = lambda x: mha(x, x, x, need_weights=False)[0]  # noqa: E731
    x = torch.randn(4, 2, 8, requires_grad=True)
    expected_out, expected = _values_and_grads(fn, dict(x=x))
    out, actual = _values_and_grads(thunder.jit(fn), dict(x=x))
    assert torch.equal(out, expected_out) and torch.equal(actual["x"], expected["x"])


@pytest.mark.parametrize("training", [True, False])
def test_fallback_with_inplace_parameter(training):
    """``F.rrelu(x, inplace=True)`` (a torch function with an ``inplace`` parameter) runs out of place and rebinds."""
    fn = lambda x: torch.nn.functional.rrelu(x * 1, training=training, inplace=True) * 2  # noqa: E731
    x = torch.randn(4, 5, requires_grad=True)
    torch.manual_seed(3)
    expected_out, expected = _values_and_grads(fn, dict(x=x))
    torch.manual_seed(3)
    out, actual = _values_and_grads(thunder.jit(fn), dict(x=x))
    assert torch.equal(out, expected_out) and torch.equal(actual["x"], expected["x"])


def test_ctc_loss_without_meta_kernel():
    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(10, 2, 5, generator=g).log_softmax(-1).requires_grad_()
    targets = torch.randint(1, 5, (2, 4), generator=g)
    fn = lambda lp: torch.nn.functional.ctc_loss(lp, targets, torch.tensor([10, 9]), torch.tensor([4, 3]))  # noqa: E731
    expected_out, expected = _values_and_grads(fn, dict(lp=log_probs))
    out, actual = _values_and_grads(thunder.jit(fn), dict(lp=log_probs))
    assert torch.equal(out, expected_out) and torch.equal(actual["lp"], expected["lp"])
