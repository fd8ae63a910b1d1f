"""Forward parity of whole models against eager PyTorch, in train and eval mode.

Each case builds one model, deep-copies it for eager, and calls both twice (a cache miss, then a
hit) with the RNG seeded identically before each call, so dropout draws the same masks. Outputs
must match bitwise unless the case allows a float tolerance; buffers (BatchNorm running stats and
``num_batches_tracked``) must be updated exactly as eager updates them, on the module's own tensors.
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util

import pytest
import torch

import thunder
from tests.models import MODEL_CASES, ModelCase, GPT, GPTConfig, CNN

_HAS_AUTODIFF = importlib.util.find_spec("thunder.transforms.autodiff") is not None

# Known thunder bugs, keyed by (case name, train, grad): reason. Strict xfails, so a fix shows up as XPASS.
KNOWN_FAILURES: dict[tuple[str, bool, bool], str] = {}
KNOWN_BACKWARD_FAILURES: dict[str, str] = {}


def _cases(grad: bool):
    """(case, train) pairs, with the known failures marked."""
    out = []
    for case in MODEL_CASES:
        for train in (False, True):
            reason = KNOWN_FAILURES.get((case.name, train, grad))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(case, train, marks=marks, id=f"{case.name}-{'train' if train else 'eval'}"))
    return out


def assert_same(actual, expected, atol: float, what: str):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual)}"
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
            f"{what}: {actual.dtype}{list(actual.shape)} != {expected.dtype}{list(expected.shape)}")
        if atol == 0:
            assert torch.equal(actual, expected), f"{what}: max abs diff {(actual - expected).abs().max().item()}"
        else:
            torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-5, msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), f"{what}: {type(actual)} != {type(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, atol, f"{what}[{i}]")
    else:
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"


def run_parity(case: ModelCase, *, train: bool, grad: bool, calls: int = 2):
    torch.manual_seed(0)
    model = case.make_model()
    ref = copy.deepcopy(model)
    model.train(train)
    ref.train(train)
    jmodel = thunder.jit(model)
    grad_ctx = contextlib.nullcontext if grad else torch.no_grad
    for call in range(calls):
        inputs = case.make_inputs()
        torch.manual_seed(100 + call)
        with grad_ctx():
            expected = ref(*inputs)
        expected_rng = torch.get_rng_state()
        torch.manual_seed(100 + call)
        with grad_ctx():
            actual = jmodel(*inputs)
        # The torch executor draws random numbers exactly as eager does, so the generators agree afterwards too.
        assert torch.equal(torch.get_rng_state(), expected_rng), f"{case.name}: RNG consumed differently (call {call})"
        assert_same(actual, expected, case.atol, f"{case.name} output (call {call})")
        for (name, b), (_, rb) in zip(model.named_buffers(), ref.named_buffers()):
            assert_same(b, rb, case.atol if b.is_floating_point() else 0, f"{case.name} buffer {name} (call {call})")
        for (name, p), (_, rp) in zip(model.named_parameters(), ref.named_parameters()):
            assert torch.equal(p, rp), f"{case.name}: parameter {name} changed"
    assert thunder.cache_misses(jmodel) == 1 and thunder.cache_hits(jmodel) == calls - 1
    return jmodel


@pytest.mark.parametrize("case,train", _cases(grad=False))
def test_forward_parity_no_grad(case, train):
    run_parity(case, train=train, grad=False)


@pytest.mark.skipif(not _HAS_AUTODIFF, reason="thunder.transforms.autodiff (training traces) is not there yet")
@pytest.mark.parametrize("case,train", _cases(grad=True))
def test_forward_parity_grad_enabled(case, train):
    run_parity(case, train=train, grad=True)


@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batchnorm_buffers_updated_in_train_mode(momentum):
    bn = torch.nn.BatchNorm1d(6, momentum=momentum)
    ref = copy.deepcopy(bn)
    jbn = thunder.jit(bn)
    for _ in range(2):
        x = torch.randn(5, 6)
        with torch.no_grad():
            assert torch.equal(jbn(x), ref(x))
        assert torch.equal(bn.running_mean, ref.running_mean)
        assert torch.equal(bn.running_var, ref.running_var)
        assert torch.equal(bn.num_batches_tracked, ref.num_batches_tracked)


@pytest.mark.xfail(strict=True, raises=thunder.core.proxies.DataDependentError,
                   reason="BatchNorm(momentum=None) computes 1 / float(num_batches_tracked) in Python: data-dependent")
def test_batchnorm_cumulative_average():
    bn = torch.nn.BatchNorm1d(6, momentum=None)
    with torch.no_grad():
        thunder.jit(bn)(torch.randn(5, 6))


def test_gpt_weight_tying_and_buffers_are_shared():
    """The jitted GPT reads the tied weight once, and the tril buffer of the masked variant, from the module."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(use_sdpa=False)).eval()
    jmodel = thunder.jit(model)
    idx = torch.randint(0, 96, (1, 8))
    with torch.no_grad():
        assert torch.equal(jmodel(idx)[0], model(idx)[0])
        prologue = str(thunder.last_prologue_traces(jmodel)[-1])
        assert prologue.count("_parameters['weight']") == sum(1 for n, _ in model.named_parameters() if n.endswith("weight"))
        assert "_buffers['bias']" in prologue
        model.lm_head.weight.mul_(0.5)  # updates the embedding too: it is the same tensor
        assert torch.equal(jmodel(idx)[0], model(idx)[0])
    assert thunder.cache_hits(jmodel) == 1


def test_gpt_with_targets_returns_loss():
    torch.manual_seed(0)
    model = GPT(GPTConfig()).eval()
    idx, targets = torch.randint(0, 96, (2, 8)), torch.randint(0, 96, (2, 8))
    with torch.no_grad():
        logits, loss = thunder.jit(model)(idx, targets)
        elogits, eloss = model(idx, targets)
    assert torch.equal(logits, elogits) and torch.equal(loss, eloss)


def _backward_cases():
    return [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BACKWARD_FAILURES[c.name])]
                         if c.name in KNOWN_BACKWARD_FAILURES else []) for c in MODEL_CASES]


@pytest.mark.skipif(not _HAS_AUTODIFF, reason="thunder.transforms.autodiff (training traces) is not there yet")
@pytest.mark.parametrize("case", _backward_cases())
def test_backward_parity_train(case):
    """One training step's gradients (train mode, dropout with identical seeds) against eager's, to float tolerance."""
    torch.manual_seed(0)
    model = case.make_model().train()
    ref = copy.deepcopy(model)
    inputs = case.make_inputs()
    torch.manual_seed(1)
    out = thunder.jit(model)(*inputs)
    torch.manual_seed(1)
    expected = ref(*inputs)
    out, expected = (out[0], expected[0]) if isinstance(out, tuple) else (out, expected)
    cotangent = torch.randn_like(expected)
    out.backward(cotangent)
    expected.backward(cotangent)
    for (name, p), (_, rp) in zip(model.named_parameters(), ref.named_parameters()):
        assert (p.grad is None) == (rp.grad is None), f"{case.name}: grad of {name} is {p.grad} vs eager {rp.grad}"
        if p.grad is not None:
            torch.testing.assert_close(p.grad, rp.grad, atol=1e-5, rtol=1e-5, msg=lambda m: f"{case.name} grad {name}: {m}")
