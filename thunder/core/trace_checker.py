"""A consistency check for traces, run by the tests on the traces they produce.

Checks that every value is defined once (SSA) before it is used, is not used after it is deleted, that each
bound symbol's decomposition (what fusion executors run) reads only values defined before it or within it, and that
the printed program compiles.
"""
from __future__ import annotations

from thunder.core.proxies import TensorProxy, NumberProxy, Var
from thunder.core.statements import python_del


class TraceCheckError(AssertionError):
    pass


def check_trace(trace) -> None:
    defined: set[str] = set()
    deleted: set[str] = set()
    for p in trace.params:
        defined.add(p.name if isinstance(p, (TensorProxy, NumberProxy, Var)) else p)
    constants = set(trace.constants)
    for i, bsym in enumerate(trace.bound_symbols):
        for a in bsym.flat_args:
            if a.name in constants:
                continue
            if a.name in deleted:
                raise TraceCheckError(f"{trace.name}: {a.name} is used by {bsym.sym.id} (line {i}) after it was deleted")
            if a.name not in defined:
                raise TraceCheckError(f"{trace.name}: {a.name} is used by {bsym.sym.id} (line {i}) before it is defined")
        _check_decomposition(trace, bsym, defined, i, frozenset(constants))
        if bsym.sym is python_del:
            deleted.update(a.name for a in bsym.args)
            continue
        # (one value may stand twice among an operation's outputs: batch norm's empty statistics in eval mode)
        for o in {o.name: o for o in bsym.flat_outs}.values():
            if o.name in defined:
                raise TraceCheckError(f"{trace.name}: {o.name} is defined twice (second time by {bsym.sym.id}, line {i})")
            defined.add(o.name)
    compile(trace.python(), f"<{trace.name}>", "exec")


def _check_decomposition(trace, bsym, defined, line: int, within: frozenset = frozenset()) -> None:
    if not bsym.subsymbols:
        return
    # a run-time extent in the shape of a tensor the operation reads or writes can be read off that tensor
    inner = set(within) | {d.name for t in (*bsym.flat_args, *bsym.flat_outs) if isinstance(t, TensorProxy)
                           for d in t.shape if isinstance(d, NumberProxy)}
    for sub in bsym.subsymbols:
        for a in sub.flat_args:
            if a.name not in inner and a.name not in defined:
                raise TraceCheckError(f"{trace.name}: {a.name} is read by {sub.sym.id} in the decomposition of "
                                      f"{bsym.sym.id} (line {line}) and defined neither before nor within it")
        _check_decomposition(trace, sub, defined, line, inner)
        inner.update(o.name for o in sub.flat_outs)
