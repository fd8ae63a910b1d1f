"""Reporting Python side effects of a traced program (``sharp_edges="warn"`` or ``"error"``).

thunder records the program's torch operations; plain Python runs only while tracing. So ``print(...)``,
``random.random()``, ``time.time()`` and changes to module-level lists, dicts and sets happen on the call that
traces, not on later calls, which run the trace. (``torch.manual_seed`` is recorded in the trace: see
thunder/driver/random_state.py.) With ``sharp_edges`` set, the builtins such a program calls are watched while
tracing (``sys.setprofile``, this thread only) and each kind of side effect is reported once.
"""
from __future__ import annotations

import builtins
import contextlib
import random
import sys
import time
import warnings

_SIDE_EFFECTS = {builtins.print: "print()", builtins.input: "input()", builtins.open: "open()",
                 time.time: "time.time()", time.perf_counter: "time.perf_counter()", time.monotonic: "time.monotonic()",
                 time.sleep: "time.sleep()"}
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add",
                       "discard", "popitem", "__setitem__", "__delitem__"})


def _is_library_frame(frame) -> bool:
    """Frames of thunder, torch and the standard library: their internal caches are not the program's effects."""
    module = frame.f_globals.get("__name__", "") or ""
    top = module.partition(".")[0]
    return top in ("thunder", "torch") or top in sys.stdlib_module_names or (top.startswith("_") and top != "__main__")


def _describe(fn, frame) -> str | None:
    if _is_library_frame(frame):
        return None
    what = _SIDE_EFFECTS.get(fn)
    if what is not None:
        return what
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, random.Random):
        return f"the Python random module ({fn.__name__})"
    name = getattr(fn, "__name__", "")
    if isinstance(owner, (list, dict, set)) and name in _MUTATORS:
        for k, v in frame.f_globals.items():
            if v is owner:
                return f"{type(owner).__name__}.{name} on the module-level {type(owner).__name__} {k!r}"
    return None


@contextlib.contextmanager
def watched(fn, mode):
    """Reports the Python side effects ``fn``'s program makes while tracing (mode "warn" or "error")."""
    if mode not in ("warn", "error"):
        yield
        return
    from thunder.driver.frontend import ThunderSharpEdgeError

    reported: set[str] = set()
    previous = sys.getprofile()
    errors: list[str] = []

    def profile(frame, event, arg):
        if previous is not None:
            previous(frame, event, arg)
        if event != "c_call":
            return
        what = _describe(arg, frame)
        if what is None or what in reported:
            return
        reported.add(what)
        msg = (f"Sharp edge: {fn!r} calls {what} while thunder traces it. Python side effects run only while tracing, "
               "not on later calls, which run the recorded torch operations; move them out of the jitted function.")
        if mode == "error":
            errors.append(msg)
        else:
            warnings.warn(msg, stacklevel=2)

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
    if errors:
        raise ThunderSharpEdgeError(errors[0])
