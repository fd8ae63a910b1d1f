"""Rematerialization: which forward values the backward recomputes instead of reading them saved.

[Note: choosing what to recompute]
A fusion executor recomputes cheap work (elementwise operations, casts, views) almost for free inside the
backward's fused regions, while every saved tensor holds memory from the forward to the backward. Among
the forward values the backward reads, those computed by cheap operations may be recomputed from other
values; the choice is a minimum cut. Each candidate value ``v`` is an edge ``v.in -> v.out`` whose capacity
is what saving ``v`` costs (its bytes; nothing for the forward's inputs, which are held anyway). Values that
cannot be recomputed (the outputs of matmuls, reductions, random operations, ...) hang from the source,
each value the backward reads hangs to the sink, and a cheap operation joins its inputs' ``out`` to its
outputs' ``in`` with infinite capacity. A minimum cut then names the cheapest set of values to save such
that the backward can recompute all the others it reads: never more bytes than saving them all (which is
one cut), so saved bytes only go down. Random operations are never recomputed: the backward must see the
forward's draws.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Tag

_INF = 1 << 62
_SOURCE, _SINK = ("source",), ("sink",)


def _nbytes(t: TensorProxy) -> int:
    n = 1
    for s in t.shape:
        n *= int(s)
    return n * t.dtype.itemsize


def _has_tag(bsym, tag) -> bool:
    return tag in bsym.sym.tags or any(_has_tag(s, tag) for s in bsym.subsymbols)


def choose_recomputed(fwd, bwd, cheap: Callable) -> set:
    """Names of forward values the backward should recompute (see the note above). ``cheap(bsym)``: whether a
    forward bound symbol may run again in the backward."""
    producers = {o.name: b for b in fwd.bound_symbols for o in b.flat_outs}
    inputs = {p.name for p in fwd.params if isinstance(p, TensorProxy)}
    defined_in_bwd = set()
    needed = {}
    for b in bwd.bound_symbols:
        for a in b.flat_args:
            if isinstance(a, TensorProxy) and a.name not in defined_in_bwd and (a.name in producers or a.name in inputs):
                needed.setdefault(a.name, a)
        defined_in_bwd.update(o.name for o in b.flat_outs)
    recomputable_cache: dict[int, bool] = {}

    def recomputable(b) -> bool:
        r = recomputable_cache.get(id(b))
        if r is None:
            r = recomputable_cache[id(b)] = bool(cheap(b)) and not _has_tag(b, Tag.RANDOM) and not _has_tag(
                b, Tag.SIDE_EFFECT) and all(isinstance(o, TensorProxy) for o in b.flat_outs)
        return r

    candidates = [n for n, v in needed.items() if n in producers and recomputable(producers[n])]
    if not candidates:
        return set()
    graph = _FlowGraph()
    values = {}
    stack = list(needed.values())
    while stack:
        v = stack.pop()
        if v.name in values:
            continue
        values[v.name] = v
        b = producers.get(v.name)
        cheap_producer = b is not None and recomputable(b)
        graph.add((v.name, "in"), (v.name, "out"), _save_cost(v, v.name in inputs, cheap_producer))
        if not cheap_producer:
            graph.add(_SOURCE, (v.name, "in"), _INF)
            continue
        for a in b.flat_args:
            if isinstance(a, TensorProxy):
                graph.add((a.name, "out"), (v.name, "in"), _INF)
                stack.append(a)
    for name in needed:
        graph.add((name, "out"), _SINK, _INF)
    source_side = graph.min_cut_source_side()
    saved = {n for n in values if (n, "in") in source_side and (n, "out") not in source_side}
    return {n for n in values if n not in saved and n in producers and recomputable(producers[n])}


def _save_cost(v: TensorProxy, is_input: bool, cheap_producer: bool) -> int:
    """Saving a forward input costs nothing (it is held anyway); saving a value a fused region computes costs a
    little more than its bytes (the region must also write it out), so at equal bytes the cut saves what a
    matmul or a reduction produced and recomputes the elementwise work after it (a loss saves the logits and
    the log-sum-exp rather than the log-probabilities)."""
    if is_input:
        return 0
    n = _nbytes(v)
    return n + n // 64 if cheap_producer else n


class _FlowGraph:
    """Maximum flow by shortest augmenting paths (Edmonds-Karp), on the small graphs above."""

    def __init__(self):
        self.cap: dict = {}

    def add(self, u, v, c: int):
        self.cap.setdefault(u, {})
        self.cap.setdefault(v, {})
        self.cap[u][v] = self.cap[u].get(v, 0) + c
        self.cap[v].setdefault(u, 0)

    def _path(self):
        parent = {_SOURCE: None}
        queue = deque([_SOURCE])
        while queue:
            u = queue.popleft()
            for v, c in self.cap[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    if v == _SINK:
                        return parent
                    queue.append(v)
        return None

    def min_cut_source_side(self) -> set:
        if _SOURCE not in self.cap or _SINK not in self.cap:
            return set(self.cap) - {_SINK}
        while (parent := self._path()) is not None:
            flow, v = _INF, _SINK
            while parent[v] is not None:
                flow = min(flow, self.cap[parent[v]][v])
                v = parent[v]
            v = _SINK
            while parent[v] is not None:
                u = parent[v]
                self.cap[u][v] -= flow
                self.cap[v][u] += flow
                v = u
        seen = {_SOURCE}
        queue = deque([_SOURCE])
        while queue:
            u = queue.popleft()
            for v, c in self.cap[u].items():
                if c > 0 and v not in seen:
                    seen.add(v)
                    queue.append(v)
        return seen
