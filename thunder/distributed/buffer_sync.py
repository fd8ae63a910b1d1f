"""Buffers made equal across ranks before forwards, as torch's DistributedDataParallel makes them.

torch's DDP (``broadcast_buffers=True``, its default; ``forward_sync_buffers`` since torch 2.13) broadcasts the
module's buffers from rank 0 of its process group before a forward when the forward before it ran with grad
enabled outside ``no_sync``, and before the first: BatchNorm's running statistics start each training step as
rank 0's, each rank then updates them with its own batch, and the first evaluation forward after training sees
rank 0's statistics on every rank (later ones, their own).

``DDPTransform`` records this before every program as ``sync_buffers``: a primitive giving the buffers' values,
broadcast when due, which the program then uses in their place (written back into the buffers after the call,
as the program's own in-place updates are). Whether a broadcast is due depends on the call before, not on the
program, so the primitive decides when it runs, from a ``BufferSync`` the transform owns; ranks make the same
calls, so they agree.
"""
from __future__ import annotations

from thunder.core import codeutils, prims
from thunder.core.symbol import Tag
from thunder.distributed.state import broadcast_tensors
from thunder.extend import declare_primitive


class BufferSync:
    """Whether the next call broadcasts the buffers (torch DDP's ``require_forward_param_sync``), and from where:
    group rank ``src`` (torch's DDP: 0)."""

    def __init__(self, group, src: int = 0):
        self.group, self.src = group, src
        self.due = True  # the first forward broadcasts

    def __repr__(self):
        return f"BufferSync(src={self.src}, due={self.due})"


codeutils.CONSTANT_NAMES[BufferSync] = "buffer_sync"


def _sync_buffers_meta(buffers: list, sync: BufferSync, next_due: bool):
    return tuple(prims.new_tensor(tuple(b.shape), b.dtype, b.device) for b in buffers)


def sync_buffers_impl(buffers: list, sync: BufferSync, next_due: bool) -> tuple:
    """The buffers' values (copies), rank ``sync.src``'s when a broadcast is due; the next call's is ``next_due``
    (this call runs with grad enabled, outside ``no_sync``)."""
    due, sync.due = sync.due, next_due
    values = [b.clone() for b in buffers]
    if due:
        broadcast_tensors(values, sync.src, sync.group)
    return tuple(values)


sync_buffers_impl.__name__ = "sync_buffers"

sync_buffers = declare_primitive("sync_buffers", _sync_buffers_meta, torch_impl=sync_buffers_impl,
                                 tags=(Tag.COLLECTIVE, Tag.SIDE_EFFECT))
