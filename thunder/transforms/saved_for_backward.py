"""Deciding, last, which forward values the backward reads: they are saved for it.

Autodiff (``thunder.transforms.autodiff``) leaves the backward trace reading forward values by name;
transforms may then change either trace (a data-parallel transform reads forward values in the
backward, say). Only after all of them does this pass decide what is saved: exactly the forward values
the backward reads, except those of activation-checkpointed regions, which the backward recomputes
(see ``thunder.driver.checkpointing``), those an in-place update would overwrite, which are saved as
copies (``thunder.transforms.overwritten_saves``), and small views of larger intermediates, also saved as
copies (``thunder.transforms.compact_saves``).
"""
from __future__ import annotations

import time

from thunder.core import statements
from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import TensorProxy, NumberProxy, Var
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, tracectx
from thunder.transforms.autodiff import ForwardBackward, forward_return
from thunder.transforms.dce import dce
from thunder.transforms.compact_saves import compact_saved_views
from thunder.transforms.overwritten_saves import protect_overwritten_saves


def save_for_backward(fb: ForwardBackward, fwd: TraceCtx, bwd: TraceCtx, recompute=None) -> tuple[TraceCtx, TraceCtx]:
    """``fwd`` returning what ``bwd`` reads of it, and ``bwd`` unpacking it (``fwd``/``bwd``: ``fb``'s traces,
    as transforms left them). ``recompute(fwd, bwd)``: ``(fwd, names)``, the forward (possibly with composites
    expanded) and names of further forward values the backward recomputes (a fusion executor's
    rematerialization, thunder/transforms/rematerialization.py)."""
    start = time.perf_counter_ns()
    ret = fwd.bound_symbols[-1]
    assert ret.sym is statements.python_return, "the forward trace ends with its return"
    forward = fwd.from_trace(fwd.bound_symbols[:-1])
    bwd = dce(bwd, name="Backward construction")
    recomputable = fb.recomputable
    if recompute is not None:
        forward, chosen = recompute(forward, bwd)
        recomputable = set(recomputable) | chosen
    bwd = _rematerialize(forward, bwd, recomputable)
    saved_tensors, saved_others = _saved_values(forward, bwd, fb.cotangents)
    bwd, saved_tensors = protect_overwritten_saves(forward, bwd, saved_tensors)
    if recompute is None:  # with a fusion executor, regions write the values they save out fresh
        returned = {p.name for p in flat_proxies(ret.args[0][0]["flat_output"])}
        bwd, saved_tensors = compact_saved_views(forward, bwd, saved_tensors, returned)
    bwd = _unpack_backward_inputs(bwd, saved_tensors, saved_others, fb.cotangents)
    bwd.released_inputs = _intermediates(forward, ret, saved_tensors)
    bwd.set_provenance("Backward pass", start)
    outputs = ret.args[0][0]  # forward_return's first part: the outputs as the transforms left them
    with tracectx(forward):
        statements.python_return(forward_return(outputs["output"], outputs["flat_args"], outputs["flat_output"], saved_tensors,
                                        saved_others))
    forward.set_provenance("Augmented forward pass", start)
    forward = dce(forward)
    forward.layout_free_outputs = _layout_free(saved_tensors, bwd, ret)
    return forward, bwd


def _rematerialize(fwd: TraceCtx, bwd: TraceCtx, recomputable: set) -> TraceCtx:
    """Moves checkpointed forward computations the backward reads into the backward (recompute, don't save)."""
    if not recomputable:
        return bwd
    producers = {}
    for b in fwd.bound_symbols:
        for o in b.flat_outs:
            producers[o.name] = b
    defined_in_bwd = {o.name for b in bwd.bound_symbols for o in b.flat_outs}
    needed = [a for b in bwd.bound_symbols for a in b.flat_args if a.name not in defined_in_bwd]
    chosen: dict[int, BoundSymbol] = {}

    def pull(name):
        b = producers.get(name)
        if b is None or name not in recomputable or id(b) in chosen:
            return
        chosen[id(b)] = b
        for a in b.flat_args:
            pull(a.name)

    for a in needed:
        pull(a.name)
    if not chosen:
        return bwd
    order = [b for b in fwd.bound_symbols if id(b) in chosen]
    # Each recomputation goes just before the first use of its outputs (by the backward or by another
    # recomputation), so recomputed values live no longer than they must.
    body = bwd.bound_symbols
    first_use = {}
    for i, b in enumerate(body):
        for a in b.flat_args:
            first_use.setdefault(a.name, i)
    at = {}
    for b in reversed(order):
        at[id(b)] = min((first_use.get(o.name, len(body)) for o in b.flat_outs), default=len(body))
        for a in b.flat_args:
            first_use[a.name] = min(first_use.get(a.name, len(body)), at[id(b)])
    placed = {}
    for b in order:
        placed.setdefault(at[id(b)], []).append(b)
    new_body = []
    for i, b in enumerate(body):
        new_body += placed.get(i, [])
        new_body.append(b)
    new_body += placed.get(len(body), [])
    return bwd.from_trace(new_body)


def _intermediates(fwd: TraceCtx, ret, saved_tensors) -> frozenset:
    """Names of the saved tensors that are the forward's own intermediates: neither its inputs nor anything it
    returns (autograd releases them before the backward runs, unless ``retain_graph``)."""
    held = {p.name for p in fwd.params if isinstance(p, TensorProxy)}
    held |= {o.name for o in ret.flat_args if isinstance(o, TensorProxy)}
    return frozenset(t.name for t in saved_tensors if t.name not in held)


# Operations whose result depends on their input's memory layout: torch's ``view`` fails on strides it cannot view.
_LAYOUT_SENSITIVE = frozenset({"view", "view_as"})


def _layout_free(saved_tensors, bwd: TraceCtx, ret) -> frozenset:
    """Names of the saved tensors whose layout nothing depends on: the program does not return them and the
    backward neither views them (``_LAYOUT_SENSITIVE``) nor returns them as gradients."""
    returned = {o.name for o in ret.flat_args if isinstance(o, TensorProxy)}
    sensitive = set()
    for b in bwd.bound_symbols:
        if b.sym.name in _LAYOUT_SENSITIVE or b.sym is statements.python_return:
            sensitive.update(a.name for a in b.flat_args if isinstance(a, TensorProxy))
    return frozenset(t.name for t in saved_tensors if t.name not in returned and t.name not in sensitive)


def _saved_values(fwd: TraceCtx, bwd: TraceCtx, cotangents: list):
    defined_in_fwd = {p.name for p in fwd.params if isinstance(p, (TensorProxy, NumberProxy))}
    for b in fwd.bound_symbols:
        defined_in_fwd.update(o.name for o in b.flat_outs)
    defined_in_bwd = {c.name for c in cotangents}
    saved, seen = [], set()
    for b in bwd.bound_symbols:
        for a in b.flat_args:
            if a.name in defined_in_fwd and a.name not in defined_in_bwd and a.name not in seen:
                seen.add(a.name)
                saved.append(a)
        defined_in_bwd.update(o.name for o in b.flat_outs)
    tensors = [s for s in saved if isinstance(s, TensorProxy)]
    others = [s for s in saved if not isinstance(s, TensorProxy)]
    return tensors, others


def _unpack_backward_inputs(bwd: TraceCtx, saved_tensors, saved_others, cotangents) -> TraceCtx:
    sfb, cts = Var("saved_for_backward"), Var("cotangents")
    c0, c1 = Var(bwd.make_name("C")), Var(bwd.make_name("C"))
    pre = [
        BoundSymbol(statements.unpack_sequence, (sfb,), {}, (c0, c1)),
        BoundSymbol(statements.clear_mutable_collection, (sfb,), {}, None),
    ]
    for coll, values in ((c0, saved_tensors), (c1, saved_others), (cts, cotangents)):
        if values:
            pre.append(BoundSymbol(statements.unpack_sequence, (coll,), {}, tuple(values)))
            pre.append(BoundSymbol(statements.clear_mutable_collection, (coll,), {}, None))
    return bwd.from_trace(pre + list(bwd.bound_symbols))
