"""The strides thunder gives elementwise results, against eager's kernels: TensorIterator's (thunder/driver/
kernel_layouts.py, [Note: TensorIterator's fast setup]), strides of extents of one included, which address nothing but
order the dimensions of the next elementwise kernel's result."""
from __future__ import annotations

import random

import pytest
import torch

import thunder
from thunder.driver.kernel_layouts import tensor_iterator_strides


def _operand(shape, rng):
    """A tensor of (a suffix of) ``shape``, some extents broadcast to one, its dims laid out in a random order, its
    extents of one given arbitrary strides."""
    nd = rng.randint(1, len(shape))
    op_shape = [n if rng.random() < 0.8 else 1 for n in shape[len(shape) - nd:]]
    order = list(range(nd))
    rng.shuffle(order)
    t = torch.randn([op_shape[d] for d in order]).permute(*[order.index(d) for d in range(nd)])
    if rng.random() < 0.4:
        t = t.as_strided(t.shape, [st if n != 1 else rng.choice([1, 2, 7]) for n, st in zip(t.shape, t.stride())])
    return t


@pytest.mark.parametrize("seed", range(4))
def test_tensor_iterator_strides_are_the_cpu_kernels(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(400):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
        a, b = _operand(shape, rng), _operand(shape, rng)
        out = torch.add(a, b)
        if list(out.shape) != shape or (list(a.shape) == shape and list(b.shape) == shape):
            continue  # a fast setup may apply: not this function's case
        assert tensor_iterator_strides(tuple(shape), [(tuple(t.shape), t.stride()) for t in (a, b)]) == out.stride(), \
            f"{shape}: {a.shape} {a.stride()} + {b.shape} {b.stride()}"
        checked += 1
    assert checked > 100


def _odd(shape, strides):
    return torch.randn(shape).as_strided(shape, strides)


@pytest.mark.parametrize("executors", [None, ["inductor", "torch"]], ids=["torch", "inductor"])
@pytest.mark.parametrize("case", ["neg", "times a number", "sum of two", "where", "sigmoid", "broadcast"])
def test_elementwise_results_have_eagers_strides_of_extents_of_one(case, executors):
    """A ``(1, 5, 1, 1)`` input with strides ``(5, 1, 5, 1)`` is contiguous by torch's test: ``-x`` is ``(5, 1, 1,
    1)`` on the CPU (the fast setup), ``x * 2`` keeps ``(5, 1, 5, 1)`` (a number is an operand: no fast setup), and a
    ``where`` of such a result orders its dimensions by them (fused relayout nn 13839)."""
    fns = {
        "neg": lambda x: -x,
        "times a number": lambda x: x * 2,
        "sum of two": lambda x: x + x.exp(),
        "where": lambda x: torch.where(-x >= 0, torch.randn(1, 1, 3)[..., :3], x),
        "sigmoid": lambda x: torch.sigmoid(x) * 1,
        "broadcast": lambda x: torch.where((-x) > 0, x.new_ones(3), -x),
    }
    fn = fns[case]
    x = _odd((1, 5, 1, 1), (5, 1, 5, 1))
    torch.manual_seed(0)
    expected = fn(x)
    torch.manual_seed(0)
    actual = thunder.jit(fn, **({"executors": executors} if executors else {}))(x)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected)
