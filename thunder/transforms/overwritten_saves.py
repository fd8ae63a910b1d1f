"""Saving for backward the values that the forward's write-backs into inputs would overwrite.

[Note: saved values overwritten by in-place updates]
Traces are functional: ``y.mul_(x)`` on an input ``y`` computes a new value and the forward trace ends
with ``prims.copy_(new, y)``, which writes it into the caller's tensor (see [Note: in-place updates]
in thunder/driver/frontend.py). A value the backward reads is saved as the tensor the forward computed.
If that tensor is the input ``y`` itself, or a view of it (``y.reshape(-1)``, ``y.t()``: the torch
executor runs view operations as views), the write-back would overwrite it before the backward reads
it, and the gradients would silently use the new value. Such saved values are cloned before the first
write-back, so the backward reads the old value, as the (functional) program means. Eager either saves
a copy too (``y.mul_(x)`` keeps the old ``y`` for ``x``'s gradient) or refuses at backward time
(a value saved by an earlier operation was modified in place); thunder gives the mathematically
correct gradients in both cases.

Which values may share memory with a written input is decided conservatively: an operation's outputs
are fresh memory only if it is a primitive known to allocate its result, or a composite whose outputs
are all produced by such primitives; every other operation (views, the generic fallback, operations
run by torch's autograd) may return an alias of its inputs.
"""
from __future__ import annotations

from thunder.core import prims
from thunder.core.trace import TraceCtx, tracectx
from thunder.transforms.rename import substitute_bsym

# Primitives whose torch implementation always returns new memory (``real``/``imag`` are views of a complex
# tensor; reshape, transpose, broadcast, slice, squeeze, shallow_copy, device_put and pad may return their input
# or a view of it; amax/amin over no dims return the input).
_FRESH_PRIMS = (frozenset(prims.UNARY) | frozenset(prims.BINARY) | {
    "where", "sum", "prod", "var", "var_mean", "argmax", "argmin", "cumsum", "full", "iota", "uniform", "randn",
    "matmul", "linear", "convolution", "embedding", "cat", "flip", "take", "gather", "scatter_add", "index_add",
}) - {"real", "imag"}


def _fresh(bsym) -> bool:
    """Whether every output of ``bsym`` is new memory (never an alias of an input)."""
    sym = bsym.sym
    if sym.module == "prims":
        if sym.name == "convert_element_type":
            return bsym.args[0].dtype is not bsym.output.dtype
        return sym.name in _FRESH_PRIMS
    if not bsym.subsymbols or getattr(sym, "is_fallback", False):
        return False
    producers = {o.name: sub for sub in bsym.subsymbols for o in sub.flat_outs}
    return all(o.name in producers and _fresh(producers[o.name]) for o in bsym.flat_outs)


def _writes(fwd: TraceCtx) -> list[int]:
    return [i for i, b in enumerate(fwd.bound_symbols) if b.sym is prims.copy_]


def protect_overwritten_saves(fwd: TraceCtx, bwd: TraceCtx, saved: list) -> tuple[TraceCtx, list]:
    """Clones the saved values that may alias an input written by the forward (see the note above).

    ``fwd`` is the forward trace under construction (its return not yet recorded): the clones are
    inserted into it before the first write-back. Returns the backward reading the clones, and the
    new list of saved tensors.
    """
    writes = _writes(fwd)
    if not writes:
        return bwd, saved
    first = writes[0]
    tainted = {fwd.bound_symbols[i].args[1].name for i in writes}
    for b in fwd.bound_symbols[:first]:
        if not _fresh(b) and any(a.name in tainted for a in b.flat_args):
            tainted.update(o.name for o in b.flat_outs)
    at_risk = [s for s in saved if s.name in tainted]
    if not at_risk:
        return bwd, saved
    from thunder.torch import clone

    fwd.names.update(bwd.names)  # the clones' names must be fresh in the backward too
    with tracectx(fwd):
        fwd.push_scope()
        copies = {s.name: clone(s) for s in at_risk}
        cloned = fwd.pop_scope()
    fwd.bound_symbols[first:first] = cloned  # still under construction: the return is recorded after this
    bwd = bwd.from_trace([substitute_bsym(b, copies) for b in bwd.bound_symbols])
    return bwd, [copies.get(s.name, s) for s in saved]
