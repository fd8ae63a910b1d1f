"""Turning a trace into an executable one: fusion executors claim regions, operator executors claim
bound symbols, and what nobody claims is replaced by its decomposition."""
from __future__ import annotations

import time

from thunder.core.statements import STATEMENTS
from thunder.extend import FusionExecutor, OperatorExecutor


def _claim(bsym, executors, trace) -> list:
    for ex in executors:
        if isinstance(ex, OperatorExecutor) and ex.can_execute(bsym):
            return ex.execution(bsym, trace)
    if not bsym.subsymbols:
        raise NotImplementedError(
            f"No executor can run {bsym.sym.id}; executors tried: {[e.name for e in executors]}. It has no "
            "decomposition: give it an implementation (an executor's register_implementation, or the torch_impl "
            "of thunder.extend.declare_primitive)")
    out = []
    for sub in bsym.subsymbols:
        out += _claim(sub, executors, trace)
    return out


def transform_for_execution(trace, executors):
    start = time.perf_counter_ns()
    for i, ex in enumerate(executors):
        if isinstance(ex, FusionExecutor):
            trace = ex.fusion_pass(trace, executors[:i])
    new = trace.from_trace([])
    out = []
    for bsym in trace.bound_symbols:
        if bsym.sym.executor is not None or bsym.sym in STATEMENTS:  # statements run as they print
            out.append(bsym)
        else:
            out += _claim(bsym, executors, new)
    new.bound_symbols = out
    new._scopes = [out]
    return new.set_provenance("Transform for execution", start)
