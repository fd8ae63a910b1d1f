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
forward's draws. A value only a fused region computes costs 1/64 more than its bytes (saving it makes the
region write it out), one the forward writes out anyway (read by a matmul or by another region, as
``partition`` will form the regions) costs its bytes; and of the minimum cuts the one nearest the sink is
taken: at equal bytes the backward reads saved values rather than recomputing them.

[Note: values the backward writes out again]
Recomputing is almost free where the recomputed value feeds fused work only: the backward's region computes it in
registers on the way. A value the backward reads outside its regions (a weight gradient's matmul reads a norm's or
an activation's output, attention reads its inputs) must be written out to memory again, by a kernel of its own (on
a GPU, one more launch; a region that also writes outputs of another shape splits into more kernels). Saving it
costs only memory: the forward writes it out anyway, for its own matmul. So by default such values are saved
(``_materialized_in_backward``; torch.compile's partitioner bans their recomputation too), and only values that
feed fused work are recomputed. A fusion executor with ``recompute_unfused_reads`` lets the cut recompute them as
well: fewer saved bytes (a sixth fewer on a GPT block) for those kernels.

[Note: looking inside composites]
A composite the fusion executor fuses through its primitives (``log_softmax``: ``amax``, ``sub``, ``exp``,
``sum``, ``log``, ``sub``) holds a reduction, so as a whole it cannot be recomputed, and its output would be
saved: for a loss, the log-probabilities, which the forward's fused region must then write out in full.
Seen through its primitives, the cut can instead save the logits (which the matmul writes anyway) and the
two per-row reductions, and the backward recomputes the log-probabilities where it needs them: as many
saved bytes, and one full-size write fewer in the forward. So the cut runs on the forward with such
composites expanded, and the forward keeps expanded exactly those whose inner values the backward now
reads (saved, or recomputed from); the others stay whole, as the program wrote them.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Tag, has_tag, is_view

_INF = 1 << 62
_SOURCE, _SINK = ("source",), ("sink",)


def _nbytes(t: TensorProxy) -> int:
    n = 1
    for s in t.shape:
        n *= int(s)
    return n * t.dtype.itemsize


def choose_recomputed(fwd, bwd, cheap: Callable, fused: Callable = lambda b: False,
                      regions: Callable = lambda bsyms: (), recompute_unfused_reads: bool = False):
    """``(fwd, names)``: the forward, with some composites expanded into their parts (see [Note: looking inside
    composites]), and the names of its values the backward should recompute. ``cheap(bsym)``: whether a
    forward bound symbol may run again in the backward; ``fused(bsym)``: whether the fusion executor fuses it
    (a composite it fuses may be looked into); ``regions(bsyms)``: the regions the fusion pass would form
    over ``bsyms``, as lists of their indices; ``recompute_unfused_reads``: whether values the backward reads outside
    its fused regions may be recomputed too (see [Note: values the backward writes out again])."""
    expansions = {}  # id of a top-level bound symbol -> the bound symbols it expands to
    flat = []
    for b in fwd.bound_symbols:
        parts = _expand(b, cheap, fused)
        if len(parts) > 1:
            expansions[id(b)] = parts
        flat += parts
    kept = _compared_in_backward(bwd)
    if not recompute_unfused_reads:
        kept |= _materialized_in_backward(bwd, fused)
    recomputed, saved = _cut(fwd.from_trace(flat), bwd, cheap, _written_anyway(flat, regions(flat)), kept)
    recomputed -= _viewed_whole_by_saved(flat, saved)
    if expansions:
        top_level = {o.name for b in fwd.bound_symbols for o in b.flat_outs}
        read = recomputed | saved
        kept = [b for b in fwd.bound_symbols if id(b) in expansions
                and any(o.name in read and o.name not in top_level for p in expansions[id(b)] for o in p.flat_outs)]
        if kept:
            kept_ids = {id(b) for b in kept}
            body = [p for b in fwd.bound_symbols for p in (expansions[id(b)] if id(b) in kept_ids else (b,))]
            return fwd.from_trace(body), recomputed
    return fwd, recomputed


def _viewed_whole_by_saved(bsyms: list, saved: set) -> set:
    """Names of the values a saved value views whole (``view_as``, a reshape, a transpose; through views of views):
    saved too, as they cost no more memory, where the cut would recompute them. A recomputed value may round
    otherwise than the forward's (another kernel computes it), and the backward would compare it with the saved view
    of the forward's (fused generated program 23481: ``eq(x[0], x)`` of a ``log_softmax`` ``x`` viewed by
    ``view_as``, recomputed in the backward: elements that were equal no longer were, and ``where``'s gradient went
    the other way)."""
    if not saved:
        return set()
    base = {}
    for b in bsyms:
        args = [a for a in b.flat_args if isinstance(a, TensorProxy)]
        if not args or not is_view(b) or b.sym.name == "reshape":  # (a reshape may copy)
            continue
        for o in b.flat_outs:
            if (isinstance(o, TensorProxy) and o.dtype == args[0].dtype
                    and all(type(d) is int for d in (*o.shape, *args[0].shape)) and _nbytes(o) == _nbytes(args[0])):
                base[o.name] = args[0].name
    kept = set()
    for name in saved:
        seen = set()
        while name in base and name not in seen:
            seen.add(name)
            name = base[name]
            kept.add(name)
    return kept


def _expand(b, cheap, fused) -> list:
    """``b``, or, where the cut may look inside it, the parts it is made of (recursively)."""
    if not b.subsymbols or b.sym.executor is not None or cheap(b) or not fused(b):
        return [b]
    return [p for s in b.subsymbols for p in _expand(s, cheap, fused)]


def _written_anyway(bsyms: list, regions) -> set:
    """Names of the values the forward writes out to memory whatever is saved: those read outside the region
    that computes them (by an operation left unfused, or by another region); ``regions``: lists of indices
    into ``bsyms``."""
    region_of = {i: r for r, members in enumerate(regions) for i in members}
    made_in = {o.name: region_of.get(i) for i, b in enumerate(bsyms) for o in b.flat_outs}
    return {a.name for i, b in enumerate(bsyms) for a in b.flat_args
            if isinstance(a, TensorProxy) and (region_of.get(i) is None or made_in.get(a.name) != region_of[i])}


def _read_by(bwd, reader: Callable) -> set:
    """Names of the values the backward reads, directly or through views, in a bound symbol ``reader`` accepts."""
    readers: dict = {}
    for b in bwd.bound_symbols:
        for a in b.flat_args:
            if isinstance(a, TensorProxy):
                readers.setdefault(a.name, []).append(b)

    def read(name: str, depth: int = 0) -> bool:
        for b in readers.get(name, ()):
            if reader(b):
                return True
            if depth < 8 and is_view(b) and any(read(o.name, depth + 1) for o in b.flat_outs
                                                  if isinstance(o, TensorProxy)):
                return True
        return False

    return {name for name in readers if read(name)}


def _compared_in_backward(bwd) -> set:
    """Names of the values the backward compares, rounds or casts to integers, directly or through views (``amax``'s
    gradient compares its input with the saved maximum): recomputed, such a value might round otherwise than the one
    the forward compared or reduced (see [Note: values that jump]), and ``eq(x, amax(x))`` hold nowhere in a row
    (fused generated program nn 17379: a row of NaN, a share of zero matches)."""
    return _read_by(bwd, lambda b: _jumps(b) or any(_jumps(s) for s in b.subsymbols))


def _materialized_in_backward(bwd, fused: Callable) -> set:
    """Names of the values the backward reads, directly or through views, in an operation the fusion executor does
    not fuse (a matmul, attention, a statement): recomputed, such a value would be written out to memory again,
    by a kernel of its own."""
    return _read_by(bwd, lambda b: not fused(b))


def _cut(fwd, bwd, cheap: Callable, written: set, materialized: frozenset = frozenset()) -> tuple[set, set]:
    """The minimum cut of the note above: (names the backward recomputes, names saved for it); ``written``:
    the forward values written out anyway; ``materialized``: values the backward would have to write out again
    (``_materialized_in_backward``), which it never recomputes."""
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
            r = recomputable_cache[id(b)] = (bool(cheap(b)) and not has_tag(b, Tag.RANDOM, Tag.SIDE_EFFECT)
                                             and all(isinstance(o, TensorProxy) for o in b.flat_outs)
                                             and not _jumps(b))
        return r

    candidates = [n for n in needed if n in producers and recomputable(producers[n]) and n not in materialized]
    if not candidates:
        return set(), set()
    graph = _FlowGraph()
    values = {}
    stack = list(needed.values())
    while stack:
        v = stack.pop()
        if v.name in values:
            continue
        values[v.name] = v
        if not all(type(d) is int for d in v.shape):
            # a run-time extent (thunder/core/extents.py): its bytes are unknown while tracing, so the cut cannot
            # weigh saving it against saving what it is computed from; the backward recomputes nothing then
            return set(), set()
        b = producers.get(v.name)
        cheap_producer = b is not None and recomputable(b) and v.name not in materialized
        graph.add((v.name, "in"), (v.name, "out"),
                  _save_cost(v, v.name in inputs, cheap_producer and v.name not in written))
        if not cheap_producer:
            graph.add(_SOURCE, (v.name, "in"), _INF)
            continue
        for a in b.flat_args:
            if isinstance(a, TensorProxy):
                graph.add((a.name, "out"), (v.name, "in"), _INF)
                stack.append(a)
    for name in needed:
        graph.add((name, "out"), _SINK, _INF)
    source_side = graph.min_cut_source_side()  # of the minimum cut nearest the sink: the fewest recomputations
    saved = {n for n in values if (n, "in") in source_side and (n, "out") not in source_side}
    return {n for n in values if n not in saved and n in producers and recomputable(producers[n])}, saved


# [Note: values that jump]
# The backward's kernels recompute a value with the same operations as the forward's, but not always with the same
# roundings (a vectorized ``log`` in one kernel, a scalar one in the other). For a smooth function of it that is an
# ulp; for a comparison, a rounding or a cast to an integer it may be another answer: ``eq(x[0], x)`` of a
# log-softmax ``x`` held True for equal elements in the forward and not for the recomputed ``x`` (fused generated
# program 23481: ``where``'s gradient went the other way). Such operations on floating-point values are never
# recomputed: their results are saved (a mask, as eager saves ``where``'s condition).
_JUMPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "floor", "ceil", "round", "trunc", "sign", "signbit",
                    "remainder", "fmod", "floor_divide", "isnan", "isinf", "isfinite"})


def _jumps(b) -> bool:
    """Whether ``b`` maps floating-point operands to values that jump where they round otherwise: a comparison, a
    rounding, a remainder, or any operation of floating-point operands with an integer or boolean result (a cast)."""
    if not any(isinstance(a, TensorProxy) and dtypes.is_inexact(a.dtype) for a in b.flat_args):
        return False
    return b.sym.name in _JUMPS or any(isinstance(o, TensorProxy) and not dtypes.is_inexact(o.dtype)
                                       for o in b.flat_outs)


def _save_cost(v: TensorProxy, is_input: bool, extra_write: bool) -> int:
    """Saving a forward input costs nothing (it is held anyway); saving a value only a fused region computes
    costs a little more than its bytes (the region must also write it out), so at equal bytes the cut saves
    what a matmul or a reduction produced and recomputes the elementwise work after it (a loss saves the
    logits and the log-sum-exp rather than the log-probabilities), but not where the forward writes the value
    out anyway (softmax's output, read by the matmul after it)."""
    if is_input:
        return 0
    n = _nbytes(v)
    return n + n // 64 if extra_write else n


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
        # Of the minimum cuts, the one nearest the sink: every node that cannot reach the sink through the
        # residual graph is on the source side. At equal bytes the cut then saves the values the backward
        # reads rather than what they are recomputed from (the fewest recomputations).
        reaches_sink = {_SINK}
        queue = deque([_SINK])
        while queue:
            v = queue.popleft()
            for u in self.cap[v]:
                if u not in reaches_sink and self.cap[u][v] > 0:
                    reaches_sink.add(u)
                    queue.append(u)
        return set(self.cap) - reaches_sink
