"""Inserting ``del`` statements after the last use of each value, so memory is freed as early as possible."""
from __future__ import annotations

import time

from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.statements import python_del, python_return
from thunder.core.symbol import BoundSymbol


def delete_last_used(trace, *, keep: frozenset = frozenset()):
    start = time.perf_counter_ns()
    last_use: dict[str, int] = {}
    bsyms = trace.bound_symbols
    for i, bsym in enumerate(bsyms):
        for a in bsym.flat_args:
            last_use[a.name] = i
    by_index: dict[int, list] = {}
    seen = set()
    for i, bsym in enumerate(bsyms):
        if bsym.sym is python_return:
            continue
        for a in bsym.flat_args:
            if last_use.get(a.name) == i and a.name not in seen and a.name not in keep:
                seen.add(a.name)
                by_index.setdefault(i, []).append(a)
        for o in bsym.flat_outs:  # defined and never used
            if o.name not in last_use and o.name not in seen and o.name not in keep:
                seen.add(o.name)
                by_index.setdefault(i, []).append(o)
    unused_params = [p for p in trace.params if isinstance(p, (TensorProxy, NumberProxy)) and p.name not in last_use
                     and p.name not in keep]
    out = []
    if unused_params:
        out.append(BoundSymbol(python_del, tuple(unused_params), {}, None))
    for i, bsym in enumerate(bsyms):
        out.append(bsym)
        dead = by_index.get(i)
        if dead:
            out.append(BoundSymbol(python_del, tuple(dead), {}, None))
    return trace.from_trace(out).set_provenance("Delete Last Used", start)
