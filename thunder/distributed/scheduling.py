"""Where collectives go in a trace: each issued as soon as its inputs exist, each waited for as late as possible.

``issue_early_wait_late(trace)`` reorders a trace (after the executors, before values are freed) so that
communication overlaps computation: a collective (and the packing that feeds it, if only the collective
reads it) moves up to just after the last definition it needs; a ``wait`` moves down to just before the
first use of its result (or the return), taking along the statements that depend on it and write state
(unpacking into ``.grad``). Everything else keeps its order, so a trace without collectives is unchanged.
"""
from __future__ import annotations

import time

from thunder.core.statements import python_return
from thunder.distributed.prims import COLLECTIVES, WAITS


def _names(proxies) -> set:
    return {p.name for p in proxies if hasattr(p, "name")}


def _issue_early(bsyms: list) -> list:
    out: list = []
    for bsym in bsyms:
        if bsym.sym not in COLLECTIVES:
            out.append(bsym)
            continue
        group = [bsym]
        needs = _names(bsym.flat_args)
        # the packing that feeds only this collective moves with it
        while out and _names(out[-1].flat_outs) and _names(out[-1].flat_outs) <= needs and out[-1].sym not in WAITS \
                and out[-1].sym is not python_return:
            feeder = out.pop()
            group.insert(0, feeder)
            needs = (needs - _names(feeder.flat_outs)) | _names(feeder.flat_args)
        at = len(out)
        while at > 0 and not (_names(out[at - 1].flat_outs) & needs) and out[at - 1].sym not in COLLECTIVES:
            at -= 1
        out[at:at] = group
    return out


def _wait_late(bsyms: list) -> list:
    out = list(bsyms)
    i = len(out) - 1
    while i >= 0:
        bsym = out[i]
        if bsym.sym in WAITS:
            # the wait and the statements that only consume what it (transitively) defines
            group, defined = [bsym], _names(bsym.flat_outs)
            j = i + 1
            while j < len(out) and out[j].sym is not python_return and (_names(out[j].flat_args) & defined) \
                    and not _names(out[j].flat_outs):
                group.append(out.pop(j))
            del out[i]
            at = i
            while at < len(out) and out[at].sym is not python_return and not (_names(out[at].flat_args) & defined) \
                    and out[at].sym not in WAITS:
                at += 1
            out[at:at] = group
        i -= 1
    return out


def issue_early_wait_late(trace):
    start = time.perf_counter_ns()
    bsyms = _wait_late(_issue_early(list(trace.bound_symbols)))
    if all(a is b for a, b in zip(bsyms, trace.bound_symbols)):
        return trace
    return trace.from_trace(bsyms).set_provenance("Collective scheduling", start)
