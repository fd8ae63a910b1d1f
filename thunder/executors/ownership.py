"""Which tensors nothing outside the running program references, for regions that reuse their inputs' memory.

A fused region may write its outputs into the memory of an input that dies with it, where nothing else can
see that memory (thunder/executors/inductor_compile.py, ``CompiledRegion._may_reuse``). It counts the Python
references to the input: the trace's variable, the call's arguments and ``getrefcount``'s own, and anything
more is someone else's (the caller's, a hook's). A caller that runs part of a trace through a function of its
own (a CUDA graph's segment, thunder/executors/cudagraphex.py) adds references of its own to the tensors it
passes on. It counts their references as a region would, where the trace hands them over, and vouches here
for those nothing else references: the regions it runs then decide as they would in the trace itself.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import torch

_VOUCHED = threading.local()  # id of each tensor vouched for: its voucher's own storage uses (threads: the backward's)
_NONE: dict = {}


def _ref_counts(args) -> list[int]:
    return [sys.getrefcount(a) for a in args]


class _Probe:
    def __call__(self, *args):  # as a trace calls an executor's callable object: the call builds its own tuple too
        return _ref_counts(args)


def _unshared_refs() -> int:
    """What ``unshared_args`` counts, in an object's ``__call__(self, *args)`` that a trace called, for a tensor
    only the trace's variable holds (the variable, the call's two tuples, the loop's variable, ``getrefcount``'s)."""
    t = torch.empty(0)
    return _Probe()(t)[0]


UNSHARED_REFS = _unshared_refs()


def unshared_args(args) -> list[bool]:
    """For each of ``args``, the arguments of a call a trace made of an object (``def __call__(self, *args)``),
    whether only the trace's variable references it."""
    return [n <= UNSHARED_REFS for n in _ref_counts(args)]


def storage_uses(t) -> int:
    """The use count of ``t``'s storage: one for each tensor on it (and a constant more, the reading's own)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


LONE_STORAGE_USES = storage_uses(torch.empty(1))  # of a tensor no other tensor shares its storage with


def vouched_uses(t) -> int | None:
    """None where nobody vouches for ``t``; else the uses of its storage that the voucher holds itself (beyond
    ``t``), which do not count as other tensors on its memory."""
    return getattr(_VOUCHED, "uses", _NONE).get(id(t))


@contextlib.contextmanager
def vouched(tensors, own_uses=None):
    """While the block runs, ``tensors`` count as referenced by the program alone (see the module's docstring);
    ``own_uses``: per tensor, the uses of its storage that the caller holds itself (default none)."""
    before = getattr(_VOUCHED, "uses", _NONE)
    _VOUCHED.uses = {**before, **{id(t): n for t, n in zip(tensors, own_uses or [0] * len(tensors))}}
    try:
        yield
    finally:
        _VOUCHED.uses = before
