"""Collective primitives in traces (thunder/distributed/prims.py) and where scheduling puts them
(thunder/distributed/scheduling.py), on hand-built traces: no process group is needed to trace them."""
from __future__ import annotations

import torch

import thunder.torch as ltorch
from thunder.core.statements import python_return
from thunder.core.trace import TraceCtx, tracectx
from thunder.distributed.prims import all_reduce, wait
from thunder.distributed.scheduling import issue_early_wait_late


def _lines(trace) -> list[str]:
    return [line.strip() for line in str(trace).splitlines()[4:] if line.startswith("  ") and not line.startswith(("   ", "  #"))]


def _trace(build):
    trace = TraceCtx("backward")
    with tracectx(trace):
        a = trace.tensor((4,), torch.float32, torch.device("cpu"), name="a")
        trace.params = [a]
        python_return(build(a))
    return trace


def test_an_async_collective_prints_as_a_future_and_its_wait_as_a_tensor():
    trace = _trace(lambda a: wait(all_reduce(ltorch.mul(a, 2), "sum", None, True)))
    text = str(trace)
    assert 'f0 = prims.all_reduce(t0, \'sum\', None, True)  # f0: "FUTURE cpu f32[4]"' in text
    assert 't1 = prims.wait(f0)  # t1: "cpu f32[4]"' in text


def test_collectives_are_issued_early_and_waited_for_late():
    def build(a):
        x = ltorch.mul(a, 2)
        y = ltorch.mul(a, 3)  # independent of the collective: the collective moves above it
        f = all_reduce(x, "sum", None, True)
        r = wait(f)  # nothing needs r until the add: the wait moves below the other computation
        z = ltorch.sin(y)
        w = ltorch.cos(z)
        return ltorch.add(r, w)

    before = _lines(_trace(build))
    after = _lines(issue_early_wait_late(_trace(build)))
    assert [line.split(" = ")[0] for line in before] == ["t0", "t1", "f0", "t2", "t3", "t4", "t5", "return t5"]
    assert [line.split(" = ")[0] for line in after] == ["t0", "f0", "t1", "t3", "t4", "t2", "t5", "return t5"]


def test_a_trace_without_collectives_is_left_as_it_is():
    trace = _trace(lambda a: ltorch.sin(ltorch.mul(a, 2)))
    assert issue_early_wait_late(trace) is trace
