"""Where collectives go in a trace: each issued as soon as its inputs exist, each waited for as late as possible.

``issue_early_wait_late(trace)`` reorders a trace (after the executors, before values are freed) so that
communication overlaps computation: a collective (and the packing that feeds it, if only the collective
reads it) moves up to just after the last definition it needs; a ``wait`` moves down to just before the
first use of its result (or the return), taking along the statements that depend on it and write state
(unpacking into ``.grad``). Everything else keeps its order, so a trace without collectives is unchanged.
``schedule_gathers`` does the same, except that all-gathers of parameters go at most a bounded number ahead.

These passes run after the executors, which wrap each primitive in a symbol of their own: ``implemented``
finds the primitive behind it.
"""
from __future__ import annotations

import time

from thunder.core.statements import python_return
from thunder.distributed.prims import COLLECTIVES, WAITS, all_gather, check_same_plan
from thunder.transforms.dce import has_effects

_KNOWN = COLLECTIVES | WAITS


def implemented(bsym):
    """The symbol ``bsym`` runs: itself, or, for an executor's symbol standing for one primitive, that primitive."""
    while bsym.sym not in _KNOWN and len(bsym.subsymbols) == 1:
        bsym = bsym.subsymbols[0]
    return bsym.sym


def _names(proxies) -> set:
    return {p.name for p in proxies if hasattr(p, "name")}


def _issue_early(bsyms: list) -> list:
    out: list = []
    for bsym in bsyms:
        if implemented(bsym) not in COLLECTIVES:
            out.append(bsym)
            continue
        group = [bsym]
        needs = _names(bsym.flat_args)
        # the packing that feeds only this collective moves with it
        while out and _names(out[-1].flat_outs) and _names(out[-1].flat_outs) <= needs and implemented(out[-1]) not in WAITS \
                and out[-1].sym is not python_return:
            feeder = out.pop()
            group.insert(0, feeder)
            needs = (needs - _names(feeder.flat_outs)) | _names(feeder.flat_args)
        at = len(out)
        while at > 0 and not (_names(out[at - 1].flat_outs) & needs) and implemented(out[at - 1]) not in COLLECTIVES:
            at -= 1
        out[at:at] = group
    return out


def _wait_late(bsyms: list, also=frozenset()) -> list:
    """Each wait (and each statement whose id is in ``also``) just before the first statement using its result;
    statements that only consume a wait's result and define nothing (writing into ``.grad``) come along.
    Working from the end, a chain (a wait, then a slice of its result) moves down as a whole."""
    n = len(bsyms)
    keys = [float(i) for i in range(n)]
    for i in reversed(range(n)):
        bsym = bsyms[i]
        is_wait = implemented(bsym) in WAITS
        if not (is_wait or id(bsym) in also):
            continue
        defined = _names(bsym.flat_outs)
        readers = [j for j in range(i + 1, n) if _names(bsyms[j].flat_args) & defined]
        carried = [j for j in readers if is_wait and not _names(bsyms[j].flat_outs) and bsyms[j].sym is not python_return]
        users = [j for j in readers if j not in carried]
        first_use = min((keys[j] for j in users), default=keys[n - 1])
        keys[i] = first_use - 1e-3 * (1 + (n - i) / n)  # waits for the same statement keep their order
        for k, j in enumerate(carried):
            keys[j] = keys[i] + 1e-6 * (k + 1)
    return [b for _, b in sorted(zip(keys, bsyms), key=lambda kb: kb[0])]


def issue_early_wait_late(trace):
    start = time.perf_counter_ns()
    bsyms = _wait_late(_issue_early(list(trace.bound_symbols)))
    if all(a is b for a, b in zip(bsyms, trace.bound_symbols)):
        return trace
    return trace.from_trace(bsyms).set_provenance("Collective scheduling", start)


def schedule_gathers(trace, prefetch: int):
    """``issue_early_wait_late``, except that all-gathers (of parameters, which all exist from the start) are
    issued in the order their results are needed, at most ``prefetch`` of them in flight: the ``k``-th right
    after the wait of the ``(k - prefetch)``-th. That bounds the memory the gathered parameters take. None goes
    before the check that every rank gathers the same (``check_same_plan``)."""
    start = time.perf_counter_ns()
    gathers = {b.output.name: b for b in trace.bound_symbols if implemented(b) is all_gather}
    rest = [b for b in trace.bound_symbols if implemented(b) is not all_gather]
    # what only reshapes gathered parameters (slices of a bucket, the padding cut off) moves down with their waits
    gathered, reshaping = set(), set()
    for b in rest:
        args = _names(b.flat_args)
        if implemented(b) in WAITS and args <= set(gathers):
            gathered |= _names(b.flat_outs)
        elif args and args <= gathered and _names(b.flat_outs) and not has_effects(b) and b.sym is not python_return:
            gathered |= _names(b.flat_outs)
            reshaping.add(id(b))
    rest = _wait_late(_issue_early(rest), reshaping)
    defined_at = {}
    for i, b in enumerate(rest):
        for name in _names(b.flat_outs):
            defined_at.setdefault(name, i)
    waits = [(i, b.args[0].name) for i, b in enumerate(rest) if implemented(b) in WAITS and b.args[0].name in gathers]
    keys = [float(i) for i in range(len(rest))]
    checked_at = max((i for i, b in enumerate(rest) if implemented(b) is check_same_plan), default=-1)
    placed = []
    for k, (wait_at, future) in enumerate(waits):
        gather = gathers.pop(future)
        after = max([defined_at.get(a, -1) for a in _names(gather.flat_args)] + [waits[k - prefetch][0] if k >= prefetch else -1,
                                                                               checked_at])
        placed.append((after + 0.5 + 0.25 * k / max(len(waits), 1), gather))
    assert not gathers, "an all-gather whose result is never waited for"
    ordered = sorted([*zip(keys, rest), *placed], key=lambda kb: kb[0])
    bsyms = [b for _, b in ordered]
    if all(a is b for a, b in zip(bsyms, trace.bound_symbols)):
        return trace
    return trace.from_trace(bsyms).set_provenance("Collective scheduling", start)
