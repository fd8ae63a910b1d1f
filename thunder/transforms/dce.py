"""Dead code elimination."""
from __future__ import annotations

import time

from thunder.core.proxies import NumberProxy, SymbolicTensorProxy
from thunder.core.statements import python_return
from thunder.core.symbol import Tag


def has_effects(bsym) -> bool:
    """Whether ``bsym`` (or anything in its decomposition) consumes the RNG or mutates state."""
    tags = bsym.sym.tags
    if Tag.RANDOM in tags or Tag.SIDE_EFFECT in tags:
        return True
    return any(has_effects(s) for s in bsym.subsymbols)


def _keep_always(bsym) -> bool:
    return bsym.sym is python_return or has_effects(bsym)


def _shape_extents(bsym):
    """The run-time extents in the shapes of the tensors ``bsym`` reads or defines: they stay defined, as
    later passes (the backward) may need them (see [Note: run-time extents] in thunder/core/extents.py)."""
    for p in bsym.flat_args + bsym.flat_outs:
        if type(p) is SymbolicTensorProxy:
            yield from (s.name for s in p.shape if isinstance(s, NumberProxy))


def dce(trace, *, name: str = "Dead Code Elimination"):
    """Removes bound symbols whose outputs nothing uses. Random and side-effecting ones stay:
    removing a random op would change how the RNG advances compared with eager."""
    start = time.perf_counter_ns()
    needed: set[str] = set()
    kept = []
    for bsym in reversed(trace.bound_symbols):
        if _keep_always(bsym) or any(o.name in needed for o in bsym.flat_outs):
            kept.append(bsym)
            needed.update(a.name for a in bsym.flat_args)
            needed.update(_shape_extents(bsym))
    kept.reverse()
    return trace.from_trace(kept).set_provenance(name, start)
