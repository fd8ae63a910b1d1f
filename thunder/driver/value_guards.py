"""Python values of tensors the program reads while thunder traces it: ``if (labels >= vocab).any(): raise``,
``if mask.all():``, ``lengths.tolist()``.

[Note: value guards]
Thunder traces tensors without their values. Where a program asks for one anyway (``bool``, ``item``, ``tolist``,
``int``, ``float``, ``__index__``) and the tensor is computed by deterministic operations from the call's tensor
arguments alone, none of which requires grad, the value is known: the operations computing it are replayed, with
their torch callables, on the arguments of the call being traced, and the answer becomes a constant of the trace.
The prologue replays the same operations on every call's arguments and checks the answer is the same
(``check_values``); where it is not, the call is a cache miss and is traced again, so eager's other branch (its
error, its other value) follows. That costs the replay on every call: a reduction of a label or mask tensor, say.

Values computed from parameters, buffers, captured tensors or tensors that require grad stay refused
(``DataDependentError``): they change with every optimizer step or activation, and the trace would change with
them. So do values drawn by random operations. A module's boolean buffers (masks, flags such as Glow's ``initialized``)
do not change with training: they are checked like arguments.

A Python comparison of run-time extents (``if label_index.size(0) > 0`` of a ``nonzero``), which thunder cannot decide
for every value, is decided the same way where the extents are computed from the arguments: the prologue checks the
comparison's answer, not the extents' values. The exact value of a run-time extent (``int(n)``, ``range(n)``) stays
refused: a trace specialized on it would recompile for every count.
"""
from __future__ import annotations

import torch

from thunder.core import statements as st
from thunder.core.extents import is_runtime, poly_of
from thunder.core.proxies import DataDependentError, NumberProxy, TensorProxy
from thunder.core.symbol import Tag, has_tag
from thunder.core.trace import TraceCtx, tracectx
from thunder.driver import frontend
from thunder.executors.passes import transform_for_execution
from thunder.extend import resolve_executors

CONVERSIONS = {  # what the program asked -> how the value is read from the tensor
    "bool": bool,
    "item": lambda t: t.item(),
    "tolist": lambda t: t.tolist(),
    "int": int,
    "float": float,
    "index": lambda t: t.__index__(),
}


class Replay:
    """Computes a Python value from tensors: ``trace`` (the operations computing a tensor, or extents, from the
    tensors as its parameters), run by the torch executor, then ``convert`` of its result. ``label`` says what."""

    def __init__(self, trace: TraceCtx, convert, label: str):
        self.trace = transform_for_execution(trace, resolve_executors(["torch"]))
        self.fn = self.trace.python_callable()
        self.convert, self.label = convert, label

    def __call__(self, *tensors):
        return self.convert(self.fn(*tensors))

    def __repr__(self):
        return f"<{self.label}, computed by:\n{self.trace}>"


class ValueGuards:
    """The values a trace specialized on, each with how to compute it from the call's arguments."""

    def __init__(self, tracer, arguments: frozenset, prologue=None):
        self.tracer = tracer
        self.arguments = arguments  # names of the input proxies that are the call's tensor arguments
        self.prologue = prologue  # its inputs: the jitted module's parameters and buffers among them
        self.guards: list = []  # (Replay, source proxies, value)

    def value(self, proxy: TensorProxy, conversion: str, what: str, constant: bool = False):
        """The value ``what`` asks of ``proxy``, computed from the call's arguments (``constant``: from no input, the
        same on every call); else DataDependentError."""
        checked = conversion in ("bool", "item") and getattr(proxy, "_thunder_checked_true", False)
        proxy = self.tracer.resolve(proxy)  # its current value, after in-place updates
        subject = f"tensor {proxy.name}"
        try:
            tensor, value = self._replay([proxy], CONVERSIONS[conversion], f"{conversion} of {proxy.name}", what,
                                         subject, constant)
        except DataDependentError:
            if not checked:
                raise
            # torch._is_all_true of values not known while tracing: True, checked when the program runs (see [Note:
            # checks that all elements hold] in thunder/torch/reductions.py)
            from thunder.torch.reductions import assert_all_true

            self.tracer.call(assert_all_true, (proxy, f"torch._is_all_true({proxy.name})"), {})
            return True
        if proxy.ndim == 0:
            proxy._thunder_value = tensor  # see known_value
        return value

    def compare(self, op, a, b, what: str) -> bool:
        """``op(a, b)`` of run-time extents (``if label_index.size(0) > 0``), decided by their values, computed from
        the call's arguments; else DataDependentError."""
        pa, pb = poly_of(a), poly_of(b)  # as now: a later assume_equal may make one extent stand for another
        roots = {**pa.base_roots(), **pb.base_roots()}
        unknown = [r for r in roots.values() if is_runtime(r)]
        subject = ", ".join(f"{r.name}, {r.origin}," for r in unknown)
        known = {name: r._specialize(what) for name, r in roots.items() if not is_runtime(r)}
        # the count of a mask's True elements is computed from the mask alone, not from what it selects
        counted = self.tracer.trace.counted
        targets = [counted.get(r.name, r) for r in unknown]

        def decide(values):
            values = (values,) if isinstance(values, torch.Tensor) else values
            values = [int(torch.count_nonzero(v)) if isinstance(v, torch.Tensor) else v for v in values]
            values = dict(known, **dict(zip((r.name for r in unknown), values)))
            return bool(op(pa.value(values), pb.value(values)))

        return self._replay(targets, decide, what, what, subject)[1]

    def _replay(self, targets: list, convert, label: str, what: str, subject: str, constant: bool = False):
        """(the values of ``targets``, ``convert`` of them), computed from the call's arguments while tracing; the
        prologue will compute the same on every call (a guard), unless they are computed from no input at all.
        ``constant``: only those (else DataDependentError)."""
        trace = self._computation(targets, what, subject, constant)
        if constant and trace.params:
            raise _refused(what, subject, f"it is computed from {trace.params[0].name}, an input of the call")
        try:
            replay = Replay(trace, convert, label)
            with torch._C.DisableTorchFunction():  # real tensors, not traced ones
                result = replay.fn(*(self.tracer.real_inputs[p.name] for p in trace.params))
        except Exception as e:  # noqa: BLE001 - the trace's operations are eager's: an error here is thunder's
            raise _refused(what, subject, f"replaying the operations computing it failed ({e})") from e
        with torch._C.DisableTorchFunction():
            value = convert(result)  # eager's error where there is one (bool() of several values)
        if trace.params:  # (a value computed from no input is the same on every call: nothing to check)
            self.guards.append((replay, tuple(trace.params), value))
        return result, value

    def _computation(self, targets: list, what: str, subject: str, constant: bool = False) -> TraceCtx:
        """A trace of the operations computing ``targets`` (tensors, or extents) from the call's arguments (its
        parameters), in trace order, returning them. ``constant``: DataDependentError where an input number takes
        part (specialized otherwise)."""
        trace = self.tracer.trace
        position, producer = {}, {}
        for scope in trace._scopes:  # the open scopes, outermost first: together in the order recorded
            for bsym in scope:
                position[id(bsym)] = len(position)
                for o in bsym.flat_outs:
                    if isinstance(o, (TensorProxy, NumberProxy)):
                        producer[o.name] = bsym
        needed, sources, stack, seen = {}, {}, list(targets), set()
        while stack:
            t = stack.pop()
            if t.name in seen:
                continue
            seen.add(t.name)
            bsym = producer.get(t.name)
            if bsym is None:
                sources[t.name] = self._source(t, what, subject)
                continue
            self._check_operation(bsym, what, subject)
            needed[id(bsym)] = bsym
            for a in bsym.flat_args:
                if isinstance(a, TensorProxy) or is_runtime(a):
                    stack.append(a)
                elif isinstance(a, NumberProxy):
                    if constant:
                        raise _refused(what, subject, f"it is computed from the number {a.name}, an input of the call")
                    a._specialize(what)  # the prologue checks the input numbers it came from
        sub = trace.from_trace(sorted(needed.values(), key=lambda b: position[id(b)]))
        sub.name, sub.params = f"value_of_{targets[0].name}", [sources[n] for n in sorted(sources)]
        sub.decorators = ["@torch.no_grad()", "@no_autocast"]  # as the computation runs: its casts are recorded
        with tracectx(sub):
            st.python_return(targets[0] if len(targets) == 1 and isinstance(targets[0], TensorProxy) else tuple(targets))
        return sub

    def _source(self, t, what: str, subject: str) -> TensorProxy:
        real = self.tracer.real_inputs.get(t.name)
        if isinstance(t, TensorProxy) and real is not None and self._boolean_buffer(t, real):
            return t
        if not isinstance(t, TensorProxy) or t.name not in self.arguments or real is None:
            raise _refused(what, subject, f"it is computed from {t.name}, which is not a tensor argument of the call (a "
                                          "parameter, a buffer or a captured tensor: it may change between calls)")
        with torch._C.DisableTorchFunction():  # a real tensor: no traced call
            requires_grad = real.requires_grad
        if requires_grad:
            raise _refused(what, subject, f"it is computed from {t.name}, which requires grad (its values change "
                                          "between calls)")
        return t

    def _boolean_buffer(self, t: TensorProxy, real: torch.Tensor) -> bool:
        """Whether ``t`` is a module's boolean buffer (a mask, a flag: ``self.register_buffer("mask", m.bool())``),
        whose values do not change with training as parameters' and statistics' do: checked like an argument's."""
        with torch._C.DisableTorchFunction():  # a real tensor: no traced call
            if real.dtype is not torch.bool or real.requires_grad:
                return False
        sources = [(i.proxy, i.source) for i in self.tracer.inputs]  # captured: modules the jitted one does not hold
        sources += self.prologue.inputs if self.prologue is not None else []
        return any(p is t and isinstance(src, frontend.ModuleTensorSource) and src.collection == "_buffers"
                   for p, src in sources)

    def _check_operation(self, bsym, what: str, subject: str):
        if has_tag(bsym, Tag.RANDOM):
            raise _refused(what, subject, f"it is computed by a random operation ({bsym.sym.name})")
        if has_tag(bsym, Tag.SIDE_EFFECT, Tag.COLLECTIVE):
            raise _refused(what, subject, f"it is computed by {bsym.sym.name}, which thunder cannot replay")


def _refused(what: str, subject: str, reason: str) -> DataDependentError:
    return DataDependentError(
        f"{what} needs the value of {subject} but thunder traces tensors without their values, and {reason}. "
        "thunder specializes only on values computed from the call's tensor arguments that do not require grad. "
        "Express the control flow with tensor operations (e.g. torch.where) or move it out of the jitted function.")
