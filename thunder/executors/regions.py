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
its producers (vertical fusion); when those are all upstream of its other producers, it joins the most recent
group it is independent of (horizontal fusion).

A fusible node with no producer in any group (it reads only inputs and the outputs of unfused nodes, as the
values a backward recomputes from saved ones do) waits, with the waiting nodes it reads, for its first consumer
and goes where that goes: into the consumer's group when the consumer is fused (a group none of the waiting
nodes reaches, though the consumer may read only one of them). When the consumer is not fused
(a matmul), or a barrier or the end comes first, the waiting nodes join the most recent group that reads a value
they read or whose outputs nothing has read yet, else a group of their own. Joining the latest group instead
would compute them early, before unfused nodes that have already read that group, away from the regions that
use them (a backward recomputing ``silu(g)`` for a weight gradient would hold it across a matmul and compute
``sigmoid(g)`` again in the region of silu's gradient).

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
from thunder.core.symbol import BoundSymbol, Tag, has_tag


def _arg_names(bsym: BoundSymbol) -> list:
    return [a.name for a in bsym.flat_args if isinstance(a, Proxy)]


def _out_names(bsym: BoundSymbol) -> list:
    return [o.name for o in bsym.flat_outs if isinstance(o, Proxy)]


def partition(bsyms: list, fusible: Callable, is_barrier: Callable) -> list:
    """The trace's nodes in execution order: an ``int`` (the index of a bound symbol left alone) or a ``list``
    of indices (a region, in trace order). ``fusible(bsym)``, ``is_barrier(bsym)``: see the note above."""
    producer: dict[str, int] = {}
    grouping = _Grouping(bsyms)
    inputs: list[list[int]] = []  # the producers of each node (data and ordering edges)
    last_random = None
    for i, bsym in enumerate(bsyms):
        prods = sorted({producer[n] for n in _arg_names(bsym) if n in producer})
        if has_tag(bsym, Tag.RANDOM):
            if last_random is not None and last_random not in prods:
                prods.append(last_random)
            last_random = i
        inputs.append(prods)
        if is_barrier(bsym):
            grouping.settle_all()
            grouping.visit(i, prods, fused=False)
            grouping.open_groups = []
        else:
            grouping.visit(i, prods, fused=fusible(bsym))
        for n in _out_names(bsym):
            producer[n] = i
    grouping.settle_all()
    return _schedule(bsyms, inputs, grouping.group_of, [sorted(g) for g in grouping.groups], is_barrier)


class _Grouping:
    """What ``partition`` knows of the groups so far (see [Note: forming regions])."""

    def __init__(self, bsyms):
        self.bsyms = bsyms
        self.group_of: list = [None] * len(bsyms)
        self.deps = [0] * len(bsyms)  # groups a node reaches upstream, up to the first group on each path
        self.group_deps: list[int] = []  # the same for each group, over its members
        self.groups: list[list[int]] = []
        self.reads: list[set] = []  # the names each group's members read
        self.open_groups: list[int] = []  # groups of the current segment, most recent last
        self.consumed = 0  # groups whose outputs a node outside them has read
        self.waiting: dict[int, list] = {}  # a node with no producer in a group -> its cluster, until placed

    def visit(self, i: int, prods: list, fused: bool):
        clusters = _distinct(self.waiting.get(p) for p in prods)
        if not fused:  # what waits for this node runs before it
            for cluster in clusters:
                self._settle(cluster)
            clusters = []
        direct = through = 0  # the producers' groups; what the node reaches through other nodes and groups
        for p in prods:
            g = self.group_of[p]
            if g is None:
                through |= self.deps[p]
            else:
                direct |= 1 << g
                through |= self.group_deps[g]
        self.deps[i] = direct | through
        if not fused:
            self.consumed |= direct
            return
        waiting = [m for c in clusters for m in c] + [i]
        if not direct:  # it waits for its consumers (or a barrier), to go where they go
            for m in waiting:
                self.waiting[m] = waiting
            return
        # they join with it: what any of them reaches counts, read by this node or not
        allowed = self._allowed(through | self._reached(waiting[:-1]))
        g = next((self.group_of[p] for p in reversed(prods) if self.group_of[p] in allowed), None)  # vertical
        if g is None and allowed:  # horizontal
            g = max(allowed)
        self._join(waiting, g)
        self.consumed |= direct & ~(1 << self.group_of[i])

    def _settle(self, cluster: list):
        """Places a waiting cluster whose consumer is not fused: with the latest group that reads the same values
        or whose outputs nothing has read yet, else in a group of its own."""
        names = {n for m in cluster for n in _arg_names(self.bsyms[m])}
        g = next((g for g in sorted(self._allowed(self._reached(cluster)), reverse=True)
                  if not (self.consumed >> g) & 1 or not self.reads[g].isdisjoint(names)), None)
        self._join(cluster, g)

    def _reached(self, nodes: list) -> int:
        """The groups ``nodes`` reach upstream (up to the first group on each path)."""
        reached = 0
        for m in nodes:
            reached |= self.deps[m]
        return reached

    def _allowed(self, through: int) -> set:
        """The groups of the segment that are not upstream of what ``through`` reaches."""
        blocked = _upstream(through, self.group_deps)
        return {g for g in self.open_groups if not (blocked >> g) & 1}

    def settle_all(self):
        for cluster in _distinct(self.waiting.values()):
            self._settle(cluster)

    def _join(self, members: list, g: int | None):
        if g is None:
            g = len(self.groups)
            self.groups.append([])
            self.group_deps.append(0)
            self.reads.append(set())
            self.open_groups.append(g)
        for m in members:
            self.waiting.pop(m, None)
            self.groups[g].append(m)
            self.group_of[m] = g
            self.group_deps[g] |= self.deps[m] & ~(1 << g)
            self.reads[g].update(_arg_names(self.bsyms[m]))


def _distinct(clusters) -> list:
    """The clusters (lists) among ``clusters``, each once, None left out."""
    return list({id(c): c for c in clusters if c is not None}.values())


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
