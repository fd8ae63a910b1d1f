"""Collectives as primitives of the trace IR, run by the torch executor through ``torch.distributed``.

An asynchronous collective returns a future (a ``FutureTensorProxy``, printed ``FUTURE cpu f32[n]``);
``wait`` turns it into the tensor. Issuing early and waiting late is what lets communication overlap
computation, so passes keep the two apart (see thunder/distributed/scheduling.py).

``all_reduce`` works in place on the buffer it is given, as ``torch.distributed`` does: a transform that
inserts one hands it a tensor nothing else reads afterwards (a freshly packed bucket, say). ``all_gather``
(shards along dimension 0 to the whole) and ``reduce_scatter`` (the sum of the whole, scattered along
dimension 0) write new tensors.

Gradients: of a sum all-reduce, a sum all-reduce of the cotangent; of an all-gather, a sum reduce-scatter;
of a sum reduce-scatter, an all-gather; ``wait`` passes cotangents through.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

import thunder.torch as ltorch
from thunder.core import codeutils, prims
from thunder.core.symbol import Tag
from thunder.extend import declare_primitive

codeutils.CONSTANT_NAMES[dist.ProcessGroup] = "process_group"

_REDUCE_OPS = {"sum": dist.ReduceOp.SUM}
# torch 2.13 renames the single-tensor collectives; earlier versions have only the old names
torch_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
torch_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


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
    if group is None:
        work = dist.all_reduce(a, op=_REDUCE_OPS[op], async_op=do_async)
    else:  # straight to the process group: torch.distributed.all_reduce's Python checks cost ~0.1 ms a call
        options = dist.AllreduceOptions()
        options.reduceOp = _REDUCE_OPS[op]
        work = group.allreduce([a], options)
    if not do_async:
        work.wait()
        return a
    return Pending(work, a)


_all_reduce_impl.__name__ = "all_reduce"


def _all_reduce_grad(a, op, group, do_async):
    if op != "sum":
        raise NotImplementedError(f"thunder cannot differentiate all_reduce with op {op!r}, only 'sum'")
    # the cotangent may have other uses: the in-place collective gets a copy
    return all_reduce(a, op, group, do_async), lambda g: (wait(all_reduce(ltorch.clone(g), op, group, True)),)


all_reduce = declare_primitive("all_reduce", _all_reduce_meta, torch_impl=_all_reduce_impl, grad=_all_reduce_grad,
                              tags=(Tag.COLLECTIVE,))


def _group_size(group) -> int:
    return dist.get_world_size(group)


def _all_gather_meta(a, group, do_async: bool):
    shape = (a.shape[0] * _group_size(group), *a.shape[1:])
    if do_async:
        return prims.new_future(shape, a.dtype, a.device, prims.requires_grad(a))
    return prims.new_tensor(shape, a.dtype, a.device, prims.requires_grad(a))


def _all_gather_impl(a, group, do_async):
    out = torch.empty((a.shape[0] * dist.get_world_size(group), *a.shape[1:]), dtype=a.dtype, device=a.device)
    work = torch_all_gather_single(out, a.contiguous(), group=group, async_op=do_async)
    return Pending(work, out) if do_async else out


_all_gather_impl.__name__ = "all_gather"


def _all_gather_grad(a, group, do_async):
    return all_gather(a, group, do_async), lambda g: (wait(reduce_scatter(g, "sum", group, True)),)


all_gather = declare_primitive("all_gather", _all_gather_meta, torch_impl=_all_gather_impl, grad=_all_gather_grad,
                              tags=(Tag.COLLECTIVE,))


def _reduce_scatter_meta(a, op: str, group, do_async: bool):
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce_scatter: op must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    n = _group_size(group)
    if a.shape[0] % n:
        raise ValueError(f"reduce_scatter: the first dimension ({a.shape[0]}) must be divisible by the group's size ({n})")
    shape = (a.shape[0] // n, *a.shape[1:])
    if do_async:
        return prims.new_future(shape, a.dtype, a.device, prims.requires_grad(a))
    return prims.new_tensor(shape, a.dtype, a.device, prims.requires_grad(a))


def _reduce_scatter_impl(a, op, group, do_async):
    out = torch.empty((a.shape[0] // dist.get_world_size(group), *a.shape[1:]), dtype=a.dtype, device=a.device)
    work = torch_reduce_scatter_single(out, a.contiguous(), op=_REDUCE_OPS[op], group=group, async_op=do_async)
    return Pending(work, out) if do_async else out


_reduce_scatter_impl.__name__ = "reduce_scatter"


def _reduce_scatter_grad(a, op, group, do_async):
    if op != "sum":
        raise NotImplementedError(f"thunder cannot differentiate reduce_scatter with op {op!r}, only 'sum'")
    return reduce_scatter(a, op, group, do_async), lambda g: (wait(all_gather(g, group, True)),)


reduce_scatter = declare_primitive("reduce_scatter", _reduce_scatter_meta, torch_impl=_reduce_scatter_impl,
                                   grad=_reduce_scatter_grad, tags=(Tag.COLLECTIVE,))


def _wait_meta(future):
    return prims.new_tensor(future.shape, future.dtype, future.device, prims.requires_grad(future))


def _wait_impl(pending: Pending):
    pending.work.wait()
    return pending.tensor


_wait_impl.__name__ = "wait"

wait = declare_primitive("wait", _wait_meta, torch_impl=_wait_impl, grad=lambda f: (wait(f), lambda g: (g,)),
                        tags=(Tag.COLLECTIVE,))

# [Note: ranks that trace different programs]
# Each rank compiles its own programs. Python control flow on rank-local data (a branch on a batch's values, a loop
# over the experts a batch routes to) can give ranks different traces, whose collectives differ: paired by their
# order, one rank's reduction of a parameter's gradient would be summed with another parameter's gradient on
# another rank (silently, when the sizes agree), or wait forever. So a transform whose trace issues collectives
# planned from the trace first checks, with ``check_same_plan``, that every rank planned the same: one all-reduce of
# two numbers, the plan's id and its negation, by maximum, which give the id back on every rank only if all ids
# are equal. Otherwise every rank raises before any of the plan's collectives is issued. The check costs one
# all-reduce of 16 bytes, and reading its result (on CUDA, the host waits for the device's queued work there).
def _check_same_plan_meta(plan_id: int, group, device, what: str):
    return None


def check_same_plan_impl(plan_id: int, group, device, what: str) -> None:
    ids = torch.tensor([plan_id, -plan_id], dtype=torch.int64, device=device)
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MAX
    group.allreduce([ids], options).wait()
    top, negated_bottom = ids.tolist()
    if top != plan_id or -negated_bottom != plan_id:
        raise RuntimeError(
            f"thunder.distributed: the ranks traced different programs, and this rank's {what} differ from another "
            "rank's (other tensors, or in another order): Python control flow in the model depends on rank-local data "
            "(a branch on a tensor's values, a loop over the experts a batch routes to). Pairing the collectives would "
            "mix different parameters' values, so none was issued. Make the control flow the same on every rank, or "
            "(for ddp) let torch's DDP reduce the gradients: "
            "torch.nn.parallel.DistributedDataParallel(thunder.jit(model), find_unused_parameters=True)")


check_same_plan_impl.__name__ = "check_same_plan"

check_same_plan = declare_primitive("check_same_plan", _check_same_plan_meta, torch_impl=check_same_plan_impl,
                                    tags=(Tag.COLLECTIVE, Tag.SIDE_EFFECT))


def plan_id(plan) -> int:
    """An id of ``plan`` (a structure of names, numbers and dtypes whose ``repr`` describes it) below 2**62."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(repr(plan).encode(), digest_size=8).digest(), "little") >> 2


COLLECTIVES = frozenset({all_reduce, all_gather, reduce_scatter, check_same_plan})  # issue as early as possible
WAITS = frozenset({wait})  # as late as possible
