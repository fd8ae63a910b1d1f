"""Collectives as primitives of the trace IR, run by the torch executor through ``torch.distributed``.

An asynchronous collective returns a future (a ``FutureTensorProxy``, printed ``FUTURE cpu f32[n]``);
``wait`` turns it into the tensor. Issuing early and waiting late is what lets communication overlap
computation, so passes keep the two apart (see thunder/distributed/scheduling.py).

Collectives work in place on the buffer they are given, as ``torch.distributed`` does: a transform
that inserts one hands it a tensor nothing else reads afterwards (a freshly packed bucket, say).

The gradient of a sum all-reduce is a sum all-reduce of the cotangent; ``wait`` passes cotangents through.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

import thunder.torch as ltorch
from thunder.core import codeutils, prims
from thunder.extend import declare_primitive

codeutils.CONSTANT_NAMES[dist.ProcessGroup] = "process_group"

_REDUCE_OPS = {"sum": dist.ReduceOp.SUM}


class Pending:
    """A collective in flight: its work handle and the tensor it writes."""

    __slots__ = ("work", "tensor")

    def __init__(self, work, tensor):
        self.work = work
        self.tensor = tensor


def _all_reduce_meta(a, op: str, group, do_async: bool):
    if op not in _REDUCE_OPS:
        raise ValueError(f"all_reduce: op must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if do_async:
        return prims.new_future(a.shape, a.dtype, a.device, prims.requires_grad(a))
    return prims.new_tensor(a.shape, a.dtype, a.device, prims.requires_grad(a))


def _all_reduce_impl(a, op, group, do_async):
    work = dist.all_reduce(a, op=_REDUCE_OPS[op], group=group, async_op=do_async)
    return Pending(work, a) if do_async else a


_all_reduce_impl.__name__ = "all_reduce"


def _all_reduce_grad(a, op, group, do_async):
    if op != "sum":
        raise NotImplementedError(f"thunder cannot differentiate all_reduce with op {op!r}, only 'sum'")
    # the cotangent may have other uses: the in-place collective gets a copy
    return all_reduce(a, op, group, do_async), lambda g: (wait(all_reduce(ltorch.clone(g), op, group, True)),)


all_reduce = declare_primitive("all_reduce", _all_reduce_meta, torch_impl=_all_reduce_impl, grad=_all_reduce_grad)


def _wait_meta(future):
    return prims.new_tensor(future.shape, future.dtype, future.device, prims.requires_grad(future))


def _wait_impl(pending: Pending):
    pending.work.wait()
    return pending.tensor


_wait_impl.__name__ = "wait"

wait = declare_primitive("wait", _wait_meta, torch_impl=_wait_impl, grad=lambda f: (wait(f), lambda g: (g,)))

COLLECTIVES = frozenset({all_reduce})  # issue as early as possible
WAITS = frozenset({wait})  # as late as possible
