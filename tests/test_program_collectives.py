"""torch.distributed collectives called inside a jitted function, on 2 gloo ranks (processes spawned here).

Each program runs eagerly and under thunder.jit on the same inputs, twice (the second call runs from the cache, with
other values): results must be bitwise equal. See thunder/distributed/program_collectives.py.
"""
from __future__ import annotations

import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import thunder
from tests.distributed import run_ranks

pytestmark = [pytest.mark.distributed]


def _all_reduce(x):
    y = x * 2
    before = y + 1  # read before the update: keeps the old value
    dist.all_reduce(y)
    return y, before, y.sum()


def _all_reduce_view(x):
    y = x * 2
    dist.all_reduce(y[1:])  # a view: the update reaches y
    return y


def _all_gather(x):
    out = torch.empty(2 * x.shape[0], x.shape[1])
    dist.all_gather_into_tensor(out, x.exp())
    return out


def _reduce_scatter(x):
    out = torch.empty(x.shape[0] // 2, x.shape[1])
    work = dist.reduce_scatter_tensor(out, x + 1, async_op=True)
    work.wait()
    return out


PROGRAMS = {"all_reduce": _all_reduce, "all_reduce_view": _all_reduce_view, "all_gather": _all_gather,
            "reduce_scatter": _reduce_scatter}


def _logged_loss_step(model, x):
    """A training step that all-reduces a detached copy of its loss for logging."""
    loss = model(x).square().mean()
    logged = loss.detach().clone()
    dist.all_reduce(logged)
    return loss, logged / dist.get_world_size()


def _refused(fn, x):
    try:
        thunder.jit(fn)(x)
    except NotImplementedError as e:
        return str(e)
    return None


def _worker(rank, world_size):
    results = {}
    for name, fn in PROGRAMS.items():
        jfn = thunder.jit(fn)
        same = []
        for call in range(2):
            x = torch.randn(4, 3, generator=torch.Generator().manual_seed(10 * rank + call))
            expected, actual = fn(x.clone()), jfn(x.clone())
            expected = expected if isinstance(expected, tuple) else (expected,)
            actual = actual if isinstance(actual, tuple) else (actual,)
            same.append(all(torch.equal(a, b) for a, b in zip(actual, expected)))
        results[name] = dict(same=same, misses=thunder.cache_misses(jfn))
    torch.manual_seed(0)
    model, twin = nn.Linear(3, 2), nn.Linear(3, 2)
    twin.load_state_dict(model.state_dict())
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(rank))
    (loss, logged), (jloss, jlogged) = _logged_loss_step(model, x), thunder.jit(_logged_loss_step)(twin, x)
    loss.backward()
    jloss.backward()
    results["logged_loss"] = (torch.equal(loss, jloss) and torch.equal(logged, jlogged)
                              and all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), twin.parameters())))
    w = torch.randn(3, requires_grad=True)
    results["refused"] = {
        "requires_grad": _refused(lambda x: dist.all_reduce(x * w), torch.randn(3)),
        "max": _refused(lambda x: dist.all_reduce(x * 1, op=dist.ReduceOp.MAX), torch.randn(3)),
        "broadcast": _refused(lambda x: dist.broadcast(x * 1, 0), torch.randn(3)),
    }
    return results


@functools.cache
def _results():
    return run_ranks(_worker)


@pytest.mark.parametrize("name", PROGRAMS)
def test_collective_called_by_the_program_gives_eagers_result(name):
    for rank, r in enumerate(_results()):
        assert r[name]["same"] == [True, True], f"rank {rank}"
        assert r[name]["misses"] == 1


def test_a_training_step_may_all_reduce_its_logged_loss():
    assert all(r["logged_loss"] for r in _results())


@pytest.mark.parametrize("case,match", [
    ("requires_grad", "requires grad: eager's collective has no gradient"),
    ("max", "op=ReduceOp.SUM only"),
    ("broadcast", "torch.distributed.broadcast inside the function"),
])
def test_unsupported_collectives_are_refused_clearly(case, match):
    for r in _results():
        assert r["refused"][case] is not None and match in r["refused"][case], r["refused"][case]
