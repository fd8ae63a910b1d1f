"""Gradient buckets: several gradients reduced by one collective on one flat buffer.

A ``Bucket`` is planned when a backward trace is transformed (``plan_buckets``): the gradients of
parameters of one dtype and device, in the order the backward computes them, up to a size cap. Its flat
buffer is allocated on first use and reused on every later step; it belongs to the transform that planned
it, which belongs to the jitted module. In the trace:

    b0 = pack_bucket(bucket0, [t_fc2_weight, t_fc2_bias], [t14, t15], 0.5)   # (.grad + new) * 0.5, flat
    f0 = all_reduce(b0, 'sum', process_group, True)
    ...
    r0 = wait(f0)
    unpack_bucket(bucket0, [t_fc2_weight, t_fc2_bias], r0)   # into each parameter's .grad

Packing adds what the parameter's ``.grad`` holds already (gradients accumulated under ``no_sync``), as
torch's DDP reduces the accumulated gradient; unpacking writes the reduced values into ``.grad`` (the
same tensor when there is one; else a view of one fresh copy of the bucket). A bucket of one gradient packs
into a fresh tensor, which becomes ``.grad``.
"""
from __future__ import annotations

import math

import torch

from thunder.core import prims
from thunder.core.dtypes import short_name
from thunder.core.symbol import Tag
from thunder.extend import declare_primitive


class Bucket:
    """Gradients of parameters of one dtype and device, laid out one after another in a flat buffer."""

    def __init__(self, index: int, names: list, shapes: list, dtype: torch.dtype, device: torch.device):
        self.index = index
        self.names = tuple(names)  # the parameters' qualified names, in the buffer's order
        self.shapes = tuple(tuple(s) for s in shapes)
        self.numels = tuple(math.prod(s) for s in self.shapes)
        self.offsets = tuple(sum(self.numels[:i]) for i in range(len(self.numels)))
        self.numel = sum(self.numels)
        self.dtype = dtype
        self.device = device
        self.buffer: torch.Tensor | None = None  # allocated on first use, then reused

    @property
    def trace_name(self) -> str:
        return f"bucket{self.index}"

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.dtype).element_size()

    def views(self, flat: torch.Tensor) -> list:
        return [flat[o:o + n].view(s) for o, n, s in zip(self.offsets, self.numels, self.shapes)]

    def key(self) -> tuple:
        return (self.names, self.shapes, self.dtype, self.device)

    def __repr__(self):
        return (f"Bucket({self.index}: {len(self.names)} gradients, {short_name(self.dtype)}, {self.device}, "
                f"{self.nbytes} bytes)")


def plan_buckets(grads: list, cap_bytes: float) -> list[list]:
    """Groups ``grads`` (``(name, proxy)`` pairs in the order the backward computes them) into buckets of one
    dtype and device of at most ``cap_bytes`` each (a gradient larger than the cap is a bucket of its own;
    a cap of 0 gives one bucket per gradient). Each group keeps the backward's order."""
    open_groups: dict = {}
    groups = []
    for name, g in grads:
        key = (g.dtype, g.device)
        nbytes = math.prod(g.shape) * g.element_size()
        group = open_groups.get(key)
        if group is not None and group[1] + nbytes > cap_bytes:
            group = None
        if group is None:
            group = open_groups[key] = [[], 0]
            groups.append(group[0])
        group[0].append((name, g))
        group[1] += nbytes
    return groups


# -- the primitives ------------------------------------------------------------------------------------


def _pack_meta(bucket: Bucket, params: list, grads: list, scale: float):
    return prims.new_tensor((bucket.numel,), bucket.dtype, bucket.device)


def pack_bucket_impl(bucket: Bucket, params: list, grads: list, scale: float) -> torch.Tensor:
    if len(grads) == 1:  # becomes the parameter's .grad: a fresh tensor every step
        flat = torch.empty(bucket.numel, dtype=bucket.dtype, device=bucket.device)
    else:
        if bucket.buffer is None:
            bucket.buffer = torch.empty(bucket.numel, dtype=bucket.dtype, device=bucket.device)
        flat = bucket.buffer
    # (.grad + new) * scale, elementwise as torch's DDP computes it, in two kernels for the whole bucket
    torch.cat([(g if p.grad is None else p.grad + g).reshape(-1) for p, g in zip(params, grads)], out=flat)
    return flat.mul_(scale)


pack_bucket_impl.__name__ = "pack_bucket"

pack_bucket = declare_primitive("pack_bucket", _pack_meta, torch_impl=pack_bucket_impl)


def unpack_bucket_impl(bucket: Bucket, params: list, flat: torch.Tensor) -> None:
    if all(p.grad is None for p in params):
        # one copy for the bucket (none for a one-gradient bucket, packed into a fresh tensor): each .grad is a
        # view of it, which nothing else holds
        fresh = flat if len(params) == 1 else flat.clone()
        for p, view in zip(params, bucket.views(fresh)):
            p.grad = view
        return
    for p, view in zip(params, bucket.views(flat)):
        if p.grad is not None:
            p.grad.copy_(view)
        else:
            p.grad = view.clone()


unpack_bucket_impl.__name__ = "unpack_bucket"

unpack_bucket = declare_primitive("unpack_bucket", lambda bucket, params, flat: None, torch_impl=unpack_bucket_impl,
                                  tags=(Tag.SIDE_EFFECT,))
