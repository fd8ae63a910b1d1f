"""Every operation of the op suite as a view or a copy, as in eager: updated in place afterwards.

For each op's first sample (float32), the floating-point inputs are made intermediates, the op runs, and then one of
its inputs or its first output is updated in place; thunder must give eager's values for every input and output
(an output that is a view of the updated input sees the update, a copy does not) and eager's gradients. This found
``x[t]`` of a 0-dim integer tensor (a view, as ``x[int(t)]``), the outputs of ``broadcast_tensors`` past the first,
and those of torch's own ops of several tensors (``meshgrid``), all taken for copies.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map

import thunder
from tests.opinfos import OPINFOS
from tests.test_ops import primary_op

_CASES = [info for info in OPINFOS if torch.float32 in info.dtypes and not info.requires_cuda and not info.random
          and not info.name.startswith(("empty", "new_empty"))]


def _program(op, kwargs, update: str):
    def program(*args):
        args = tree_map(lambda a: a * 1 if isinstance(a, torch.Tensor) and a.is_floating_point() else a, args)
        out = op(*args, **kwargs)
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.is_floating_point()]
        ins = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
        which = {"output": outs[:1], "first_input": ins[:1], "second_input": ins[1:2]}[update]
        if not which:
            raise LookupError(update)
        which[0].mul_(-3).add_(1)
        return args, out

    return program


def _run(fn, sample_args):
    args = tree_map(lambda a: a.detach().clone().requires_grad_(a.is_floating_point())
                    if isinstance(a, torch.Tensor) else a, sample_args)
    out = fn(*args)
    outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    leaves = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = []
    if outs and leaves:
        loss = sum((o * torch.linspace(-1, 2, o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in outs)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in tree_leaves(out)], list(grads)


@pytest.mark.parametrize("update", ["output", "first_input", "second_input"])
@pytest.mark.parametrize("info", _CASES, ids=lambda i: i.name)
def test_an_op_is_a_view_or_a_copy_as_in_eager(info, update):
    op = primary_op(info)
    sample = next(iter(info.sample_inputs(torch.float32)))
    program = _program(op, sample.kwargs, update)
    try:
        expected, expected_grads = _run(program, sample.args)
    except Exception:  # eager refuses this update (of an expanded view, of a leaf's view), or there is nothing to update
        pytest.skip("eager raises")
    try:
        actual, actual_grads = _run(thunder.jit(program), sample.args)
    except NotImplementedError as e:  # a clear refusal (an update thunder cannot write back) is not a wrong result
        pytest.skip(f"thunder refuses: {e}")
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True)
        else:
            assert a == e or (a != a and e != e)
    assert len(actual_grads) == len(expected_grads)
    for a, e in zip(actual_grads, expected_grads):
        if e is None or a is None:
            assert a is None and e is None
        else:
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6, equal_nan=True)
