"""Traces: a straight-line program of bound symbols that prints as runnable Python.

Every pass takes a trace and returns a new one built with ``from_trace``, stamped with the pass's
name and duration (``# Constructed by Delete Last Used (took 0 milliseconds)``). What thunder
executes is the compiled text of the final trace.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any

import torch

from thunder.core import codeutils
from thunder.core.proxies import FutureTensorProxy, TensorProxy, NumberProxy, type_string

class _TraceStack(threading.local):
    """The traces being recorded, innermost last: one stack per thread, so threads trace independently."""

    def __init__(self):
        self.traces: list["TraceCtx"] = []


_STACK = _TraceStack()


def get_tracectx() -> "TraceCtx | None":
    traces = _STACK.traces
    return traces[-1] if traces else None


@contextmanager
def tracectx(trace: "TraceCtx"):
    traces = _STACK.traces
    traces.append(trace)
    try:
        yield trace
    finally:
        traces.pop()


class TraceCtx:
    """A program: a name, parameters, bound symbols and the constants it closes over."""

    def __init__(self, name: str = "computation", params: list | None = None):
        self.name = name
        self.params: list = params or []  # proxies or plain parameter names (str)
        self.bound_symbols: list = []
        self.provenance: str | None = None
        self.decorators: list[str] = []
        self.constants: dict[str, Any] = {}  # objects the program refers to by name
        self.names: set[str] = set()
        self._counters: dict[str, int] = {}
        # state used while recording
        self._scopes: list[list] = [self.bound_symbols]
        self.current_tags = frozenset()
        self.specialized_numbers: set[str] = set()  # NumberProxy inputs whose values the prologue must check
        # (proxy, conversion, what) -> the Python value of a tensor the program asks for, or DataDependentError: set
        # by the jit driver (see [Note: value guards] in thunder/driver/value_guards.py)
        self.tensor_values = None
        # (op, a, b, what) -> a Python comparison of run-time extents decided by their values, or DataDependentError
        self.extent_comparisons = None
        self.has_extents = False  # whether run-time extents occur (see [Note: run-time extents] in extents.py)
        self.unbound_extents: list = []  # fresh extents awaiting their definition
        self.nonzero_counts: dict = {}  # tensor name -> the extent counting its nonzero elements
        self.counted: dict = {}  # the name of such an extent -> the tensor whose nonzero elements it counts
        # names of values this trace receives that nothing outside it holds once autograd has released them
        # (a backward's saved forward intermediates): a fusion executor may reuse their memory when they die
        self.released_inputs: frozenset = frozenset()
        # names of values this trace returns whose memory layout nothing outside it depends on (a forward's values
        # saved for its backward): a fusion executor may lay them out as it likes
        self.layout_free_outputs: frozenset = frozenset()
        # the layouts eager gives the tensors the program sees returned (``strides(proxy)``: a tuple, or
        # None where unknown), where the frontend recorded them: a fusion executor writes such outputs so
        self.eager_layouts = None

    # -- names -----------------------------------------------------------------------------
    def make_name(self, prefix: str = "t") -> str:
        n = self._counters.get(prefix, 0)
        while f"{prefix}{n}" in self.names:
            n += 1
        self._counters[prefix] = n + 1
        name = f"{prefix}{n}"
        self.names.add(name)
        return name

    def add_name(self, name: str) -> str:
        """Registers ``name`` if free, else returns a fresh variant of it."""
        if not name.isidentifier() or name in self.names or name in codeutils.RESERVED_NAMES:
            base = name if name.isidentifier() else "t_"
            i = 0
            while f"{base}_{i}" in self.names:
                i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name

    def constant_name(self, hint: str) -> str:
        """A name for a constant the program refers to: ``hint``, unless a variable, another constant or a name
        the printed program uses otherwise (its imports, its parameters, builtins) has it."""
        name = hint
        while name in self.constants or name in self.names or name in codeutils.RESERVED_NAMES:
            name += "_"
        return name

    def tensor(self, shape, dtype, device, requires_grad=False, name: str | None = None) -> TensorProxy:
        return TensorProxy(self.add_name(name) if name else self.make_name("t"), shape, dtype, device, requires_grad)

    def future(self, shape, dtype, device, requires_grad=False) -> FutureTensorProxy:
        return FutureTensorProxy(self.make_name("f"), shape, dtype, device, requires_grad)

    # -- recording -------------------------------------------------------------------------
    def push_scope(self):
        self._scopes.append([])

    def pop_scope(self) -> list:
        return self._scopes.pop()

    def record(self, bsym):
        self._scopes[-1].append(bsym)

    def recording_at_top_level(self) -> bool:
        """Whether bound symbols are recorded into the trace itself (not into a decomposition's scope)."""
        return len(self._scopes) == 1

    @contextmanager
    def tagged(self, *tags):
        old = self.current_tags
        self.current_tags = old | frozenset(tags)
        try:
            yield
        finally:
            self.current_tags = old

    # -- derivation --------------------------------------------------------------------------
    def from_trace(self, bound_symbols: list | None = None) -> "TraceCtx":
        """A new trace with this one's signature, names and constants, and the given body."""
        t = TraceCtx(self.name, list(self.params))
        t.decorators = list(self.decorators)
        t.constants = dict(self.constants)
        t.names = set(self.names)
        t._counters = dict(self._counters)
        t.specialized_numbers = self.specialized_numbers  # shared: every trace derived for a cache entry adds to it
        t.has_extents = self.has_extents
        t.nonzero_counts = dict(self.nonzero_counts)
        t.counted = dict(self.counted)
        t.released_inputs = self.released_inputs
        t.layout_free_outputs = self.layout_free_outputs
        t.eager_layouts = self.eager_layouts
        t.bound_symbols = list(bound_symbols) if bound_symbols is not None else []
        t._scopes = [t.bound_symbols]
        return t

    def set_provenance(self, pass_name: str, start_ns: int):
        self.provenance = f"# Constructed by {pass_name} (took {(time.perf_counter_ns() - start_ns) // 1_000_000} milliseconds)"
        return self

    # -- printing ------------------------------------------------------------------------------
    def python(self, *, print_depth: int | None = None) -> str:
        printer = codeutils.Printer(dict(self.constants), self.names)
        body = []
        for p in self.params:
            if isinstance(p, (TensorProxy, NumberProxy)):
                body.append(f'  # {p.name}: "{type_string(p)}"')
            else:
                body.append(f"  # {p}")
        for bsym in self.bound_symbols:
            body += codeutils.print_bsym(bsym, printer, indent=1, depth=print_depth)
        if not self.bound_symbols:
            body.append("  pass")
        params = ", ".join(p.name if isinstance(p, (TensorProxy, NumberProxy)) else p for p in self.params)
        lines = []
        if self.provenance:
            lines.append(self.provenance)
        lines += ["import torch", "from thunder.executors.torchex import no_autocast"]
        lines += _group_imports(printer.imports)
        lines.append("")
        lines += self.decorators
        lines.append(f"def {self.name}({params}):")
        lines += body
        self._printed_constants = printer.constants
        return "\n".join(lines) + "\n"

    def __repr__(self):
        return self.python()

    def python_callable(self):
        """Compiles the printed program. Constants it refers to by name are supplied as globals."""
        source = self.python()
        ctx = {"__name__": f"thunder.{self.name}"}
        ctx.update(self._printed_constants)
        code = compile(source, f"thunder.{self.name}", "exec")
        exec(code, ctx)
        fn = ctx[self.name]
        fn.__thunder_source__ = source
        return fn


def _group_imports(imports) -> list[str]:
    """``from m import a`` and ``from m import b`` become ``from m import a, b``."""
    by_module: dict[str, list[str]] = {}
    others = []
    for line in imports:
        if line.startswith("from ") and " import " in line:
            module, names = line[5:].split(" import ", 1)
            if module == "thunder.executors.torchex" and names == "no_autocast":
                continue
            by_module.setdefault(module, []).extend(n.strip() for n in names.split(","))
        else:
            others.append(line)
    return others + [f"from {m} import {', '.join(dict.fromkeys(ns))}" for m, ns in by_module.items()]

