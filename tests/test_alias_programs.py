"""Generated programs of views, operations that may copy, and in-place updates, against eager.

Which tensors share memory decides what an in-place update changes: a view shares its base's memory, ``reshape``,
``flatten``, ``contiguous()`` and ``to(...)`` share it only for some layouts and arguments, a copy never does.
Thunder's traces are functional, so it must follow eager's sharing exactly (thunder/driver/functionalization.py).
Each program here is built line by line by a seeded generator, every line checked to run in eager on the input
layout it is generated for; thunder must then give the same outputs (values and strides) and leave the input as
eager leaves it. A failing case prints its program.
"""
from __future__ import annotations

import random
import shutil

import pytest
import torch

import thunder

_VIEWS = [
    "{t}.t()", "{t}[1:]", "{t}[..., ::2]", "{t}[0]", "{t}.unsqueeze(0)", "{t}.transpose(0, -1)", "{t}.view(-1)",
    "{t}.flatten()", "{t}.reshape(-1)", "{t}.reshape({t}.shape[-1], -1)", "{t}.contiguous()", "{t}.squeeze()",
    "{t}.narrow(0, 0, 1)", "{t}.expand(2, *{t}.shape)", "{t}.detach()",
    "{t}.to(copy=True)", "{t}.to(torch.float32)", "{t}.clone()", "{t} * 1", "{t}.float()",
]
_UPDATES = ["{t}.add_(1.5)", "{t}.mul_(-2.0)", "{t}.zero_()", "{t}.fill_(3.0)", "{t}.clamp_(max=0.25)",
            "{t}.copy_({t} * 3 + 1)", "{t}[..., :1] = 7.0", "{t}.sub_({u}.sum())"]


def _layouts():
    return {
        "contiguous": lambda: torch.randn(3, 4),
        "transposed": lambda: torch.randn(4, 3).t(),
        "sliced": lambda: torch.randn(3, 8)[:, ::2],
    }


def _program(seed: int, make_input, as_they_are: bool = False) -> str | None:
    """A program of 8 lines, each run in eager as it is chosen (a line eager refuses is not chosen), returning a copy
    of each tensor it made, or (``as_they_are``) the tensors themselves."""
    rng = random.Random(seed)
    x = make_input()
    env = {"torch": torch, "t0": x}
    lines, names = [], ["t0"]
    expanded = set()  # tensors made from an expanded one that share its memory
    while len(lines) < 8:
        t = rng.choice(names)
        if rng.random() < 0.55:
            line = f"t{len(names)} = " + rng.choice(_VIEWS).format(t=t)
            new = f"t{len(names)}"
        else:
            if t in expanded:
                continue  # an update through an expanded tensor: eager allows some (fill_, x.expand(...)[0]), thunder none
            line = rng.choice(_UPDATES).format(t=t, u=rng.choice(names))
            new = None
        try:
            exec(line, env)
        except RuntimeError:
            continue  # eager refuses it here (a view of a non-contiguous tensor, an update of an expanded one)
        lines.append(line)
        if new is not None:
            names.append(new)
            shares = env[new].untyped_storage().data_ptr() == env[t].untyped_storage().data_ptr()
            if 0 in env[new].stride() or (t in expanded and shares):
                expanded.add(new)
    body = "\n    ".join(lines)
    outputs = ", ".join(n if as_they_are else f"{n} * 1" for n in names)
    return f"def program(t0):\n    {body}\n    return {outputs}\n"


def _layout(t: torch.Tensor) -> tuple:
    """The strides that place elements in memory: those of dimensions longer than 1 (none for an empty tensor)."""
    return () if t.numel() == 0 else tuple(st for st, n in zip(t.stride(), t.shape) if n != 1)


def _sharing(outputs, x) -> list:
    """Which of ``outputs`` and the input ``x`` share memory (pairs of positions, the input last)."""
    tensors = [*outputs, x]
    ptrs = [t.untyped_storage().data_ptr() if t.numel() else None for t in tensors]
    return [(i, j) for i in range(len(outputs)) for j in range(i + 1, len(tensors))
            if ptrs[i] is not None and ptrs[i] == ptrs[j]]


def _check_programs(layout: str, seeds, as_they_are: bool, executors=None):
    make_input = _layouts()[layout]
    for seed in seeds:
        torch.manual_seed(seed)
        source = _program(seed, make_input, as_they_are)
        env = {"torch": torch}
        exec(source, env)
        program = env["program"]
        torch.manual_seed(1000 + seed)
        x = make_input()
        x_eager, x_thunder = x.clone(), x.clone()
        expected = program(x_eager)
        actual = thunder.jit(program, executors=executors)(x_thunder)
        assert len(actual) == len(expected), source
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert a.dtype == e.dtype and a.shape == e.shape and torch.equal(a, e), f"output {i} of\n{source}"
            assert _layout(a) == _layout(e), f"strides of output {i} of\n{source}"
        assert torch.equal(x_thunder, x_eager), f"the input after\n{source}"
        if as_they_are:  # eager's views are views, its copies copies: a later update of one shows in the others or not
            assert _sharing(actual, x_thunder) == _sharing(expected, x_eager), f"memory shared by the outputs of\n{source}"


@pytest.mark.parametrize("as_they_are", [False, True], ids=["copies_returned", "tensors_returned"])
@pytest.mark.parametrize("layout", list(_layouts()))
def test_generated_alias_programs_match_eager(layout, as_they_are):
    _check_programs(layout, range(200), as_they_are)


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="inductor needs a C++ compiler")
@pytest.mark.parametrize("layout", list(_layouts()))
def test_generated_alias_programs_fused_share_memory_as_eager(layout):
    """Fused by the inductor executor, the tensors returned share memory as eager's: a region writes each output
    in memory of its own, so the views the program sees returned run after it (thunder/extend)."""
    _check_programs(layout, range(12), as_they_are=True, executors=["inductor", "torch"])
