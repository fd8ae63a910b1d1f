"""Saving compact copies of small views of larger forward intermediates.

A saved view keeps its whole base alive until the backward has run: attention's ``v``, a slice of the
fused ``qkv`` projection, saved as a view keeps all of ``qkv`` (three times its size). Eager saves what the
matmul read, a contiguous copy it made of the view anyway. So when the backward reads such views only in
matrix products (and attention), and the saved values that may alias one forward intermediate (through
view operations, or any operation that may return an alias, thunder/transforms/overwritten_saves.py) are
together smaller than it, and it is neither saved nor an output, each of them is saved as a copy made just
after it is computed, and the intermediate is freed when the forward is done with it. Not with a fusion executor's rematerialization: its regions write what they
save out as fresh values, and its cut already counts the bytes saved.
"""
from __future__ import annotations

from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.transforms.overwritten_saves import _fresh
from thunder.transforms.rename import substitute_bsym


_PRODUCTS = frozenset({"matmul", "linear", "bmm", "mm"})


def _bytes(p: TensorProxy) -> int | None:
    """``p``'s bytes; None where an extent is known only at run time."""
    n = 1
    for s in p.shape:
        if type(s) is not int:  # a run-time extent (a NumberProxy)
            return None
        n *= s
    return n * p.dtype.itemsize


def compact_saved_views(fwd: TraceCtx, bwd: TraceCtx, saved: list, outputs: set) -> tuple[TraceCtx, list]:
    """``bwd`` reading compact copies of the saved views whose base is larger than they are, and the new
    list of saved tensors. ``fwd`` is under construction (its return not yet recorded): the copies are
    inserted into it. ``outputs``: the names of the forward's outputs (aliases the caller keeps anyway)."""
    producer = {}
    for i, b in enumerate(fwd.bound_symbols):
        for o in b.flat_outs:
            producer[o.name] = (i, b)
    written = {b.args[1].name for b in fwd.bound_symbols if b.sym.name == "copy_" and len(b.args) > 1}

    def base_of(p):
        """The forward intermediate whose memory ``p`` may share (None: a trace input, or unknown)."""
        while True:
            found = producer.get(p.name)
            if found is None:
                return None
            b = found[1]
            if _fresh(b):
                return p
            tensors = [a for a in b.flat_args if isinstance(a, TensorProxy)]
            if len(tensors) != 1:
                return None
            p = tensors[0]

    saved_names = {s.name for s in saved}
    groups: dict[str, list] = {}
    bases = {}
    for s in saved:
        if not isinstance(s, TensorProxy):
            continue
        base = base_of(s)
        if base is None or base.name == s.name:
            continue
        groups.setdefault(base.name, []).append(s)
        bases[base.name] = base
    consumers: dict[str, list] = {}
    for b in bwd.bound_symbols:
        for a in {a.name: a for a in b.flat_args if isinstance(a, TensorProxy)}:
            consumers.setdefault(a, []).append(b)

    def read_as_copies(p, depth=0) -> bool:
        """Whether the backward reads ``p`` (through views) only in matrix products, which eager gives a contiguous
        copy of such a view (and saves that): a copy's layout gives eager's numbers. Other kernels can round by
        layout (an elementwise kernel vectorizes a contiguous run, not a short row of a view), so for them the view
        is saved, as eager saves it."""
        for b in consumers.get(p.name, ()):
            if b.sym.name in _PRODUCTS or "attention" in b.sym.name:
                continue
            if depth > 8 or not (getattr(b.sym, "is_view", False) or b.sym.name == "reshape"):
                return False
            if not all(read_as_copies(o, depth + 1) for o in b.flat_outs if isinstance(o, TensorProxy)):
                return False
        return True

    chosen = []
    for name, views in groups.items():
        if name in saved_names or name in outputs or any(v.name in outputs or v.name in written for v in views):
            continue
        if not all(read_as_copies(v) for v in views):
            continue
        sizes = [_bytes(v) for v in views]
        base_size = _bytes(bases[name])
        if base_size is not None and None not in sizes and sum(sizes) < base_size:
            chosen += views
    if not chosen:
        return bwd, saved
    from thunder.torch import clone

    fwd.names.update(bwd.names)  # the copies' names must be fresh in the backward too
    copies, inserts = {}, {}
    with tracectx(fwd):
        for v in chosen:
            fwd.push_scope()
            copies[v.name] = clone(v)
            inserts[producer[v.name][0]] = inserts.get(producer[v.name][0], []) + fwd.pop_scope()
    body = []
    for i, b in enumerate(fwd.bound_symbols):
        body.append(b)
        body += inserts.get(i, [])
    fwd.bound_symbols[:] = body  # still under construction: the return is recorded after this
    bwd = bwd.from_trace([substitute_bsym(b, copies) for b in bwd.bound_symbols])
    return bwd, [copies.get(s.name, s) for s in saved]
