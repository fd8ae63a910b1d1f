"""Fusion regions by data flow: which bound symbols of a trace a fusion executor runs together, and in what order.

[Note: forming regions]
The nodes are a trace's top-level bound symbols; an edge runs from the producer of a value to each of its
consumers. Nodes are visited in trace order and each fusible node joins a group (a future region) or starts
one. Merging must not create a cycle between groups: a node may not join a group it reaches through a node
outside that group (the group would need its own output before it could run). Each node and each group
keeps the groups it depends on, up to the first group on each path; a group runs after everything any of
its members needs, so its dependencies grow as members join, and a node's upstream groups are found by
closing over the groups' dependencies at the time it is visited. A node may join a group unless that group
is upstream of one of its producers (other than the group's own members). It prefers the group of one of
its producers (vertical fusion); without one it joins the most recent group it is independent of
(horizontal fusion).

Barriers (statements, side effects, collectives) keep their place: no group spans one, and the trace is
scheduled one barrier-delimited segment at a time. Random operations keep their relative order (an extra
edge from each to the next), so the random stream is drawn as in the unfused trace. Within a segment the
groups and the other nodes are ordered topologically, earliest original position first, so the trace moves
no more than the regions require.
"""
from __future__ import annotations

import heapq
from typing import Callable

from thunder.core.proxies import Proxy
from thunder.core.symbol import BoundSymbol, Tag


def _arg_names(bsym: BoundSymbol) -> list:
    return [a.name for a in bsym.flat_args if isinstance(a, Proxy)]


def _out_names(bsym: BoundSymbol) -> list:
    return [o.name for o in bsym.flat_outs if isinstance(o, Proxy)]


def partition(bsyms: list, fusible: Callable, is_barrier: Callable) -> list:
    """The trace's nodes in execution order: an ``int`` (the index of a bound symbol left alone) or a ``list``
    of indices (a region, in trace order). ``fusible(bsym)``, ``is_barrier(bsym)``: see the note above."""
    producer: dict[str, int] = {}
    group_of: list = [None] * len(bsyms)
    deps = [0] * len(bsyms)  # groups a node reaches upstream, up to the first group on each path
    group_deps: list[int] = []  # the same for each group, over its members
    groups: list[list[int]] = []
    open_groups: list[int] = []  # groups of the current segment, most recent last
    inputs: list[list[int]] = []  # the producers of each node (data and ordering edges)
    last_random = None
    for i, bsym in enumerate(bsyms):
        prods = sorted({producer[n] for n in _arg_names(bsym) if n in producer})
        if Tag.RANDOM in bsym.sym.tags or _has_random(bsym):
            if last_random is not None and last_random not in prods:
                prods.append(last_random)
            last_random = i
        inputs.append(prods)
        direct = through = 0  # the producers' groups; what the node reaches through other nodes and groups
        for p in prods:
            g = group_of[p]
            if g is None:
                through |= deps[p]
            else:
                direct |= 1 << g
                through |= group_deps[g]
        deps[i] = direct | through
        if is_barrier(bsym):
            open_groups = []
        elif fusible(bsym):
            blocked = _upstream(through, group_deps)
            g = _choose(prods, group_of, open_groups, blocked)
            if g is None:
                g = len(groups)
                groups.append([])
                group_deps.append(0)
                open_groups.append(g)
            groups[g].append(i)
            group_of[i] = g
            group_deps[g] |= deps[i] & ~(1 << g)
        for n in _out_names(bsym):
            producer[n] = i
    return _schedule(bsyms, inputs, group_of, groups, is_barrier)


def _upstream(bits: int, group_deps: list) -> int:
    """Every group upstream of the groups in ``bits`` (a group runs after everything any member needs)."""
    result, frontier = 0, bits
    while frontier:
        result |= frontier
        new = 0
        while frontier:
            low = frontier & -frontier
            new |= group_deps[low.bit_length() - 1]
            frontier ^= low
        frontier = new & ~result
    return result


def _has_random(bsym) -> bool:
    return any(Tag.RANDOM in s.sym.tags or _has_random(s) for s in bsym.subsymbols)


def _choose(prods, group_of, open_groups, blocked) -> int | None:
    allowed = [g for g in open_groups if not (blocked >> g) & 1]
    if not allowed:
        return None
    allowed_set = set(allowed)
    for p in reversed(prods):  # the latest producer's group first
        g = group_of[p]
        if g in allowed_set:
            return g
    return allowed[-1]


def _schedule(bsyms, inputs, group_of, groups, is_barrier) -> list:
    """Topological order of the condensed graph, segment by segment, earliest original position first."""
    order: list = []
    segment: list[int] = []
    for i, bsym in enumerate(bsyms):
        if is_barrier(bsym):
            order += _schedule_segment(segment, inputs, group_of, groups)
            order.append(i)
            segment = []
        else:
            segment.append(i)
    return order + _schedule_segment(segment, inputs, group_of, groups)


def _schedule_segment(segment, inputs, group_of, groups) -> list:
    if not segment:
        return []
    unit = {}  # node index -> key of its unit: ("g", group) or ("n", index)
    members: dict = {}
    for i in segment:
        key = ("n", i) if group_of[i] is None else ("g", group_of[i])
        unit[i] = key
        members.setdefault(key, []).append(i)
    waiting = {k: 0 for k in members}
    consumers: dict = {k: [] for k in members}
    for k, ms in members.items():
        preds = {unit[p] for m in ms for p in inputs[m] if p in unit and unit[p] != k}
        waiting[k] = len(preds)
        for pk in preds:
            consumers[pk].append(k)
    ready = [(ms[0], k) for k, ms in members.items() if waiting[k] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(k[1] if k[0] == "n" else members[k])
        for c in consumers[k]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (members[c][0], c))
    assert len(out) == len(members), "fusion regions formed a cycle"  # [Note: forming regions] rules this out
    return out


def region_interface(bsyms, used_later) -> tuple[list, list]:
    """The inputs of a run of bound symbols (what they read and do not define, in order of first use) and its
    outputs (what they define that ``used_later`` names, in order of definition)."""
    defined, inputs, seen = set(), [], set()
    for b in bsyms:
        for a in b.flat_args:
            if a.name not in defined and a.name not in seen:
                seen.add(a.name)
                inputs.append(a)
        defined.update(o.name for o in b.flat_outs)
    outputs, seen = [], set()
    for b in bsyms:
        for o in b.flat_outs:
            if o.name in used_later and o.name not in seen:
                seen.add(o.name)
                outputs.append(o)
    return inputs, outputs
