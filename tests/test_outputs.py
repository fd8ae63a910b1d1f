"""Outputs of jitted programs: structures are rebuilt on every call with that call's tensors."""
from __future__ import annotations

import pytest
import torch

import thunder


class Layer:
    def __init__(self, keys, values):
        self.keys, self.values = keys, values
        self.is_initialized = True


class Cache:
    """An object holding tensors in attributes of nested objects, like Hugging Face's ``DynamicCache``."""

    def __init__(self):
        self.layers = []
        self.note = "kept as is"

    def update(self, k, v):
        self.layers.append(Layer(k, v))


def _cache_fn(x, w):
    cache = Cache()
    for i in range(2):
        cache.update(x * (i + 1), x @ w)
    return {"out": x.sum(), "cache": cache}


@pytest.mark.parametrize("grad", [False, True])
def test_objects_holding_tensors_are_rebuilt_on_every_call(grad):
    w = torch.randn(3, 3, requires_grad=grad)
    jfn = thunder.jit(_cache_fn)
    results = []
    for _ in range(2):
        x = torch.randn(2, 3)
        actual, expected = jfn(x, w), _cache_fn(x, w)
        assert torch.equal(actual["out"], expected["out"])
        cache = actual["cache"]
        assert type(cache) is Cache and cache.note == "kept as is" and len(cache.layers) == 2
        for layer, ref in zip(cache.layers, expected["cache"].layers):
            assert type(layer.keys) is torch.Tensor and torch.equal(layer.keys, ref.keys)
            assert torch.equal(layer.values, ref.values) and layer.is_initialized
            assert layer.values.requires_grad == grad
        results.append(cache)
    assert results[0] is not results[1] and results[0].layers[0] is not results[1].layers[0]
    assert not torch.equal(results[0].layers[0].keys, results[1].layers[0].keys)


class SelfReferencing:
    def __init__(self, t):
        self.t = t
        self.me = self


def test_self_referencing_output_objects_holding_tensors_are_refused():
    with pytest.raises(NotImplementedError, match="SelfReferencing object: it refers to itself and holds tensors"):
        thunder.jit(lambda x: SelfReferencing(x * 2))(torch.randn(2))


def test_self_referencing_output_objects_without_tensors_are_returned():
    obj = SelfReferencing(3)
    out = thunder.jit(lambda x: (x + 1, obj))(torch.zeros(2))
    assert out[1] is obj and torch.equal(out[0], torch.ones(2))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_an_input_returned_unchanged_is_the_input_tensor_when_training(requires_grad):
    """Eager returns the very tensor; an autograd.Function would return a view of it (with its own grad_fn)."""
    w = torch.randn(3, 3, requires_grad=True)

    def f(x, w):
        return x, x @ w

    x = torch.randn(2, 3, requires_grad=requires_grad)
    same, y = thunder.jit(f)(x, w)
    assert same is x and torch.equal(y, x @ w)
    y.sum().backward()
    assert torch.equal(w.grad, x.detach().t() @ torch.ones(2, 3))
