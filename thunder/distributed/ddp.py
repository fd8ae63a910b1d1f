"""Data parallelism as a trace transform: the backward all-reduces gradients in buckets.

``DDPTransform`` changes a training specialization's backward trace so that, as the backward computes the
gradients of the module's parameters, they are packed into buckets (``thunder/distributed/bucketing.py``),
each bucket all-reduced asynchronously as soon as its last gradient exists, and waited for at the end,
where the reduced values are written into the parameters' ``.grad``. Gradients are multiplied by
``1 / world_size`` before the sum, as torch's DDP does, so ``.grad`` is the average over ranks.

Buffers (BatchNorm's running statistics) are broadcast from the group's rank 0 before a forward whenever the
forward before it ran with grad enabled outside ``no_sync`` (and before the first), as torch's DDP does by
default (``sync_buffers`` at the start of each program: thunder/distributed/buffer_sync.py);
``forward_sync_buffers=False`` leaves them to each rank after the initial broadcast.

Under ``ThunderModule.no_sync()`` the backward has no collectives (a specialization of its own): gradients
accumulate locally in ``.grad``. The first backward outside the context packs ``.grad + new gradient``,
so the whole accumulated gradient is reduced once, through the same buckets: exactly torch DDP's
``no_sync`` (nothing is communicated when the context is left).

What a parameter gets:
- one that requires grad and receives a gradient in the trace: the average over ranks, in ``.grad``;
- tied parameters (one tensor under several names) are one input of the trace, reduced once;
- one that does not require grad, or that the traced program does not use: nothing (``.grad`` is left
  as it is). Ranks must reduce the same gradients in the same buckets; a program whose Python control flow
  depends on rank-local data can trace differently per rank, so the backward first checks that they do
  (``check_same_plan``, see [Note: ranks that trace different programs] in thunder/distributed/prims.py).
"""
from __future__ import annotations

import numbers

import torch
import torch.distributed as dist

from thunder.core.proxies import TensorProxy
from thunder.core.statements import python_return
from thunder.core.trace import tracectx
from thunder.distributed import bucketing
from thunder.distributed.buffer_sync import BufferSync, sync_buffers
from thunder.distributed.prims import all_reduce, check_same_plan, plan_id, wait
from thunder.distributed.scheduling import issue_early_wait_late
from thunder.distributed.state import broadcast_module_state, resolve_process_group
from thunder.driver.frontend import ModuleTensorSource
from thunder.transforms.base import Transform


class DDPTransform(Transform):
    """Averages the gradients of the jitted module's parameters across the ranks of ``process_group``
    (the default group when None) in buckets of at most ``bucket_size_in_mb`` megabytes (0: one
    all-reduce per gradient). When applied, parameters and buffers are broadcast from the group's rank
    ``broadcast_from`` (None: not broadcast); with ``forward_sync_buffers``, buffers again from rank 0 before
    forwards, as torch's DDP does (see the module docstring)."""

    def __init__(self, *, bucket_size_in_mb: float = 25.0, broadcast_from: int | None = 0, process_group=None,
                 forward_sync_buffers: bool = True):
        if isinstance(bucket_size_in_mb, bool) or not isinstance(bucket_size_in_mb, numbers.Real) \
                or not bucket_size_in_mb >= 0:
            raise ValueError(f"bucket_size_in_mb must be a non-negative number of megabytes, got {bucket_size_in_mb!r}")
        self.process_group = resolve_process_group(process_group, "thunder.distributed.ddp")
        self.world_size = dist.get_world_size(self.process_group)
        if broadcast_from is not None and not (isinstance(broadcast_from, int) and 0 <= broadcast_from < self.world_size):
            raise ValueError(f"broadcast_from must be a rank of the process group (0 to {self.world_size - 1}) or None, "
                             f"got {broadcast_from!r}")
        if not isinstance(forward_sync_buffers, bool):
            raise TypeError(f"forward_sync_buffers must be True or False, got {forward_sync_buffers!r}")
        self.bucket_size_in_mb = float(bucket_size_in_mb)
        self.broadcast_from = broadcast_from
        self.forward_sync_buffers = forward_sync_buffers
        self.buffer_sync = BufferSync(self.process_group)
        self._buckets: dict = {}  # Bucket.key() -> Bucket: the buffers, reused by every specialization planning them
        self._broadcast_done: set = set()  # ids of the modules already broadcast

    def __deepcopy__(self, memo):
        """The same configuration and process group for a copy of the module (``copy.deepcopy(thunder_module)``),
        with buffers of its own; a copy of synchronized parameters is not broadcast again."""
        return DDPTransform(bucket_size_in_mb=self.bucket_size_in_mb, broadcast_from=None,
                            process_group=self.process_group, forward_sync_buffers=self.forward_sync_buffers)

    def __repr__(self):
        return (f"DDPTransform(bucket_size_in_mb={self.bucket_size_in_mb}, broadcast_from={self.broadcast_from}, "
                f"forward_sync_buffers={self.forward_sync_buffers}, world_size={self.world_size})")

    # -- hooks ----------------------------------------------------------------------------------------
    def transform_module(self, compile_data):
        module = compile_data.module
        if module is None:
            raise TypeError("thunder.distributed.ddp applies to a torch.nn.Module (or the ThunderModule of one), "
                            "not to a function")
        from thunder.distributed.fsdp import FSDPTransform

        if any(isinstance(t, DDPTransform) and t is not self for t in compile_data.transforms):
            raise RuntimeError("thunder.distributed.ddp was applied twice to the same module")
        if any(isinstance(t, FSDPTransform) for t in compile_data.transforms):
            raise RuntimeError("thunder.distributed.fsdp cannot be combined with ddp on the same module")
        self.broadcast(module)

    def broadcast(self, module: torch.nn.Module) -> None:
        if self.broadcast_from is not None and id(module) not in self._broadcast_done:
            broadcast_module_state(module, self.broadcast_from, self.process_group)
            self._broadcast_done.add(id(module))

    def update_module_tensors(self, tensors, compilation):
        """The module's buffers, broadcast when due (see thunder/distributed/buffer_sync.py)."""
        buffers = [proxy for proxy, source in tensors
                   if isinstance(source, ModuleTensorSource) and source.collection == "_buffers"]
        if not (self.forward_sync_buffers and buffers):
            return []
        next_due = torch.is_grad_enabled() and not compilation.read_state(compilation.compile_data, "no_sync")
        return list(zip(buffers, sync_buffers(buffers, self.buffer_sync, next_due)))

    def transform_forward_backward(self, forward, backward, compilation):
        if compilation.read_state(compilation.compile_data, "no_sync"):
            return forward, backward
        return forward, self._reduce_gradients(backward, compilation)

    def transform_executed(self, trace, compilation, kind):
        return issue_early_wait_late(trace) if kind == "backward" else trace

    # -- the backward ---------------------------------------------------------------------------------
    def _synced_parameters(self, compilation) -> dict:
        """Backward output index -> (qualified name, parameter proxy) for the module parameters to reduce."""
        own = {id(p) for p in compilation.compile_data.module.parameters()}
        chosen = {}
        for i, proxy in enumerate(compilation.grad_inputs):
            src = compilation.sources.get(getattr(proxy, "name", None))
            if not (isinstance(src, ModuleTensorSource) and src.collection == "_parameters"):
                continue
            param = src.module._parameters[src.name]
            if id(param) in own and param.requires_grad:
                chosen[i] = (compilation.parameter_name(proxy), proxy)
        return chosen

    def _reduce_gradients(self, backward, compilation):
        ret = backward.bound_symbols[-1]
        assert ret.sym is python_return
        grads = list(ret.args[0])
        synced = {i: v for i, v in self._synced_parameters(compilation).items() if isinstance(grads[i], TensorProxy)}
        # when each gradient is ready: the position of the statement defining it (-1: an input of the backward)
        ready_at = {}
        for pos, bsym in enumerate(backward.bound_symbols):
            for o in bsym.flat_outs:
                ready_at.setdefault(o.name, pos)
        order = sorted(synced, key=lambda i: ready_at.get(grads[i].name, -1))
        groups = bucketing.plan_buckets([(i, grads[i]) for i in order], self.bucket_size_in_mb * 2**20)
        issue_after: dict[int, list] = {}
        for group in groups:
            last = max(ready_at.get(g.name, -1) for _, g in group)
            issue_after.setdefault(last, []).append(group)

        new = backward.from_trace([])
        pending = []
        scale = 1.0 / self.world_size
        # every rank must reduce the same gradients in the same buckets: see [Note: ranks that trace different programs]
        issue_order = [group for pos in sorted(issue_after) for group in issue_after[pos]]
        plan = [(synced[i][0], str(g.dtype), tuple(g.shape)) for group in issue_order for i, g in group]
        device = str(next(iter(compilation.compile_data.module.parameters()), torch.empty(0)).device)
        with tracectx(new):
            check_same_plan(plan_id(plan), self.process_group, device, "gradients to reduce")
            for group in issue_after.get(-1, []):
                pending.append(self._issue(group, grads, synced, scale))
            for pos, bsym in enumerate(backward.bound_symbols[:-1]):
                new.bound_symbols.append(bsym)
                for group in issue_after.get(pos, []):
                    pending.append(self._issue(group, grads, synced, scale))
            for bucket, params, future in pending:
                bucketing.unpack_bucket(bucket, params, wait(future))
            # the gradients are in .grad now; autograd gets None for them, so it does not add them again
            out = tuple(None if i in synced else g for i, g in enumerate(grads))
            new.bound_symbols.append(ret.replace(args=(out,)))
        return new

    def _issue(self, group, grads, synced, scale):
        names = [synced[i][0] for i, _ in group]
        params = [synced[i][1] for i, _ in group]
        g0 = group[0][1]
        bucket = bucketing.Bucket(len(self._buckets), names, [tuple(g.shape) for _, g in group], g0.dtype, g0.device)
        bucket = self._buckets.setdefault(bucket.key(), bucket)
        flat = bucketing.pack_bucket(bucket, params, [grads[i] for i, _ in group], scale)
        return bucket, params, all_reduce(flat, "sum", self.process_group, True)


def ddp(model: torch.nn.Module, *, bucket_size_in_mb: float = 25.0, broadcast_from: int | None = 0,
        process_group=None, forward_sync_buffers: bool = True) -> torch.nn.Module:
    """Makes ``model`` data parallel: ``thunder.jit(ddp(model))`` and ``ddp(thunder.jit(model))`` both give a
    ``ThunderModule`` whose backward averages gradients across the ranks of ``process_group`` with bucketed,
    asynchronous all-reduces (see ``DDPTransform``). Parameters and buffers are broadcast from rank
    ``broadcast_from`` of the group now (None: not at all); with ``forward_sync_buffers``, buffers from rank 0
    before forwards, as torch's DDP does. Returns ``model``."""
    import thunder
    from thunder.driver.module import ThunderModule
    from thunder.transforms.base import request_transform, requested_transforms

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"thunder.distributed.ddp expects a torch.nn.Module or a ThunderModule, got {type(model).__name__}")
    transform = DDPTransform(bucket_size_in_mb=bucket_size_in_mb, broadcast_from=broadcast_from,
                             process_group=process_group, forward_sync_buffers=forward_sync_buffers)
    if isinstance(model, ThunderModule):
        thunder.add_transform(model, transform)
        return model
    from thunder.distributed.fsdp import FSDPTransform

    if any(isinstance(t, DDPTransform) for t in requested_transforms(model)):
        raise RuntimeError("thunder.distributed.ddp was applied twice to the same module")
    if any(isinstance(t, FSDPTransform) for t in requested_transforms(model)):
        raise RuntimeError("thunder.distributed.fsdp cannot be combined with ddp on the same module")
    transform.broadcast(model)
    request_transform(model, transform)
    return model
