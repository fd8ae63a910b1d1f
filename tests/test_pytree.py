"""thunder's pytree (thunder/core/pytree.py): torch's pytree, with slices and thunder's input containers."""
from __future__ import annotations

import collections

import pytest
import torch
import torch.utils._pytree as torch_pytree

import thunder
from thunder.core import pytree
from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.driver.frontend import InputDict, InputList
from thunder.transforms.rename import substitute

Point = collections.namedtuple("Point", "x y")


def _proxy(name):
    return TensorProxy(name, (2,), torch.float32, torch.device("cpu"), False)


a, b, c = _proxy("a"), _proxy("b"), _proxy("c")
n = NumberProxy("n", int, 3, frozenset({"n"}))

STRUCTURES = [
    a,
    (a, b),
    [a, (b, [c])],
    {"z": a, "y": b, "x": (c,)},  # insertion order, not sorted
    collections.OrderedDict(z=a, y=b),
    collections.defaultdict(list, {"k": [a, b]}),
    Point(a, [b]),
    torch.Size([2, 3]),
    torch.max(torch.randn(3, 2), 0),  # torch.return_types.max
    slice(1, n, None),
    ((a, slice(None, n)), {"dim": 1, "keepdim": False}),
    (None, 1.5, "s", torch.float32, torch.device("cpu")),
]


@pytest.mark.parametrize("tree", STRUCTURES, ids=lambda t: type(t).__name__)
def test_leaves_and_map_are_torchs(tree):
    assert pytree.tree_leaves(tree) == torch_pytree.tree_leaves(tree)
    mapped = pytree.tree_map(lambda x: ("leaf", x), tree)
    expected = torch_pytree.tree_map(lambda x: ("leaf", x), tree)
    assert type(mapped) is type(expected) and mapped == expected
    if isinstance(tree, dict):
        assert list(mapped) == list(tree)


def test_slices_hold_proxies():
    key = (slice(None, n), slice(0, 2, n))
    assert flat_proxies(key) == [n, n]
    m = NumberProxy("m", int, 4, frozenset({"m"}))
    assert substitute(key, {"n": m}) == (slice(None, m), slice(0, 2, m))


def test_input_containers_are_walked_and_rebuilt_as_plain_ones():
    lst, d = InputList([a, b]), InputDict(k=a, j=[b])
    assert flat_proxies((lst, d)) == [a, b, a, b]
    new_lst, new_d = substitute((lst, d), {"a": c})
    assert type(new_lst) is list and new_lst == [c, b]
    assert type(new_d) is dict and new_d == {"k": c, "j": [b]}


def test_model_output_is_a_node_in_field_order():
    transformers = pytest.importorskip("transformers")
    out = transformers.modeling_outputs.CausalLMOutputWithPast(loss=a, logits=b)
    assert flat_proxies(out) == [a, b]


def test_jitted_program_with_a_slice_of_a_traced_number():
    def f(x, k):
        return x[1:k] * 2

    jf = thunder.jit(f, cache="symbolic values")
    x = torch.randn(6)
    for k in (3, 5):
        torch.testing.assert_close(jf(x, k), f(x, k))
