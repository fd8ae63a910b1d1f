"""Running a cache entry."""
from __future__ import annotations

from thunder.executors import pythonex as px


def run_entry(entry, inps):
    if entry.uses_autograd:
        from thunder.transforms.autodiff import run_with_autograd

        out = run_with_autograd(entry, inps)
    else:
        out = entry.computation(*inps)
    rebuild = entry.output_rebuild
    return out if rebuild is None else rebuild(out)


def first_inputs(entry, args, kwargs):
    """The inputs of the call ``entry`` was just compiled for.

    Its prologue rejects that call only when the program changed, while it was traced, Python state it
    had read (a counter it increments, a global it assigns): the trace is right for this call, whose
    inputs are then gathered without the checks; the next call sees the changed state and recompiles.
    """
    try:
        return entry.prologue(args, kwargs)
    except px.CacheMiss:
        return unchecked_prologue(entry)(args, kwargs)


def unchecked_prologue(entry):
    trace = entry.prologue_traces[-1]
    return trace.from_trace([b for b in trace.bound_symbols if b.sym not in px.CHECKS]).python_callable()


def run_inline(cd, args, kwargs):
    """A jitted callable called while another program is traced runs as plain Python, so that the outer
    trace records its operations (forward and backward then follow the outer program)."""
    from thunder.driver import python_state

    recorder = python_state.current()
    if recorder is not None and cd.module is not None:
        recorder.watch(cd.module, f"the jitted {type(cd.module).__name__}")
    return cd.fn(*args, **kwargs)
