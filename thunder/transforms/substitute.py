"""Tracing a replacement for one bound symbol (used by executors' execution transforms)."""
from __future__ import annotations

from thunder.core.codeutils import flat_proxies
from thunder.core.trace import tracectx


def trace_substitution(bsym, fn, trace) -> list:
    """Bound symbols recorded by ``fn(*bsym.args, **bsym.kwargs)``, renamed so they define ``bsym``'s outputs."""
    scratch = trace.from_trace([])
    with tracectx(scratch):
        out = fn(*bsym.args, **bsym.kwargs)
    trace.names |= scratch.names
    trace._counters.update(scratch._counters)
    from thunder.transforms.rename import rename_outputs

    return rename_outputs(list(scratch.bound_symbols), out, bsym.output)
