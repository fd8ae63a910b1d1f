"""Training parity of a jitted model against a deep copy run eagerly.

``check_training_parity`` runs one forward+backward on both models with the RNG seeded identically
before each call (dropout draws the same masks), then a few optimizer steps, and compares the
outputs, the loss, every parameter's ``.grad``, every buffer (BatchNorm running statistics) and,
after the steps, every parameter. Comparisons are bitwise unless the caller passes a ``NotBitwise``
that says why a model's gradients round differently and how far apart they may be.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import warnings
from typing import Any, Callable

import torch

import thunder
from thunder.core.trace_checker import check_trace


@dataclasses.dataclass(frozen=True)
class NotBitwise:
    """Why a model's gradients are not bitwise eager's, and the tolerance that holds instead.

    The check is strict: when everything matches bitwise after all, it fails, so the entry is removed; unless
    ``depends_on_machine``: whether the kernels round alike differs from one CPU to another (say which in
    ``reason``).
    """

    reason: str
    atol: float = 1e-6
    rtol: float = 1e-4
    depends_on_machine: bool = False


def _call(model, inputs):
    return model(**inputs) if isinstance(inputs, dict) else model(*inputs)


@dataclasses.dataclass
class Mismatches:
    """Tensors not bitwise equal to eager's: within the stated tolerance, or where bitwise was required."""

    tolerated: list = dataclasses.field(default_factory=list)
    unexpected: list = dataclasses.field(default_factory=list)


def _bit_for_bit(actual, expected) -> bool:
    """Equal values, and zeros of equal signs (``torch.equal`` takes -0.0 for 0.0)."""
    if not torch.equal(actual, expected):
        return False
    if actual.is_complex():
        actual, expected = torch.view_as_real(actual.resolve_conj()), torch.view_as_real(expected.resolve_conj())
    return not actual.is_floating_point() or torch.equal(torch.signbit(actual), torch.signbit(expected))


def _compare(actual, expected, what: str, tol: NotBitwise | None, mismatches: Mismatches):
    """Compares bitwise, or within ``tol``; bitwise mismatches are collected, to be reported all at once."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
        assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype), (
            f"{what}: {actual.dtype}{list(actual.shape)} != {expected.dtype}{list(expected.shape)}")
        if _bit_for_bit(actual, expected):
            return
        diff = (actual.double() - expected.double()).abs().max().item() if actual.numel() else 0.0
        if tol is None or not (expected.is_floating_point() or expected.is_complex()):
            mismatches.unexpected.append(f"{what} (max abs diff {diff:.3g})")  # reported by _check_bitwise
            return
        mismatches.tolerated.append(what)
        torch.testing.assert_close(actual, expected, atol=tol.atol, rtol=tol.rtol, equal_nan=True,
                                   msg=lambda m: f"{what} ({tol.reason}): {m}")
    elif isinstance(expected, dict):
        assert type(actual) is type(expected), f"{what}: {type(actual).__name__} != {type(expected).__name__}"
        assert list(actual.keys()) == list(expected.keys()), f"{what}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            _compare(actual[k], expected[k], f"{what}[{k!r}]", tol, mismatches)
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), f"{what}: structure differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{what}[{i}]", tol, mismatches)
    elif hasattr(expected, "__dict__") and not isinstance(expected, type):  # e.g. HF's DynamicCache
        assert type(actual) is type(expected), f"{what}: {type(actual).__name__} != {type(expected).__name__}"
        _compare(vars(actual), vars(expected), what, tol, mismatches)
    else:
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"


def _check_bitwise(mismatches: Mismatches):
    assert not mismatches.unexpected, "not bitwise equal to eager:\n  " + "\n  ".join(mismatches.unexpected)


def _forward(jmodel, ref, inputs, seed: int, loss_of, tol, mismatches, what: str):
    torch.manual_seed(seed)
    expected = _call(ref, inputs)
    expected_rng = torch.get_rng_state()
    torch.manual_seed(seed)
    actual = _call(jmodel, inputs)
    assert torch.equal(torch.get_rng_state(), expected_rng), f"{what}: the RNG advanced differently from eager"
    _compare(actual, expected, f"{what} output", tol, mismatches)
    return loss_of(actual), loss_of(expected)


def _compare_state(model, ref, tol, mismatches, what: str, grads: bool):
    for (name, b), (_, rb) in zip(model.named_buffers(), ref.named_buffers()):
        _compare(b, rb, f"{what} buffer {name}", tol, mismatches)
    for (name, p), (_, rp) in zip(model.named_parameters(), ref.named_parameters()):
        if grads:
            assert (p.grad is None) == (rp.grad is None), f"{what}: .grad of {name} is {p.grad} but eager's is {rp.grad}"
            if p.grad is not None:
                _compare(p.grad, rp.grad, f"{what} grad of {name}", tol, mismatches)
        else:
            _compare(p, rp, f"{what} parameter {name}", tol, mismatches)


@contextlib.contextmanager
def one_thread():
    """Tiny models run several times faster on one intra-op thread when test workers share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def regions_compile():
    """Fails when a fused region inductor could not compile ran with the torch executor instead (it warns): a test of
    fused numerics would then pass without fusing that region."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    fallbacks = [str(w.message) for w in caught if "could not compile a fused region" in str(w.message)]
    for w in caught:  # the others, as they would have been shown
        if "could not compile a fused region" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    assert not fallbacks, fallbacks


def check_training_parity(model: torch.nn.Module, inputs: Any, *, loss_of: Callable = lambda out: out.loss,
                          steps: int = 3, not_bitwise: NotBitwise | None = None, lr: float = 0.1, executors=None,
                          transforms=(), compilations: int = 1):
    """One forward+backward, then ``steps`` SGD steps, of ``thunder.jit(model, executors=executors,
    transforms=transforms)`` against an eager deep copy; ``compilations``: the cache misses expected (a model whose
    first call replaces a buffer by one of another shape compiles again for it), or a range of them."""
    with one_thread(), regions_compile():
        return _training_parity(model, inputs, loss_of, steps, not_bitwise, lr, executors, transforms, compilations)


def _training_parity(model, inputs, loss_of, steps, not_bitwise, lr, executors=None, transforms=(), compilations=1):
    ref = copy.deepcopy(model)
    jmodel = thunder.jit(model, executors=executors, transforms=list(transforms))
    mismatches = Mismatches()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)
    for step in range(steps + 1):
        what = f"step {step}"
        loss, ref_loss = _forward(jmodel, ref, inputs, 100 + step, loss_of, not_bitwise, mismatches, what)
        _compare(loss, ref_loss, f"{what} loss", not_bitwise, mismatches)
        _check_bitwise(mismatches)
        loss.backward()
        ref_loss.backward()
        _compare_state(model, ref, not_bitwise, mismatches, what, grads=True)
        _check_bitwise(mismatches)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        _compare_state(model, ref, not_bitwise, mismatches, what, grads=False)
        _check_bitwise(mismatches)
    expected = compilations if isinstance(compilations, range) else (compilations,)
    assert thunder.cache_misses(jmodel) in expected, "every step after the first compilations must hit the cache"
    for trace in (thunder.last_traces(jmodel)[-1], *thunder.last_backward_traces(jmodel)[-1:]):
        check_trace(trace)  # each value defined before it is read, in the decompositions too
    if not_bitwise is not None and not not_bitwise.depends_on_machine:
        assert mismatches.tolerated, f"bitwise equal to eager after all: remove the NotBitwise entry ({not_bitwise.reason})"
    return jmodel, mismatches
