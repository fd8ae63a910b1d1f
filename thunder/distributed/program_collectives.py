"""``torch.distributed`` collectives a traced program calls itself, recorded as thunder's collective primitives.

A program may reduce a value across ranks inside the jitted function (a metric, a loss to log, a statistic):
``dist.all_reduce(t)``, ``dist.all_gather_into_tensor(out, t)`` and ``dist.reduce_scatter_tensor(out, t)`` (and
torch 2.13's ``*_single`` names) are recorded as ``all_reduce``, ``all_gather`` and ``reduce_scatter`` with their
``wait``, and the tensor they write gets the result as an in-place update. The collective works on a copy, so a
value the trace keeps (saved for the backward, say) is never overwritten. ``async_op=True`` returns a work handle
whose ``wait()`` does nothing: the trace waits at once (the values are the same; there is no overlap).

Refused with a clear error: reductions other than a sum, and tensors that require grad (eager's c10d collectives
have no gradient: autograd warns and passes the gradient through unchanged; thunder's own ``all_reduce`` in
``thunder.distributed.prims`` is differentiable). Other collectives (``broadcast``, ``all_gather`` into a list, ...)
are refused by the frontend.
"""
from __future__ import annotations

import inspect

import torch
import torch.distributed as dist

import thunder.torch as ltorch
from thunder.distributed import prims as dprims
from thunder.driver.frontend import TRACE_HANDLERS


class CompletedWork:
    """What ``async_op=True`` returns: the collective has completed when the program gets it."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


def _arguments(fn, args, kwargs) -> dict:
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _input(tracer, name, tensor, op=dist.ReduceOp.SUM):
    if op != dist.ReduceOp.SUM:
        raise NotImplementedError(f"thunder supports torch.distributed.{name} with op=ReduceOp.SUM only, not {op}")
    value = tracer.resolve(tensor)
    if torch.is_grad_enabled() and value.requires_grad:
        raise NotImplementedError(
            f"torch.distributed.{name} of a tensor that requires grad: eager's collective has no gradient (autograd "
            "warns and passes the gradient through unchanged). Detach the tensor, or use "
            "thunder.distributed.prims.all_reduce / all_gather / reduce_scatter, whose gradients thunder computes.")
    return value


def _finish(tracer, target, value, async_op):
    target_value = tracer.resolve(target)
    if value.numel() != target_value.numel():
        raise RuntimeError(f"the output tensor has {target_value.numel()} elements, the collective gives {value.numel()}")
    if tuple(value.shape) != tuple(target_value.shape):
        value = tracer.call(ltorch.reshape, (value, tuple(target_value.shape)), {})
    tracer.inplace(target, value)
    return CompletedWork() if async_op else None


def _all_reduce(tracer, args, kwargs):
    a = _arguments(dist.all_reduce, args, kwargs)
    value = _input(tracer, "all_reduce", a["tensor"], a["op"])
    copy = tracer.call(ltorch.clone, (value,), {})
    reduced = tracer.call(dprims.wait, (tracer.call(dprims.all_reduce, (copy, "sum", a["group"], True), {}),), {})
    return _finish(tracer, a["tensor"], reduced, a["async_op"])


def _all_gather(fn):
    def handler(tracer, args, kwargs):
        a = _arguments(fn, args, kwargs)
        value = _input(tracer, fn.__name__, a["input_tensor"])
        gathered = tracer.call(dprims.wait, (tracer.call(dprims.all_gather, (value, a["group"], True), {}),), {})
        return _finish(tracer, a["output_tensor"], gathered, a["async_op"])

    return handler


def _reduce_scatter(fn):
    def handler(tracer, args, kwargs):
        a = _arguments(fn, args, kwargs)
        value = _input(tracer, fn.__name__, a["input"], a["op"])
        scattered = tracer.call(dprims.wait, (tracer.call(dprims.reduce_scatter, (value, "sum", a["group"], True), {}),),
                                {})
        return _finish(tracer, a["output"], scattered, a["async_op"])

    return handler


TRACE_HANDLERS[dist.all_reduce] = _all_reduce
for _name in ("all_gather_into_tensor", "all_gather_single"):
    if hasattr(dist, _name):
        TRACE_HANDLERS[getattr(dist, _name)] = _all_gather(getattr(dist, _name))
for _name in ("reduce_scatter_tensor", "reduce_scatter_single"):
    if hasattr(dist, _name):
        TRACE_HANDLERS[getattr(dist, _name)] = _reduce_scatter(getattr(dist, _name))
